-- unlock.lua: release one hold of the lock.
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] unlock latch "redisson_unlock_latch:{name}:<requestID>"
-- KEYS[5] alive
-- ARGV[1] owner field
-- ARGV[2] lease in ms, restored while holds remain
-- ARGV[3] channel prefix
-- ARGV[4] publish commands
-- ARGV[5] latch lifetime in ms
--
-- Returns the hold count left (0: released), or -1 when the owner does not
-- hold the lock (nothing is changed then).
--
-- Rules: B2 count down, B4 release at 0 wakes the head, non-holder fails,
-- B5 purge, B10 a retried request ID returns the first result, X3.
local done = redis.call('get', KEYS[4])
if done then
  return tonumber(done)
end
purge(KEYS[2], KEYS[3], KEYS[5], server_now(), ARGV[3], ARGV[4], ARGV[1])
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local count = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if count > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
else
  redis.call('del', KEYS[1])
  wake_head(KEYS[2], ARGV[3], ARGV[4])
end
redis.call('set', KEYS[4], count, 'px', ARGV[5])
return count
