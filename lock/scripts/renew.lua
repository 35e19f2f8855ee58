-- renew.lua: the watchdog's renewal, and the check that a hold still exists.
--
-- KEYS[1] lock hash
-- KEYS[2] queue (unused; every script takes the same five keys)
-- KEYS[3] timeouts (unused)
-- KEYS[4] alive (unused)
-- KEYS[5] token counter
-- ARGV[1] owner field
-- ARGV[2] lease in ms; "0" only checks
-- ARGV[3] token of the hold
-- ARGV[4] "1" when the lease is the hold's own and a hand-over grant not
--         yet taken up may be set to it (the watchdog's confirmation,
--         Client.confirm); "0" never shortens (Mutex.Extend)
--
-- Returns 1 while that hold lasts, else 0 (it was lost: the lease ran out,
-- someone force-unlocked or deleted the lock, or a newer hold replaced it;
-- X7).
--
-- Rules: B6 watchdog renewal to the full lease, X12 never shortened (but
-- a grant's provisional expiry gives way to the hold's lease), X15.
local held = redis.call('hget', KEYS[1], ARGV[1])
if not held or hold_token(KEYS[5]) ~= tonumber(ARGV[3]) then
  return 0
end
local lease = tonumber(ARGV[2])
if held == '0' then
  -- A hand-over grant is taken up: one hold.
  redis.call('hset', KEYS[1], ARGV[1], 1)
  if lease > 0 and ARGV[4] == '1' then
    take_up(KEYS[1], KEYS[5], lease)
    return 1
  end
end
if lease > 0 then
  extend(KEYS[1], KEYS[5], lease)
end
return 1
