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
--
-- Returns {queued, count, token}: queued is 1 if the owner was queued (or
-- had been handed the lock, which it gives up);
-- count is the owner's hold count (0: it holds nothing) and token the
-- current hold's token.
--
-- It changes no hold itself: undoing a grant goes through unlock.lua with
-- the token and count reported here, which does nothing once that hold is
-- gone, so a leave or an undo that reaches the server late never touches
-- a newer hold.
--
-- Rules: B7 giving up leaves the queue, X3 a new head is woken, X5 nothing
-- is left behind. LREM runs in the server; no Lua loop visits the waiters
-- (X8).
local me = ARGV[1]
local now = server_now()
purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now, ARGV[2], ARGV[3], me)
local was_head = redis.call('lindex', KEYS[2], 0) == me
local queued = redis.call('zrem', KEYS[3], me)
redis.call('zrem', KEYS[4], me)
redis.call('lrem', KEYS[2], 0, me)
if redis.call('hget', KEYS[1], me) == '0' and tonumber(ARGV[4]) ~= hold_token(KEYS[5]) then
  -- A hand-over grant this owner's client has not taken up and no longer
  -- wants: it passes on.
  redis.call('hdel', KEYS[1], me)
  queued = 1
end
if redis.call('exists', KEYS[1]) == 0 then
  hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], now, ARGV[2], ARGV[3])
elseif was_head then
  wake_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3])
end
local count = tonumber(redis.call('hget', KEYS[1], me) or '0')
return {queued, count, hold_token(KEYS[5])}
