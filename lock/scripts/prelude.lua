-- prelude.lua: helpers prepended to every fair-lock script (see scripts.go).
--
-- Time comes from the server (X1): every "now" below is Redis' own clock in
-- milliseconds, never a client's.
local function server_now()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- purge removes queue heads whose deadline has passed, or that have no
-- deadline at all (B5). Only the run of dead heads is visited, never the
-- whole queue (X8). Returns the number removed.
local function purge(queue, timeouts, now)
  local removed = 0
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      break
    end
    local deadline = redis.call('zscore', timeouts, head)
    if deadline and tonumber(deadline) > now then
      break
    end
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, head)
    removed = removed + 1
  end
  return removed
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
