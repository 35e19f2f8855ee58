-- unlock_fast.lua: unlock.lua's path for the common case, the last count
-- of the hold the client knows released with nobody queued. It runs
-- before prelude.lua (scripts.go), so the helpers it does not need are
-- never made, and it sends no message (nobody waits), so it need not ask
-- whether the user may publish (X19): the release it makes is whole. It
-- does what unlock.lua's own steps do for that state, no more: a first
-- request (not a retry), for count 1 of the token the counter holds, finds
-- the owner's field at 1 and an empty queue; the hash goes and the latch
-- keeps the result 0 (B4, B10). In any other state it falls through to
-- unlock.lua, having read at most three keys, none of which unlock.lua
-- reads again: the token counter is kept (read_token), and the queue's
-- first two entries (front) are where a hand-over starts. KEYS and ARGV as
-- unlock.lua.
if ARGV[8] == '0' and ARGV[7] == '1' then
  -- The queue's first two entries (none: nobody queued), which a
  -- hand-over uses rather than read them again (front, base.lua).
  front = redis.call('lrange', KEYS[2], '0', '1')
  front_whole = #front < 2
  if #front == 0 and redis.call('hget', KEYS[1], ARGV[1]) == '1' and read_token(KEYS[5]) == ARGV[6] then
    redis.call('del', KEYS[1])
    redis.call('set', KEYS[6], '0', 'px', ARGV[5])
    return 0
  end
end
