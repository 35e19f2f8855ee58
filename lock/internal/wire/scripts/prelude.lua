-- prelude.lua: helpers prepended to every fair-lock script, after base.lua
-- (see scripts.go).
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
-- whole wait, however long it has waited already. So a fairlock waiter
-- joins with room for all of them: the waiter timeout plus Redisson's
-- fairLockWaitTimeout (WithRedissonSlack) per Redisson waiter queued, or
-- the latest deadline queued if later (Redisson's chain, which counts
-- longer Java waits but not the time they have been waiting); each
-- heartbeat moves its deadline forward by the time since the previous
-- one, which keeps that room over the decrements still to come; and
-- whenever it becomes the head its deadline is set to its liveness
-- deadline (tighten). The room is counted afresh at each join, never added
-- to the last deadline: fairlock acquisitions take nothing off the
-- deadlines behind them, so a chain that grew by the waiter timeout at
-- every fairlock waiter would run away in a busy queue (hours in a minute),
-- and keep a Java waiter that died judged alive as long.
--
-- publish_to sends msg on an owner's channel with each command in the
-- comma-separated list publish ("publish", or "publish,spublish" on
-- clusters where Redisson waiters use sharded pub/sub). Redisson waiters
-- listen on the same channels (X11).
local function publish_to(publish, channel_prefix, owner, msg)
  for cmd in string.gmatch(publish, '[^,]+') do
    redis.call(cmd, channel_prefix .. ':' .. owner, msg)
  end
end

-- notify publishes Redisson's unlock message "0" on an owner's channel.
local function notify(publish, channel_prefix, owner)
  publish_to(publish, channel_prefix, owner, '0')
end

-- tighten brings a fairlock waiter's Redisson deadline down to its
-- liveness deadline live once it is first in line: no Redisson acquisition
-- can come before it any more, so it needs no margin for their decrements,
-- and if it dies, Redisson's own purge drops it within the waiter timeout
-- (X11). A Redisson waiter (live nil) is left alone. ZADD LT only ever
-- lowers a deadline (and adds a missing one).
local function tighten(timeouts, owner, live)
  if live then
    redis.call('zadd', timeouts, 'LT', live, owner)
  end
end

-- wake tells owner, just become first in line, to wait no longer than the
-- lease left (X3), and tightens its deadline; live is its liveness
-- deadline (nil for a Redisson waiter) and ttl the lock hash's PTTL (nil:
-- read it here). A fairlock waiter behind a held lock is told how long the
-- hold has left, "head:<ms>", and shortens its wait without a round trip -
-- unless the hold outlives its liveness deadline: a live waiter runs its
-- next heartbeat before that deadline, and the heartbeat tells it it is
-- first in line and how long the hold has left, before the hold can end,
-- so the message would change nothing (a hand-over to a waiter that has
-- just heartbeaten makes a hold of twice its liveness left, and sends no
-- second message). Anyone else - a Redisson waiter, or any waiter when the
-- lock is free - gets Redisson's unlock message "0" and runs an acquire.
local function wake(hash, timeouts, channel_prefix, publish, owner, live, ttl)
  local msg = '0'
  if live then
    tighten(timeouts, owner, live)
    ttl = ttl or redis.call('pttl', hash)
    if ttl > 0 then
      if server_now() + ttl >= num(live) then
        return
      end
      msg = string.format('head:%.0f', ttl)
    end
  end
  publish_to(publish, channel_prefix, owner, msg)
end

-- is_dead reports whether a queued owner's deadline has passed (or it has
-- none at all), and returns its liveness deadline (nil or false for a
-- Redisson waiter).
-- live is its liveness deadline when the caller has read it (false:
-- none), nil when not.
local function is_dead(timeouts, alive, owner, live)
  if live == nil and also and also_live == nil and owner ~= also then
    local both = redis.call('zmscore', alive, owner, also)
    live, also_live = both[1], both[2]
  elseif live == nil then
    live = redis.call('zscore', alive, owner)
  end
  local deadline = live or redis.call('zscore', timeouts, owner)
  return (not deadline) or num(deadline) <= server_now(), live
end

-- drop takes owner, first in line (pop 'lpop') or last ('rpop'), out of
-- the queue and both deadline zsets. Returns 1 if it had a Redisson
-- deadline, else 0.
local function drop(pop, queue, timeouts, alive, owner)
  redis.call(pop, queue)
  if front and pop == 'lpop' and (front_whole or #front > 1) then
    -- The entry after it, if read, is the head now (front, base.lua).
    table.remove(front, 1)
    if front_lives then
      table.remove(front_lives, 1)
    end
  else
    front = nil
  end
  local had = redis.call('zrem', timeouts, owner)
  redis.call('zrem', alive, owner)
  if owner == also then
    also_live = nil
  end
  return had
end

-- drop_dead is drop for an owner dead by its deadline (is_dead; live is
-- its liveness deadline, nil for a Redisson waiter). A Redisson waiter is
-- told ("0"): it may be alive still - a deadline shortened by Redisson's
-- own decrements, or chained on an entry that was already dead - and
-- waiting for a message with no timeout (upstream waits so after a
-- negative hint, #5503); told, it runs its acquire again and queues anew
-- (B3), instead of waiting for ever while nobody knows of it (X11).
local function drop_dead(pop, queue, timeouts, alive, channel_prefix, publish, owner, live)
  drop(pop, queue, timeouts, alive, owner)
  if not live then
    notify(publish, channel_prefix, owner)
  end
end

-- peek_head returns the queue's head and, when this run has read it, its
-- liveness deadline (false: none; nil: not read): from front when this
-- run has read the queue's first entries (their liveness deadlines then
-- read together, one ZMSCORE), else one LINDEX.
local function peek_head(queue, alive)
  if not front then
    return redis.call('lindex', queue, '0'), nil
  end
  if not front[1] then
    return nil, nil
  end
  if not front_lives then
    front_lives = redis.call('zmscore', alive, unpack(front))
  end
  return front[1], front_lives[1]
end

-- settle_head removes queue heads that are dead (B5). Only the run of dead
-- heads is visited, never the whole queue (X8). When the head changed -
-- changed says the caller has just popped one, or a dead one was removed
-- here - the new live head is woken (X3), unless it is the caller, me,
-- which is running already: it starts waiting no longer than the lease
-- left (ttl: the hash's PTTL if the caller knows it). Returns the live head
-- (nil for an empty queue) and its liveness deadline (nil for a Redisson
-- waiter), which callers use rather than read them again.
local function settle_head(hash, queue, timeouts, alive, channel_prefix, publish, me, changed, ttl)
  while true do
    local head, live = peek_head(queue, alive)
    if not head then
      return nil, nil
    end
    local dead
    dead, live = is_dead(timeouts, alive, head, live)
    if not dead then
      if changed and head ~= me then
        wake(hash, timeouts, channel_prefix, publish, head, live, ttl)
      elseif changed then
        tighten(timeouts, head, live)
      end
      return head, live
    end
    drop_dead('lpop', queue, timeouts, alive, channel_prefix, publish, head, live)
    changed = true
  end
end

-- purge is settle_head at the start of a script: nothing popped yet.
local function purge(hash, queue, timeouts, alive, channel_prefix, publish, me)
  return settle_head(hash, queue, timeouts, alive, channel_prefix, publish, me, false, nil)
end

-- left_mark is the liveness deadline of an entry an owner left behind
-- when it gave up further up the queue (leave.lua): dead by every rule,
-- skipped by Inspect, taken out when the owner queues again.
local left_mark = 0
-- left_mark_arg is left_mark as a command's argument (base.lua: strings,
-- not numbers).
local left_mark_arg = '0'

-- left_in_queue returns how many queue entries are ones owners left
-- behind (left_mark), and whether the marks in alive are all stale: a
-- Redisson script's purge drops such an entry from the list and
-- Redisson's zset only, and leaves its mark. An entry left behind keeps
-- the Redisson deadline of the moment it left, which only Redisson's
-- decrements move (down), so while none of the queue's Redisson deadlines
-- has passed, none is queued and every mark is of an entry gone (B9).
-- Two reads, one when there is no mark; never a visit of the queue (X8).
local function left_in_queue(timeouts, alive)
  local marks = redis.call('zcount', alive, left_mark_arg, left_mark_arg)
  if marks == 0 then
    return 0, false
  end
  local first = redis.call('zrange', timeouts, '0', '0', 'WITHSCORES')
  if first[2] and num(first[2]) <= server_now() then
    return marks, false
  end
  return 0, true
end

-- drop_dead_tails removes the run of dead owners at the tail of the queue
-- (owners that left from the middle, see leave.lua, once everyone behind
-- them has gone - Redisson's own leave runs no fairlock code - and
-- Redisson waiters whose deadline has passed), so that whoever queues
-- next chains its deadline on a live waiter: a Redisson waiter chaining
-- on a dead entry gets a negative hint and a deadline that may have
-- passed already (X11). Only that run is visited (X8). live_owner, if
-- given, is an owner known to be live (the caller's own heartbeat):
-- reached at the tail, it is not read. Returns the live tail left (nil:
-- the queue is empty).
local function drop_dead_tails(queue, timeouts, alive, channel_prefix, publish, live_owner)
  while true do
    local tail = redis.call('lindex', queue, '-1')
    if not tail or tail == live_owner then
      return tail
    end
    local dead, live = is_dead(timeouts, alive, tail)
    if not dead then
      return tail
    end
    drop_dead('rpop', queue, timeouts, alive, channel_prefix, publish, tail, live)
  end
end

-- keep_token makes the token counter live at least token_keep longer than
-- a hold of lease ms.
local function keep_token(token_key, lease)
  if redis.call('pttl', token_key) < lease + token_keep then
    redis.call('pexpire', token_key, lease + token_keep)
  end
end

-- extend makes the lock hash live at least lease ms more, and the token
-- counter a little longer; ttl is the hash's PTTL if the caller has it. It
-- never shortens a hold, so the server's expiry only moves forward while
-- the owner holds, and a client deadline of "send time of the latest
-- acknowledged grant, re-entry or renewal plus the lease" never passes
-- after it (X12).
local function extend(hash, token_key, lease, ttl)
  if (ttl or redis.call('pttl', hash)) < lease then
    redis.call('pexpire', hash, lease)
  end
  keep_token(token_key, lease)
end

-- take_up turns owner's hand-over grant (field 0, hand_over_to) into a
-- hold (count 1) of lease ms: the grant's provisional expiry, twice the
-- waiter's liveness left, gives way to the lease, shorter or longer. The
-- client counts the grant's deadline from its latest attempt plus at most
-- its own lease (which lease is never below), and the new hold's from a
-- request sent before now, so the expiry set here is never before either
-- (X12). The token counter lives as long. When the expiry comes down, the
-- live head, told the provisional one (wake), is told again (X3).
local function take_up(hash, queue, timeouts, alive, token_key, channel_prefix, publish, owner, lease)
  redis.call('hset', hash, owner, '1')
  local before = redis.call('pttl', hash)
  redis.call('pexpire', hash, lease)
  keep_token(token_key, lease)
  if lease < before then
    settle_head(hash, queue, timeouts, alive, channel_prefix, publish, nil, true, lease)
  end
end

-- hand_over_to runs when the lock has just become free (the hash is gone),
-- for the live head the caller has just read (settle_head): head is nil
-- for an empty queue, live its liveness deadline (nil for a Redisson
-- waiter).
--
-- A live fairlock head is granted the lock in the same step (one-message
-- hand-over): it leaves the queue, holds with a new token, and is told so
-- on its channel ("grant:<token>:<server µs>"; the time lets the client
-- tell this grant from an older one), so it holds the moment the message
-- arrives, without another round trip. Its field holds 0 - granted,
-- counted as one hold - until its client takes the grant up (its next
-- renewal or acquire sets 1), and the hash lives twice the waiter's
-- liveness left: if it died, the grant lapses within twice the waiter
-- timeout. Redisson waiters behind see a held lock and wait for its TTL
-- instead of spinning. A Redisson head is only woken ("0"): it runs its own
-- acquire. Either way the next head is woken (X3).
--
-- Returns the head after it and the hash's PTTL (-2: still free).
local function hand_over_to(hash, queue, timeouts, alive, token_key, channel_prefix, publish, head, live)
  if not head then
    return nil, -2
  end
  local now = server_now()
  local live_ms = live and num(live)
  if live_ms and live_ms > now then
    -- Twice the liveness left: a live waiter heartbeats every third of its
    -- waiter timeout, so it has at least 4/3 of it to take the grant up.
    local ttl = 2 * (live_ms - now)
    drop('lpop', queue, timeouts, alive, head)
    redis.call('hset', hash, head, '0')
    redis.call('pexpire', hash, ttl)
    local token = next_token(token_key, ttl)
    publish_to(publish, channel_prefix, head, string.format('grant:%.0f:%.0f', token, clock_us))
    return settle_head(hash, queue, timeouts, alive, channel_prefix, publish, nil, true, ttl), ttl
  end
  wake(hash, timeouts, channel_prefix, publish, head, live, -2)
  return head, -2
end

-- hand_over is hand_over_to for the head as it is now.
local function hand_over(hash, queue, timeouts, alive, token_key, channel_prefix, publish)
  local head, live = purge(hash, queue, timeouts, alive, channel_prefix, publish, nil)
  return hand_over_to(hash, queue, timeouts, alive, token_key, channel_prefix, publish, head, live)
end

-- hold_token returns the fencing token of the current hold: the latest
-- token issued for the lock, which is the holder's as long as the hash
-- exists (only a new grant draws another).
local function hold_token(token_key)
  return num(read_token(token_key) or '0')
end

-- tell_evicted tells the client of every holder of the lock that its hold
-- is ending by someone else's hand (force_unlock.lua, delete.lua): the
-- message "lost:<token>:<hash>" on the client's own channel, client_prefix
-- and the client ID from the owner field "<clientID>:<ownerID>". Every
-- fairlock client that holds a lock listens there already (one
-- subscription per client, whatever it holds), so a holder learns of it
-- within one network delay rather than at its next renewal (X7). A
-- Redisson holder's client does not listen: the message costs nothing.
-- Call it while the hash still exists.
local function tell_evicted(hash, token_key, client_prefix)
  local fields = redis.call('hkeys', hash)
  if #fields == 0 then
    return
  end
  local msg = string.format('lost:%.0f:%s', hold_token(token_key), hash)
  for _, field in ipairs(fields) do
    local client = string.match(field, '^(.*):[^:]*$')
    if client then
      redis.call('publish', client_prefix .. client, msg)
    end
  end
end

-- keep_queue keeps the queue and both deadline zsets alive at least keep
-- ms past the latest deadline any waiter has, so that entries of waiters
-- that died with no client left to purge them do not stay (X15); keep
-- (Redisson's slack) leaves room for a Redisson waiter that queues later
-- without touching the TTLs. An expiry only moves forward here, and when
-- it does it gets room ms more (the waiter timeout), so most calls only
-- read: the latest deadline and the PTTLs. The latest
-- deadline is the latest in timeouts or the liveness deadline the caller
-- has just written (now + room): Redisson's decrements can take a
-- fairlock waiter's Redisson deadline below its liveness deadline, whose
-- expiry its own write has covered.
--
-- The queue and timeouts hold the same owners (every script, fairlock's
-- and Redisson's, adds and removes an owner in both), so they are emptied
-- and made together (by Redisson: with no expiry, which timeouts' PTTL
-- shows), and given the same expiry here: the queue's PTTL is timeouts',
-- and only that is read. A queue the caller has just made (queue_made:
-- it has none) is given timeouts' expiry.
--
-- latest is the latest deadline in timeouts when the caller knows it (nil:
-- read it here), timeouts_ttl that key's PTTL when the caller knows it as
-- it is now (nil: read it here).
--
-- alive lives at least as long as the queue after every run here: it is
-- given the same expiry whenever theirs moves, and at least theirs
-- otherwise. So it needs no read of its own unless it was made anew
-- (emptied, deleted, evicted) since: alive_made says the caller may have
-- made it in this run (true: it is given the queue's expiry), knows it did
-- not - another live waiter's entry was in it, and every run that writes
-- a live entry ends here (false: nothing is read) - or does not know (nil:
-- its PTTL is read).
local function keep_queue(queue, timeouts, alive, keep, room, latest, timeouts_ttl, queue_made, alive_made)
  if not latest then
    local top = redis.call('zrevrange', timeouts, '0', '0', 'WITHSCORES')
    latest = top[2] and num(top[2])
  end
  local last = server_now() + room
  if latest then
    last = math.max(last, latest)
  end
  local need = math.floor(last - server_now() + keep)
  timeouts_ttl = timeouts_ttl or redis.call('pttl', timeouts)
  if timeouts_ttl < need then
    redis.call('pexpire', queue, need + room)
    redis.call('pexpire', timeouts, need + room)
    redis.call('pexpire', alive, need + room)
    return
  end
  if queue_made then
    redis.call('pexpire', queue, timeouts_ttl)
  end
  if alive_made or (alive_made == nil and redis.call('pttl', alive) < timeouts_ttl) then
    redis.call('pexpire', alive, timeouts_ttl)
  end
end
