-- waiter_kinds.lua: tell fairlock waiters from Redisson waiters
-- (Mutex.Inspect).
--
-- KEYS[1] lock hash (unused; every lock script takes the same five keys)
-- KEYS[2] queue (unused)
-- KEYS[3] timeouts (unused)
-- KEYS[4] alive
-- KEYS[5] token counter (unused)
-- ARGV    queued owner fields
--
-- Returns one integer per owner: 1 when it has a fairlock liveness
-- deadline (only fairlock waiters write one, X2), else 0 (a Redisson
-- waiter, or one no longer queued). Changes nothing; visits only the
-- owners given.
local out = {}
for i, owner in ipairs(ARGV) do
  if redis.call('zscore', KEYS[4], owner) then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
