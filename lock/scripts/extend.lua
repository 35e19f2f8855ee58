-- extend.lua: make one hold last at least a given lease from now
-- (Mutex.Extend).
--
-- KEYS[1] lock hash
-- KEYS[2] queue (unused; every script takes the same five keys)
-- KEYS[3] timeouts (unused)
-- KEYS[4] alive (unused)
-- KEYS[5] token counter
-- ARGV[1] owner field
-- ARGV[2] lease in ms
-- ARGV[3] token of the hold to extend
--
-- Returns 1 when that hold still exists and now lives at least the lease
-- more, else 0 and changes nothing (the lease ran out, someone
-- force-unlocked or deleted the lock, or a newer hold replaced it: a
-- released or lost hold is never brought back).
--
-- It never shortens a hold (extend in prelude.lua), so the client's
-- deadline - the send time plus the lease - never passes after the
-- server's expiry (X12). A retry sends the same request again; applying
-- it twice is harmless.
--
-- Rules: X12 never shortened, X7 a lost hold is reported, X15 the token
-- counter outlives the hold.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 or hold_token(KEYS[5]) ~= tonumber(ARGV[3]) then
  return 0
end
-- A hand-over grant (0) is taken up: one hold.
if redis.call('hget', KEYS[1], ARGV[1]) == '0' then
  redis.call('hset', KEYS[1], ARGV[1], 1)
end
extend(KEYS[1], KEYS[5], tonumber(ARGV[2]))
return 1
