-- unlock.lua: release one hold of the lock.
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- KEYS[5] token counter
-- KEYS[6] unlock latch "redisson_unlock_latch:{name}:<requestID>"
-- ARGV[1] owner field
-- ARGV[2] lease in ms: while holds remain the lock lives at least this long
-- ARGV[3] channel prefix
-- ARGV[4] publish commands
-- ARGV[5] latch lifetime in ms
-- ARGV[6] token of the hold the client releases ("0": it knows no live hold)
-- ARGV[7] that hold's count as the client knows it, before this release
-- ARGV[8] "1" when this request may have run before (a retry), else "0":
--         only a retry can find its latch
--
-- Returns the hold count left (0: released), or -1 when the owner does not
-- hold the lock.
--
-- A retry of the same request returns the first result: from the latch
-- while it lives (B10), and afterwards because the count is taken down
-- only from the value the client knows, so a late retry never releases a
-- second time. A request for a hold that is gone - including a leftover
-- the client has already ended, and any hold older than the current one -
-- changes nothing and reports -1: a request that reaches the server late
-- never touches a newer hold. A leftover frees itself when its lease runs
-- out, and the owner's next acquire replaces it (acquire.lua).
--
-- Releasing at 0 hands the lock over: granted to a live fairlock head,
-- or the Redisson head woken (prelude.lua, hand_over).
--
-- Rules: B2 count down, B4 release at 0 wakes the head, non-holder fails,
-- B5 purge, B10 a retried request ID returns the first result, X3, X11,
-- X13.
do
  local err = refused(ARGV[4], ARGV[3])
  if err then
    return err
  end
end
if ARGV[8] == '1' then
  local done = redis.call('get', KEYS[6])
  if done then
    return num(done)
  end
end
local me = ARGV[1]
local head, live = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], me)
local held = redis.call('hget', KEYS[1], me)
if not held then
  return -1
end
if num(ARGV[6]) ~= hold_token(KEYS[5]) then
  -- Not the hold the client means: that one is gone (lease ran out,
  -- forced, replaced by a newer hold of this owner). Leave it alone.
  return -1
end
-- 0: granted by a hand-over, not taken up yet: one hold.
held = math.max(num(held), 1)
if held == num(ARGV[7]) - 1 then
  return held
end
local count = held - 1
if count > 0 then
  redis.call('hset', KEYS[1], me, count)
  extend(KEYS[1], KEYS[5], num(ARGV[2]))
else
  redis.call('del', KEYS[1])
  hand_over_to(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], ARGV[4], head, live)
end
redis.call('set', KEYS[6], count, 'px', ARGV[5])
return count
