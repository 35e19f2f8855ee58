-- prune.lua: drop the dead waiters of a lock (Client.PruneWaiters).
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- KEYS[5] token counter
-- ARGV[1] channel prefix
-- ARGV[2] publish commands
--
-- Returns the number of queue entries removed.
--
-- A waiter is dead by the rule every script purges heads by (is_dead in
-- prelude.lua): its fairlock liveness deadline has passed, or, for a
-- Redisson waiter, its Redisson deadline. First the run of dead heads goes
-- as every script removes it (purge, which wakes the new head); then the
-- dead waiters further back, found through the deadline zsets (only
-- entries whose deadline has passed are visited, never the whole queue;
-- each LREM runs in the server). Taking a waiter out of the middle only
-- gives those behind it more margin, as leave.lua does. When the lock is
-- free, the new head is granted it (a Redisson head is woken), as after a
-- force unlock.
--
-- Rules: B5 dead waiters removed, X3 the new head is woken, X11 Redisson
-- waiters judged by their own deadlines, and told when removed.
do
  local err = refused(ARGV[2], ARGV[1])
  if err then
    return err
  end
end
local now = server_now()
local before = redis.call('llen', KEYS[2])
-- Only dead owners are removed below, so the live head purge returns
-- stays the head.
local head, live = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], '')
for _, zset in ipairs({KEYS[4], KEYS[3]}) do
  for _, owner in ipairs(redis.call('zrangebyscore', zset, '-inf', now)) do
    local dead, liveness = is_dead(KEYS[3], KEYS[4], owner)
    if dead then
      redis.call('lrem', KEYS[2], 0, owner)
      redis.call('zrem', KEYS[3], owner)
      redis.call('zrem', KEYS[4], owner)
      if not liveness then
        -- A Redisson waiter: told, as drop_dead tells it (X11).
        notify(ARGV[2], ARGV[1], owner)
      end
    end
  end
end
local removed = before - redis.call('llen', KEYS[2])
if removed > 0 and redis.call('exists', KEYS[1]) == 0 then
  hand_over_to(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], head, live)
end
return removed
