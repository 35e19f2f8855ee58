-- leave.lua: take an owner out of the queue (it gave up, was cancelled, or
-- failed while waiting), and report what the owner holds, so that a caller
-- whose acquire had an unknown outcome can undo it with unlock.lua.
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- KEYS[5] token counter
-- ARGV[1] owner field
-- ARGV[2] channel prefix
-- ARGV[3] publish commands
-- ARGV[4] token of the hold the client knows this owner has ("0": none)
-- ARGV[5] the server's time (ms) from which this leave does nothing ("0":
--         no limit)
--
-- Returns {queued, count, token}: queued is 1 if the owner was queued (or
-- had been handed the lock, which it gives up);
-- count is the owner's hold count (0: it holds nothing) and token the
-- current hold's token. {-1, now}: the leave came at ARGV[5] or later, and
-- did nothing; now is the server's time (µs), which the client's floor of
-- that clock was behind.
--
-- A leave names the owner, not the queue entry or the grant it means: run
-- late, after the owner queued again, it would take that later entry out,
-- or pass on its grant. Its client gives up on it after a bound, and
-- queues the owner again only after that; ARGV[5] is the server's time at
-- that bound or before (the client's lower bound of the server's clock),
-- so a leave that comes later finds nothing of its own to do (X5).
--
-- It changes no hold itself: undoing a grant goes through unlock.lua with
-- the token and count reported here, which does nothing once that hold is
-- gone, so a leave or an undo that reaches the server late never touches
-- a newer hold.
--
-- An owner first or last in line is popped. One further up is left in
-- place as a dead entry: its liveness deadline becomes 0 (left_mark, which
-- Inspect skips) and its Redisson deadline now, so every script -
-- fairlock's and Redisson's - treats it as a dead waiter and drops it when
-- it reaches the head (B5), and a leave from the tail drops the dead run
-- there too. So a leave costs the same at
-- any queue length (no LREM, which scans the list); the owner queueing
-- again while its dead entry is still queued takes that entry out first
-- (acquire.lua).
--
-- Rules: B7 giving up leaves the queue, X3 a new head is woken, X5 nothing
-- is left behind (the dead entry goes with the queue's expiry at the
-- latest), X8 no scan of the queue.
do
  local err = refused(ARGV[3], ARGV[2])
  if err then
    return err
  end
end
if ARGV[5] ~= '0' and server_now() >= num(ARGV[5]) then
  return {-1, clock_us}
end
local me = ARGV[1]
local was_head = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], me) == me
local queued = 0
if was_head then
  queued = drop('lpop', KEYS[2], KEYS[3], KEYS[4], me)
elseif redis.call('zscore', KEYS[3], me) then
  queued = 1
  if redis.call('lindex', KEYS[2], -1) == me then
    drop('rpop', KEYS[2], KEYS[3], KEYS[4], me)
    drop_dead_tails(KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3])
  else
    -- Further up: left in place, dead by every script's rule - Redisson's
    -- too, whose purge drops a head whose deadline has passed - until it
    -- reaches the head or the tail and is dropped there. Liveness
    -- deadline 0 marks it (left_mark).
    redis.call('zadd', KEYS[3], server_now(), me)
    redis.call('zadd', KEYS[4], left_mark_arg, me)
  end
else
  -- Not queued: a Redisson delete() or purge took the entry and left the
  -- liveness entry, which goes now (X5; the soak found five after a
  -- delete() while they waited).
  redis.call('zrem', KEYS[4], me)
end
-- field: this owner's count in the hash, read once: the hand-over below
-- grants to a queued owner, never to this one, which is out of the queue
-- (or left in it dead).
local field = redis.call('hget', KEYS[1], me)
if field == '0' and num(ARGV[4]) ~= hold_token(KEYS[5]) then
  -- A hand-over grant this owner's client has not taken up and no longer
  -- wants: it passes on.
  redis.call('hdel', KEYS[1], me)
  field = false
  queued = 1
end
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
  hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3])
elseif was_head then
  settle_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], nil, true, ttl)
end
local count = num(field or '0')
return {queued, count, hold_token(KEYS[5])}
