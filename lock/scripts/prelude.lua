-- prelude.lua: helpers prepended to every fair-lock script (see scripts.go).
--
-- Two zsets describe the queue. "timeouts" is Redisson's: each waiter's
-- deadline as Redisson computes it (the previous waiter's deadline plus
-- Redisson's slack), which Redisson's own scripts purge by and shift. Our
-- waiters keep a Redisson-compatible entry there, so Redisson clients
-- treat them like their own (X11). "alive" is ours: each fairlock
-- waiter's liveness deadline (now + waiter timeout), refreshed by its
-- heartbeat (X2). A queued owner with an "alive" entry is judged by it;
-- one without (a Redisson waiter) by its Redisson deadline.
--
-- Time comes from the server (X1): every "now" below is Redis' own clock in
-- milliseconds, never a client's.
local function server_now()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- notify publishes the unlock message "0" on an owner's channel with each
-- command in the comma-separated list publish ("publish", or
-- "publish,spublish" on clusters where Redisson waiters use sharded
-- pub/sub). Redisson waiters listen on the same channels (X11).
local function notify(publish, channel_prefix, owner)
  for cmd in string.gmatch(publish, '[^,]+') do
    redis.call(cmd, channel_prefix .. ':' .. owner, '0')
  end
end

-- wake_head wakes the queue head, if there is one (X3).
local function wake_head(queue, channel_prefix, publish)
  local head = redis.call('lindex', queue, 0)
  if head then
    notify(publish, channel_prefix, head)
  end
  return head
end

-- is_dead reports whether a queued owner's deadline has passed (or it has
-- none at all).
local function is_dead(timeouts, alive, owner, now)
  local deadline = redis.call('zscore', alive, owner)
  if not deadline then
    deadline = redis.call('zscore', timeouts, owner)
  end
  return (not deadline) or tonumber(deadline) <= now
end

-- extend makes the lock hash live at least lease ms more. It never
-- shortens a hold, so the server's expiry only moves forward while the
-- owner holds, and a client deadline of "send time of the latest
-- acknowledged grant, re-entry or renewal plus the lease" never passes
-- after it (X12).
local function extend(hash, lease)
  if redis.call('pttl', hash) < lease then
    redis.call('pexpire', hash, lease)
  end
end

-- hold_token returns the fencing token of the current hold: the latest
-- token issued for the lock, which is the holder's as long as the hash
-- exists (only a new grant draws another).
local function hold_token(token_key)
  return tonumber(redis.call('get', token_key) or '0')
end

-- purge removes queue heads that are dead (B5). Only the run of dead heads
-- is visited, never the whole queue (X8). When the head changed, the new
-- head is woken (X3) - unless it is the caller, me, which is running
-- already - so it starts waiting no longer than the lease left. Returns
-- the number removed.
local function purge(queue, timeouts, alive, now, channel_prefix, publish, me)
  local removed = 0
  while true do
    local head = redis.call('lindex', queue, 0)
    if (not head) or not is_dead(timeouts, alive, head, now) then
      break
    end
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, head)
    redis.call('zrem', alive, head)
    removed = removed + 1
  end
  if removed > 0 then
    local head = redis.call('lindex', queue, 0)
    if head and head ~= me then
      notify(publish, channel_prefix, head)
    end
  end
  return removed
end
