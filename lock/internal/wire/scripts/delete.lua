-- delete.lua: remove the lock's state: hash, queue and both deadline zsets.
-- The fencing counter stays, so tokens never go backwards (X6).
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- KEYS[5] token counter (kept)
-- ARGV[1] channel prefix
-- ARGV[2] publish commands
-- ARGV[3] client channel prefix: the holder's client is told (tell_evicted)
--
-- Returns the number of keys removed.
--
-- Rules: B8 delete, B5 purge, X3 the live head is woken: it finds the lock
-- free and takes it; the other waiters notice at their next heartbeat and
-- queue again.
do
  local err = refused(ARGV[2], ARGV[1], ARGV[3])
  if err then
    return err
  end
end
local head = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], '')
tell_evicted(KEYS[1], KEYS[5], ARGV[3])
local removed = redis.call('del', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if head then
  notify(ARGV[2], ARGV[1], head)
end
return removed
