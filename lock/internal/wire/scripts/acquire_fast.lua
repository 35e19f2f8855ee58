-- acquire_fast.lua: the start of acquire.lua (KEYS and ARGV as there), with
-- a fast path for the common case, a free lock with nobody queued (the
-- lock hash and the queue both absent: Redis deletes an empty list).
--
-- Every acquire first asks whether its user may publish the lock's
-- wake-ups (refused, X19), even here where it publishes nothing: a user
-- that may not would take a free lock and then have every renewal refused
-- (renew.lua asks too), and lose the hold at the end of its first lease.
--
-- The fast path runs before prelude.lua (scripts.go), so the helpers it
-- does not need are never made. It does what acquire.lua's own steps do for
-- that state, no more: a new hold, count 1, with a new token (B1, X6), or
-- for a request naming a hold, which cannot be there, the refusal {2}. In
-- any other state acquire.lua goes on, having read one key more.
do
  local err = refused(ARGV[6], ARGV[5])
  if err then
    return err
  end
end
-- present counts the lock hash and the queue: 2 tells acquire.lua the
-- hash exists without asking again.
local present = redis.call('exists', KEYS[1], KEYS[2])
if present == 0 then
  if ARGV[9] ~= '0' then
    -- A request naming a hold: with no lock hash, that hold is gone, and
    -- nothing is granted in its place (see acquire.lua).
    return {2}
  end
  redis.call('hset', KEYS[1], ARGV[1], '1')
  redis.call('pexpire', KEYS[1], ARGV[2])
  return next_token(KEYS[5], nil, ARGV[14])
end
