-- force_unlock.lua: release the lock whoever holds it.
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- KEYS[5] token counter
-- ARGV[1] channel prefix
-- ARGV[2] publish commands
-- ARGV[3] client channel prefix: the holder's client is told (tell_evicted)
--
-- Returns 1 if a holder was removed, else 0.
--
-- Rules: B8 force unlock, B5 purge, X3 the head is woken (a fairlock head
-- is granted the lock, see prelude.lua).
do
  local err = refused(ARGV[2], ARGV[1], ARGV[3])
  if err then
    return err
  end
end
local head, live = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], '')
tell_evicted(KEYS[1], KEYS[5], ARGV[3])
local deleted = redis.call('del', KEYS[1])
hand_over_to(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], head, live)
return deleted
