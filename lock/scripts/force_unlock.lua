-- force_unlock.lua: release the lock whoever holds it.
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- KEYS[5] token counter (unused; every script takes the same five keys)
-- ARGV[1] channel prefix
-- ARGV[2] publish commands
--
-- Returns 1 if a holder was removed, else 0.
--
-- Rules: B8 force unlock, B5 purge, X3 the head is woken.
purge(KEYS[2], KEYS[3], KEYS[4], server_now(), ARGV[1], ARGV[2], '')
local deleted = redis.call('del', KEYS[1])
wake_head(KEYS[2], ARGV[1], ARGV[2])
return deleted
