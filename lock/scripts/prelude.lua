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

-- wake_head publishes the unlock message "0" on the queue head's channel,
-- if there is a head (X3). Redisson waiters listen on the same channels.
local function wake_head(queue, channel_prefix, publish)
  local head = redis.call('lindex', queue, 0)
  if head then
    redis.call(publish, channel_prefix .. ':' .. head, '0')
  end
  return head
end
