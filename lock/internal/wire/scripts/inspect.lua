-- inspect.lua: read the lock's state; changes nothing.
--
-- KEYS[1] lock hash
-- KEYS[2] queue
-- KEYS[3] timeouts
-- KEYS[4] alive
-- KEYS[5] token counter
-- ARGV[1] how many queue entries to list (0: none)
--
-- Returns {now ms, lock pttl ms, token, queue length (without the entries
--          owners left behind, leave.lua; left_in_queue),
--          {field, count, field, count, ...},
--          {owner, deadline, heartbeats, owner, deadline, heartbeats, ...},
--          token counter pttl ms}; a waiter's deadline is its fairlock
-- liveness deadline, or for a Redisson waiter its Redisson deadline (''
-- when it has neither), and heartbeats is 1 when it has a liveness
-- deadline (only fairlock waiters write one, X2), else 0. Entries owners
-- left behind (liveness deadline left_mark) are skipped. The two PTTLs,
-- read at one instant, tell a fairlock holder from a Redisson one
-- (Mutex.Inspect: fairlock keeps the counter alive as long as its holds).
--
-- Rules: B9 reads. It visits at most ARGV[1] waiters.
local entries = {}
local limit = tonumber(ARGV[1])
if limit > 0 then
  for _, owner in ipairs(redis.call('lrange', KEYS[2], 0, limit - 1)) do
    local live = redis.call('zscore', KEYS[4], owner)
    if not live then
      entries[#entries + 1] = owner
      entries[#entries + 1] = redis.call('zscore', KEYS[3], owner) or ''
      entries[#entries + 1] = 0
    elseif tonumber(live) ~= left_mark then
      entries[#entries + 1] = owner
      entries[#entries + 1] = live
      entries[#entries + 1] = 1
    end
  end
end
return {
  server_now(),
  redis.call('pttl', KEYS[1]),
  tonumber(redis.call('get', KEYS[5]) or '0'),
  math.max(redis.call('llen', KEYS[2]) - left_in_queue(KEYS[3], KEYS[4]), 0),
  redis.call('hgetall', KEYS[1]),
  entries,
  redis.call('pttl', KEYS[5]),
}
