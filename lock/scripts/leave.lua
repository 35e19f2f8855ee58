-- leave.lua: take an owner out of the queue (it gave up, was cancelled, or
-- failed while waiting), and optionally drop a hold an acquire of unknown
-- outcome may have granted.
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- ARGV[1] owner field
-- ARGV[2] channel prefix
-- ARGV[3] publish commands
-- ARGV[4] "1": also drop one hold count of the owner if it holds the lock
--         (an acquire whose reply was lost, or that was not replicated)
--
-- Returns 1 if the owner was queued, else 0.
--
-- Rules: B7 giving up leaves the queue, X3 a new head is woken, X5 nothing
-- is left behind. LREM runs in the server; no Lua loop visits the waiters
-- (X8).
local me = ARGV[1]
purge(KEYS[2], KEYS[3], KEYS[4], server_now(), ARGV[2], ARGV[3], me)
local was_head = redis.call('lindex', KEYS[2], 0) == me
local queued = redis.call('zrem', KEYS[3], me)
redis.call('zrem', KEYS[4], me)
redis.call('lrem', KEYS[2], 0, me)
if ARGV[4] == '1' and redis.call('hexists', KEYS[1], me) == 1 then
  if redis.call('hincrby', KEYS[1], me, -1) <= 0 then
    redis.call('del', KEYS[1])
  end
end
if was_head or redis.call('exists', KEYS[1]) == 0 then
  wake_head(KEYS[2], ARGV[2], ARGV[3])
end
return queued
