-- acquire_fast.lua: acquire.lua's path for the common case, a free lock
-- with nobody queued (the lock hash and the queue both absent: Redis
-- deletes an empty list). It runs before prelude.lua (scripts.go), so the
-- helpers it does not need are never made, and it sends no message, so it
-- need not ask whether the user may publish (X19). It does what
-- acquire.lua's own steps do for that state, no more: a new hold, count 1,
-- with a new token (B1, X6). In any other state it falls through to
-- acquire.lua, having read one key more. KEYS and ARGV as acquire.lua.
if redis.call('exists', KEYS[1], KEYS[2]) == 0 then
  local lease = tonumber(ARGV[2])
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], lease)
  return {1, next_token(KEYS[5], lease), 1}
end
