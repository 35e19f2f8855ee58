-- prelude.lua: helpers prepended to every fair-lock script (see scripts.go).
--
-- Two zsets describe the queue. "timeouts" is Redisson's: each waiter's
-- deadline, by which Redisson's scripts purge the head, and from which every
-- Redisson acquisition subtracts its own wait (for all waiters, O(N)).
-- "alive" is ours: each fairlock waiter's liveness deadline (now + waiter
-- timeout), refreshed by its heartbeat (X2). A queued owner with an "alive"
-- entry is judged by it; one without (a Redisson waiter) by its Redisson
-- deadline.
--
-- A fairlock waiter's Redisson deadline must never pass while it lives
-- (Redisson would drop it, upstream #3004) and must come down to its
-- liveness deadline when it is first in line (so that, dead, it holds up
-- Redisson waiters no longer than the waiter timeout). Decrements come only
-- from Redisson waiters ahead of it acquiring (or giving up), each by its
-- own wait, and Redisson's chain of deadlines - each waiter's deadline is
-- the previous one's plus its wait - already counts them. So a fairlock
-- waiter joins the chain like a Redisson waiter whose wait is the waiter
-- timeout (behind another fairlock waiter it takes the same deadline: the
-- same Redisson waiters are ahead of both); each heartbeat moves its
-- deadline forward by the time since the previous heartbeat, which keeps
-- its margin over the decrements still to come; and whenever it becomes
-- the head its deadline is set to its liveness deadline (tighten). This
-- holds whatever wait the Redisson clients use.
--
-- Time comes from the server (X1): every "now" below is Redis' own clock in
-- milliseconds, never a client's. server_now also keeps the same instant in
-- microseconds (clock_us), which orders a hand-over grant after the
-- waiter's latest acquire even when both ran in one millisecond.
local clock_us = 0
local function server_now()
  local t = redis.call('time')
  clock_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(clock_us / 1000)
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

-- tighten brings a fairlock waiter's Redisson deadline down to its
-- liveness deadline once it is first in line: no Redisson acquisition can
-- come before it any more, so it needs no margin for their decrements,
-- and if it dies, Redisson's own purge drops it within the waiter timeout
-- (X11). A Redisson waiter (no liveness entry) is left alone.
-- Returns the waiter's liveness deadline, nil for a Redisson waiter.
local function tighten(timeouts, alive, owner)
  local deadline = redis.call('zscore', alive, owner)
  if deadline then
    local score = redis.call('zscore', timeouts, owner)
    if (not score) or tonumber(score) > tonumber(deadline) then
      redis.call('zadd', timeouts, deadline, owner)
    end
  end
  return deadline
end

-- wake tells owner, just become first in line, to wait no longer than the
-- lease left (X3), and tightens its deadline. A fairlock waiter (one with a
-- liveness entry) behind a held lock is told how long the hold has left,
-- "head:<ms>", and shortens its wait without a round trip; anyone else -
-- a Redisson waiter, or any waiter when the lock is free - gets Redisson's
-- unlock message "0" and runs an acquire.
local function wake(hash, timeouts, alive, channel_prefix, publish, owner)
  local msg = '0'
  if tighten(timeouts, alive, owner) then
    local ttl = redis.call('pttl', hash)
    if ttl > 0 then
      msg = string.format('head:%.0f', ttl)
    end
  end
  for cmd in string.gmatch(publish, '[^,]+') do
    redis.call(cmd, channel_prefix .. ':' .. owner, msg)
  end
end

-- wake_head wakes the queue head, if there is one (X3).
local function wake_head(hash, queue, timeouts, alive, channel_prefix, publish)
  local head = redis.call('lindex', queue, 0)
  if head then
    wake(hash, timeouts, alive, channel_prefix, publish, head)
  end
  return head
end

-- token_keep is how much longer than the lock hash the token counter
-- lives, in ms: after that it may expire, and the next token comes from
-- the server's clock (next_token).
local token_keep = 1000

-- extend makes the lock hash live at least lease ms more, and the token
-- counter a little longer. It never shortens a hold, so the server's
-- expiry only moves forward while the owner holds, and a client deadline
-- of "send time of the latest acknowledged grant, re-entry or renewal plus
-- the lease" never passes after it (X12).
local function extend(hash, token_key, lease)
  if redis.call('pttl', hash) < lease then
    redis.call('pexpire', hash, lease)
  end
  if redis.call('pttl', token_key) < lease + token_keep then
    redis.call('pexpire', token_key, lease + token_keep)
  end
end

-- next_token draws the fencing token of a new hold (X6). While the counter
-- lives it counts up by one; when it has expired (the lock unused for a
-- lease and a second), it starts again from the server's clock in
-- microseconds, which is past every token drawn before unless the lock was
-- granted more than a thousand times a millisecond on average (X15: the
-- counter does not outlive its use, and tokens never go backwards). The
-- counter lives as long as the hold and a second more.
local function next_token(token_key, now, lease)
  -- The counter starts far above 1, so 1 means INCR found no counter.
  local token = redis.call('incr', token_key)
  if token == 1 then
    token = now * 1000
    redis.call('set', token_key, token)
  end
  redis.call('pexpire', token_key, lease + token_keep)
  return token
end

-- hand_over runs when the lock has just become free (the hash is gone).
-- A live fairlock waiter at the head is granted the lock in the same step
-- (one-message hand-over): it leaves the queue, holds with a new token, and
-- is told so on its channel ("grant:<token>:<server µs>"; the time lets the
-- client tell this grant from an older one), so it holds the moment the
-- message arrives, without another round trip. Its field holds 0 - granted,
-- counted as one hold - until its client takes the grant up (its next
-- renewal or acquire sets 1), and the hash lives twice the waiter's
-- liveness left: if it died, the grant lapses within twice the waiter
-- timeout. Redisson waiters behind see a held lock and wait for its TTL
-- instead of spinning. A Redisson head is only woken ("0"): it runs its own
-- acquire. Either way the next head is woken (X3).
--
-- hand_over_to does it for a head the caller has just read (purge): head
-- is nil for an empty queue, deadline its liveness deadline (nil for a
-- Redisson waiter).
local function hand_over_to(hash, queue, timeouts, alive, token_key, now, channel_prefix, publish, head, deadline)
  if not head then
    return
  end
  if deadline and tonumber(deadline) > now then
    -- Twice the liveness left: a live waiter heartbeats every third of its
    -- waiter timeout, so it has at least 4/3 of it to take the grant up.
    local ttl = 2 * (tonumber(deadline) - now)
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, head)
    redis.call('zrem', alive, head)
    redis.call('hset', hash, head, 0)
    redis.call('pexpire', hash, ttl)
    local token = next_token(token_key, now, ttl)
    for cmd in string.gmatch(publish, '[^,]+') do
      redis.call(cmd, channel_prefix .. ':' .. head, string.format('grant:%.0f:%.0f', token, clock_us))
    end
    wake_head(hash, queue, timeouts, alive, channel_prefix, publish)
    return
  end
  wake_head(hash, queue, timeouts, alive, channel_prefix, publish)
end

local function hand_over(hash, queue, timeouts, alive, token_key, now, channel_prefix, publish)
  local head = redis.call('lindex', queue, 0)
  local deadline = head and redis.call('zscore', alive, head)
  hand_over_to(hash, queue, timeouts, alive, token_key, now, channel_prefix, publish, head, deadline)
end

-- hold_token returns the fencing token of the current hold: the latest
-- token issued for the lock, which is the holder's as long as the hash
-- exists (only a new grant draws another).
local function hold_token(token_key)
  return tonumber(redis.call('get', token_key) or '0')
end

-- keep_queue sets the queue and both deadline zsets to expire keep ms after
-- the latest deadline any waiter has, so that entries of waiters that died
-- with no client left to purge them do not stay (X15). Every waiter is dead
-- by its deadline; keep (Redisson's slack) leaves room for a Redisson
-- waiter that queues later without touching the TTLs.
local function keep_queue(queue, timeouts, alive, now, keep)
  local last = now
  for _, z in ipairs({timeouts, alive}) do
    local top = redis.call('zrevrange', z, 0, 0, 'WITHSCORES')
    if top[2] then
      last = math.max(last, tonumber(top[2]))
    end
  end
  local ttl = math.floor(last - now + keep)
  for _, k in ipairs({queue, timeouts, alive}) do
    redis.call('pexpire', k, ttl)
  end
end

-- is_dead reports whether a queued owner's deadline has passed (or it has
-- none at all), and returns its liveness deadline (nil for a Redisson
-- waiter).
local function is_dead(timeouts, alive, owner, now)
  local live = redis.call('zscore', alive, owner)
  local deadline = live or redis.call('zscore', timeouts, owner)
  return (not deadline) or tonumber(deadline) <= now, live
end

-- purge removes queue heads that are dead (B5). Only the run of dead heads
-- is visited, never the whole queue (X8). When the head changed, the new
-- head is woken (X3) - unless it is the caller, me, which is running
-- already - so it starts waiting no longer than the lease left. Returns
-- the live head (nil for an empty queue) and its liveness deadline (nil for
-- a Redisson waiter), which callers use rather than read them again.
local function purge(hash, queue, timeouts, alive, now, channel_prefix, publish, me)
  local removed = false
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      return nil, nil
    end
    local dead, live = is_dead(timeouts, alive, head, now)
    if not dead then
      if removed and head ~= me then
        wake(hash, timeouts, alive, channel_prefix, publish, head)
        live = redis.call('zscore', alive, head)
      elseif removed then
        tighten(timeouts, alive, head)
      end
      return head, live
    end
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, head)
    redis.call('zrem', alive, head)
    removed = true
  end
end
