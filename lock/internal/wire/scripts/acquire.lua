-- acquire.lua: take the lock, re-enter it, or queue for it.
--
-- KEYS[1] lock hash        field "<clientID>:<ownerID>" -> hold count
-- KEYS[2] queue            list of waiting owners, head first
-- KEYS[3] timeouts         zset owner -> Redisson deadline (server ms)
-- KEYS[4] alive            zset owner -> fairlock liveness deadline
-- KEYS[5] token counter    fencing-token counter
-- ARGV[1] owner field
-- ARGV[2] lease in ms
-- ARGV[3] waiter timeout in ms: a queued owner's liveness deadline is now + this
-- ARGV[4] mode: "wait" queues (or refreshes) the owner, "once" never queues
-- ARGV[5] channel prefix, "redisson_lock__channel:{name}"
-- ARGV[6] publish commands ("publish" or "publish,spublish")
-- ARGV[7] longest wait hint in ms (the waiter heartbeat interval)
-- ARGV[8] how long the queue keys outlive the latest waiter deadline, in ms
--         (room for Redisson waiters that queue later; WithRedissonSlack)
-- ARGV[9] token of the hold the client knows this owner has ("0": none)
-- ARGV[10] that hold's count as the client knows it
-- ARGV[11] that hold's own lease in ms (what it was taken with; "0": none)
-- ARGV[12] "1" when this request may have run before (a retry after an
--          error), else "0"
-- ARGV[13] the highest token of a hold the owner has taken up or given
--          back ("0": none)
-- ARGV[14] the token counter's lifetime for a new hold of this lease, in
--          ms: the lease and a second more (token_keep, base.lua)
--
-- Returns the token alone (an integer) when the owner holds the lock anew
-- (count 1: a new hold, or a hand-over grant taken up), {1, token,
-- holdCount} when it has re-entered its hold, or {0, waitHintMs, position, head,
-- nowUs} when it is queued: position is the owner's 1-based queue position
-- when this call queued it, else 0; head is 1 when the owner is first in
-- line; nowUs is the server's time in microseconds; waitHintMs is always >= 1 (X4).
-- In "once" mode a refusal is {0, waitHintMs, 0}. {2} says the hold the
-- request names (ARGV[9]) is gone: nothing was done, and the client ends
-- that hold as lost and asks again naming none.
--
-- Idempotent for the caller's retries: a re-entry is applied only while the
-- count is still the one the client knows, so a retry after a lost reply
-- returns the first result. A request naming a hold the server no longer
-- has is refused, never granted a hold in its place: it may be a re-entry
-- whose caller gave up, run by the server only after the owner's last
-- Unlock (a client's connections do not keep one owner's requests in
-- order), and a hold granted to it nobody would ever release (X13). A
-- field the client does not know of (a grant whose reply was lost, or a
-- hold the client has already ended) is replaced by a new hold with a new
-- token and count 1, never re-entered.
-- Such a field (not a hand-over grant) is the leftover of a hold the
-- client has ended - its Unlock was not acknowledged, across a failover
-- say - when the request cannot have run before, or when its token is
-- one the owner has spent (ARGV[13]): a grant of the request's earlier
-- try would have a newer one (tokens only grow). While others wait a
-- leftover is released and the owner queues behind them (B3).
--
-- Rules: B1 atomic acquire, B2 reentrancy, B3 FIFO enqueue once, B5 stale
-- heads purged, B6 a grant re-entered is taken up, B7 "once" mode, B9
-- left marks counted right, X1 server time, X2 heartbeat: a queued owner
-- calling again refreshes its own deadline, X3 whoever becomes first in
-- line is woken (a hand-over grant is taken up), X6 fencing token, X8 no
-- loop over waiters, X11 Redisson-compatible deadlines (dead tails
-- dropped, room for the Redisson waiters ahead, which no stale liveness
-- entry hides), X12 the lease never shrinks while held, X14 safe retries,
-- X15 keys expire.
-- acquire_fast.lua, which comes first, has asked whether this user may
-- publish (refused, X19) and taken a free lock nobody is queued for.
local me = ARGV[1]
local lease = num(ARGV[2])
local waiter_timeout = num(ARGV[3])

-- The hash's PTTL tells whether anyone holds (-2: free), and is the wait
-- hint of a head below. When the hash and the queue both exist (present,
-- acquire_fast.lua), the lock is held and the PTTL is read only if a step
-- needs its value (nil until then).
local ttl = nil
if present ~= 2 then
  ttl = redis.call('pttl', KEYS[1])
end
-- One of the two keys exists: when it is the hash, there is no queue to
-- purge (a re-entry with nobody waiting reads no more of it).
local first, first_live = nil, nil
if present == 2 or ttl == -2 then
  -- The head's liveness deadline is read with this owner's, which a
  -- heartbeat further back needs (also, base.lua).
  also = me
  first, first_live = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[5], ARGV[6], me)
end
local held = ttl ~= -2 and redis.call('hget', KEYS[1], me)
if ARGV[9] ~= '0' and not (held and num(ARGV[9]) == hold_token(KEYS[5])) then
  -- The hold this request names is gone (see above).
  return {2}
end
if held and held ~= '0' and first and first ~= me and ARGV[9] == '0'
    and (ARGV[12] == '0' or hold_token(KEYS[5]) <= num(ARGV[13])) then
  -- The leftover of an ended hold, with a live waiter first in line: it
  -- goes, and this request runs as if the owner held nothing.
  redis.call('hdel', KEYS[1], me)
  ttl = redis.call('pttl', KEYS[1])
  held = false
end
if held then
  local token = hold_token(KEYS[5])
  local count = num(held)
  -- 0: granted by a hand-over and not taken up yet; it counts as one hold.
  local granted = count == 0
  count = math.max(count, 1)
  if ARGV[9] ~= '0' then
    -- The hold the client knows (checked above): re-enter, once per count
    -- it knows.
    if granted then
      -- A hand-over grant its client holds by the message and has not
      -- taken up yet: take it up first, with the longer of the hold's
      -- lease and this call's (as renew.lua does), or the grant's
      -- provisional expiry would outlive the hold (B6). The client counts
      -- neither from later than now (X12).
      take_up(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], ARGV[6], me, math.max(lease, num(ARGV[11])))
      ttl = nil
    end
    if count == num(ARGV[10]) then
      count = count + 1
    end
    redis.call('hset', KEYS[1], me, count)
    extend(KEYS[1], KEYS[5], lease, ttl)
    return {1, token, count}
  end
  if granted then
    -- Handed over to this owner while its client did not know yet (the
    -- message is on its way, or was lost): take it up, for this lease.
    take_up(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], ARGV[6], me, lease)
    return token
  end
  -- A leftover the client does not count as its hold: a new hold.
  redis.call('hset', KEYS[1], me, '1')
  redis.call('pexpire', KEYS[1], ARGV[2])
  return next_token(KEYS[5], nil, ARGV[14])
end

if ttl == -2 then
  if (not first) or first == me then
    redis.call('hset', KEYS[1], me, '1')
    redis.call('pexpire', KEYS[1], ARGV[2])
    if first then
      drop('lpop', KEYS[2], KEYS[3], KEYS[4], me)
      -- The next owner is first in line now: it must start waiting no
      -- longer than this lease (X3).
      settle_head(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[5], ARGV[6], nil, true, lease)
    end
    return next_token(KEYS[5], nil, ARGV[14])
  end
  -- Free, but another owner is first in line: it is granted the lock (or,
  -- a Redisson waiter, woken).
  first, ttl = hand_over_to(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], ARGV[6], first, first_live)
end

local hint = num(ARGV[7])
if ARGV[4] == 'once' then
  return {0, hint, 0}
end

local now = server_now()
local position = 0
local score = redis.call('zscore', KEYS[3], me)
local is_head = first == me
local alive = nil
-- in_timeouts: this owner has an entry in Redisson's zset, which a join
-- replaces.
local in_timeouts = score and true or false
if score and not is_head then
  alive = also_live
  if alive == nil then
    alive = redis.call('zscore', KEYS[4], me)
  end
  if (not alive) or num(alive) == left_mark then
    -- The dead entry this owner left behind when it gave up further up
    -- the queue (leave.lua): it goes (the one scan of the list, only
    -- here), and the owner queues anew at the tail.
    redis.call('lrem', KEYS[2], 0, me)
    score = nil
  end
end
-- timeouts_ttl: the PTTL of Redisson's zset when this run has read it and
-- it has not changed since (keep_queue), else nil.
local timeouts_ttl = nil
-- latest: the latest deadline in Redisson's zset, when this run knows it
-- (keep_queue).
local latest = nil
-- alive_made: this run may have made alive (true), knows it did not
-- (false: another live waiter's entry is in it), or does not know (nil);
-- keep_queue reads its expiry only when it does not know.
local alive_made = nil
-- alive_emptied: this run has deleted alive, marks and all.
local alive_emptied = false
if score then
  -- Queued: heartbeat (X2). First in line, the Redisson deadline is the
  -- liveness deadline; further back it moves forward by the time since the
  -- last heartbeat, keeping its margin for the Redisson acquisitions still
  -- ahead (see prelude.lua).
  local deadline = now + waiter_timeout
  if not is_head then
    local since = now - (num(alive) - waiter_timeout)
    deadline = math.max(deadline, num(score) + since)
  end
  redis.call('zadd', KEYS[3], deadline, me)
  -- This owner's liveness entry was in alive before this run, so a run
  -- before made alive and gave it its expiry (keep_queue).
  if (is_head and first_live) or (not is_head and alive) then
    alive_made = false
  end
else
  -- Join the tail with room for the
  -- Redisson acquisitions ahead (see prelude.lua): now + the waiter timeout
  -- + ARGV[8] (Redisson's fairLockWaitTimeout) for each Redisson waiter
  -- queued, all ahead, and no less than the latest deadline, which
  -- covers longer Java waits while the chain is fresh. Never more: a chain
  -- that added to the last deadline grew with every turn, as fairlock
  -- acquisitions take nothing off it.
  --
  -- The Redisson waiters are counted as the entries of Redisson's zset
  -- less the live fairlock waiters (liveness deadline not passed): two
  -- O(log N) reads, never a visit of the queue (X8). A liveness entry can
  -- outlive its queue entry, as Redisson's scripts know nothing of it:
  -- Redisson's purge drops a fairlock waiter first in line whose deadline
  -- has passed, and Redisson's delete() drops them all. Counted as a
  -- fairlock waiter, such a stale entry would hide a Redisson waiter: this
  -- owner would join without room for it, and that waiter's acquisition,
  -- which takes its whole wait off every deadline, would leave this owner
  -- dead to Redisson, whose next purge drops it alive and lets the
  -- Redisson waiters behind it overtake (X11, B3). So no stale entry is
  -- ever counted:
  -- - this owner's own earlier entries go first: the dead entry it left
  --   behind (out of the list already, above), or a liveness entry whose
  --   queue entry Redisson removed;
  -- - when Redisson's zset has no expiry, no fairlock join has run since
  --   Redisson made it again (every join gives it one, keep_queue), or it
  --   is gone: nothing in it is fairlock's, and every liveness entry is
  --   stale. They all go, each once (DEL);
  -- - a waiter Redisson's purge dropped was dead: first in line its
  --   Redisson deadline is its liveness deadline (tighten), so that has
  --   passed too, and only live entries are counted. (One Redisson dropped
  --   alive - its Redisson deadline run down by Java waits longer than
  --   WithRedissonSlack, or by a Java clock ahead of the server's - joins
  --   again at its next heartbeat, which takes its stale entry out.)
  -- Dead fairlock waiters still queued and entries owners left behind
  -- (leave.lua) then count as Redisson waiters: more room than needed,
  -- never less, and still one wait per queued entry (X15).
  --
  -- The chain is taken from the latest deadline in Redisson's zset rather
  -- than the tail's: never less (the tail's is one of them), and the one
  -- read keep_queue needs too, as the joiner's deadline is then the
  -- latest. Only more room, never less: a dead fairlock waiter's Redisson
  -- deadline may lie ahead still (the room it joined with), and is
  -- counted as a live Redisson waiter's would be; an entry left behind
  -- (leave.lua) has its deadline at the time it left.
  --
  -- This owner's own liveness entry is written before the live ones are
  -- counted (it is one of them; a stale one is overwritten), rather than
  -- removed first and written after.
  --
  -- A dead run at the tail is not dropped here: as the chain no longer
  -- reads the tail, it could only matter to whoever queues next, and that
  -- owner now chains on this one, live. The dead entries stay until they
  -- reach the head (B5: a Redisson waiter among them is told then), or
  -- become the tail again and a heartbeat or a leave drops them there.
  if in_timeouts then
    redis.call('zrem', KEYS[3], me)
  end
  timeouts_ttl = redis.call('pttl', KEYS[3])
  if timeouts_ttl < 0 then
    redis.call('del', KEYS[4])
    alive_made, alive_emptied = true, true
  end
  redis.call('zadd', KEYS[4], now + waiter_timeout, me)
  position = redis.call('rpush', KEYS[2], me)
  is_head = position == 1
  -- The others queued are counted in Redisson's zset, not the list:
  -- every script keeps the two in step, but an eviction of the keys with
  -- an expiry can take the list and leave a zset Redisson made without
  -- one, whose waiters still take their waits off this owner's deadline
  -- (TestJoinRoomWhenRedissonZsetHasEntriesTheListLacks). An empty zset has no Redisson waiter and no
  -- deadline to chain on: the ZADD below makes it anew, with no expiry,
  -- and keep_queue gives it, the queue and, if it held no live waiter,
  -- alive theirs.
  local others = redis.call('zcard', KEYS[3])
  local deadline = now + waiter_timeout
  if others == 0 then
    timeouts_ttl = -1
  else
    local lives = redis.call('zcount', KEYS[4], string.format('(%.0f', now), '+inf')
    -- Only this owner live in alive: the ZADD above may have made it.
    alive_made = alive_made or lives == 1
    local javas = math.max(others - (lives - 1), 0)
    deadline = deadline + javas * num(ARGV[8])
    local top = redis.call('zrevrange', KEYS[3], '0', '0', 'WITHSCORES')
    if top[2] then
      deadline = math.max(deadline, num(top[2]))
    end
  end
  redis.call('zadd', KEYS[3], deadline, me)
  latest = deadline
end
if score then
  redis.call('zadd', KEYS[4], now + waiter_timeout, me)
  -- Dead entries at the tail go at every heartbeat (this owner, live, ends
  -- the run), before a Redisson waiter chains on them (X11); a Redisson
  -- waiter that has chained on one already and is dead is told.
  drop_dead_tails(KEYS[2], KEYS[3], KEYS[4], ARGV[5], ARGV[6], me)
end
local left, stale = 0, false
if not alive_emptied then
  left, stale = left_in_queue(KEYS[3], KEYS[4])
end
if stale then
  -- Marks of entries a Redisson purge dropped: forget them (B9).
  redis.call('zremrangebyscore', KEYS[4], left_mark_arg, left_mark_arg)
end
if position > 1 then
  -- Entries owners left behind (leave.lua) do not count; the live head
  -- is ahead.
  position = math.max(position - left, 2)
end
-- The queue and Redisson's zset hold the same owners (every script, ours
-- and Redisson's, adds and removes an owner in both), so they are emptied,
-- made and given an expiry together: the queue's PTTL is the zset's,
-- unless this join made the queue (position 1).
keep_queue(KEYS[2], KEYS[3], KEYS[4], num(ARGV[8]), waiter_timeout, latest, timeouts_ttl, position == 1, alive_made)

-- Only the head can take over when the lease runs out, so only the head
-- waits no longer than the lease (X3) and the others keep their heartbeat
-- pace: a lease expiry wakes one waiter, not the whole queue.
local head = 0
if is_head then
  head = 1
  ttl = ttl or redis.call('pttl', KEYS[1])
  if ttl >= 0 and ttl < hint then
    -- PTTL says 0 in the last millisecond; never hint 0 (X4).
    hint = math.max(ttl, 1)
  end
end
return {0, hint, position, head, clock_us}
