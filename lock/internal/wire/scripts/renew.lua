-- renew.lua: the watchdog's renewal, and the check that a hold still exists.
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- KEYS[5] token counter
-- ARGV[1] owner field
-- ARGV[2] lease in ms; "0" only checks
-- ARGV[3] token of the hold
-- ARGV[4] the hold's own lease in ms (what it was taken with)
-- ARGV[5] channel prefix
-- ARGV[6] publish commands
--
-- Returns 1 while that hold lasts, 2 when it lasts and this call took its
-- hand-over grant up, else 0 (it was lost: the lease ran out, someone
-- force-unlocked or deleted the lock, or a newer hold replaced it; X7).
--
-- A hand-over grant (field 0) is taken up by any renewal or check: it gets
-- the longer of the two leases (take_up), so it lives no longer than the
-- hold asked for - an Unlock that then fails leaves it a lease at most
-- (X13) - and an Extend still gets at least what it asked for. The reply 2
-- lets the client count that longer lease from the request's send time.
--
-- Rules: B6 watchdog renewal to the full lease, X12 never shortened (but a
-- grant's provisional expiry gives way to the hold's lease), X13, X15.
do
  local err = refused(ARGV[6], ARGV[5])
  if err then
    return err
  end
end
local held = redis.call('hget', KEYS[1], ARGV[1])
if not held or hold_token(KEYS[5]) ~= num(ARGV[3]) then
  return 0
end
local lease = num(ARGV[2])
if held == '0' then
  take_up(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], ARGV[6], ARGV[1], math.max(lease, num(ARGV[4])))
  return 2
end
if lease > 0 then
  extend(KEYS[1], KEYS[5], lease)
end
return 1
