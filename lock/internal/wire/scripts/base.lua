-- base.lua: the definitions that come first in every fair-lock script (see
-- scripts.go), before a script's fast path (acquire_fast.lua,
-- unlock_fast.lua) and before prelude.lua: the server's clock, the
-- fencing-token counter and the publish-permission check. A fast path
-- runs only these and its own few commands, and returns before
-- prelude.lua's helpers are defined: each of them is a closure made anew
-- at every run.
--
-- Time comes from the server (X1): server_now is Redis' own clock in
-- milliseconds, never a client's, read once per script run and only when
-- a step needs it (an empty queue and a free lock need none). clock_us
-- keeps the same instant in microseconds, which orders a hand-over grant
-- after the waiter's latest acquire even when both ran in one millisecond.
local clock_us = 0
local clock_ms = nil
local function server_now()
  if not clock_ms then
    local t = redis.call('time')
    clock_us = t[1] * 1000000 + t[2]
    clock_ms = math.floor(clock_us / 1000)
  end
  return clock_ms
end

-- Numbers and their text cost more than they seem (DESIGN.md, where a
-- contended acquisition's instructions go), so the scripts keep to two
-- habits:
-- - a command's constant or ARGV argument is passed to redis.call as a
--   string ('1', an ARGV value), never as a Lua number, which the server prints
--   (snprintf "%.17g") before it runs the command; only values computed
--   here are passed as numbers;
-- - a string known to hold a number (an ARGV, a score, a count) is read
--   with num, never tonumber, which parses it twice (lua_isnumber, then
--   lua_tonumber: two strtod calls).
-- An integer is still printed with '%.0f', which glibc prints digit by
-- digit in multiple precision (about 4,000 instructions): '%d' casts to a
-- C long, 32 bits on 32-bit builds of Redis, where tokens, microseconds
-- and milliseconds since 1970 do not fit.
local function num(s)
  return s + 0
end

-- front is the queue's first entries as this run has read them (nil: not
-- read): unlock_fast.lua reads the first two (LRANGE), where it would
-- otherwise ask only whether the queue exists, and the hand-over then
-- needs no LINDEX for the head or for the one after it. front_whole says
-- front holds the whole queue; front_lives holds their liveness deadlines
-- once read (one ZMSCORE for both; false: none). Only a pop of the head
-- keeps it (prelude.lua, drop); the scripts that read it change the queue
-- no other way.
local front, front_whole, front_lives = nil, false, nil

-- also is an owner whose liveness deadline the first read of another
-- owner's fetches too (one ZMSCORE, prelude.lua's is_dead), and also_live
-- what it read (nil: not read; false: none) while that entry has not
-- changed: acquire.lua's heartbeat needs its own, its purge the head's.
local also, also_live = nil, nil

-- token_keep is how much longer than the lock hash the token counter
-- lives, in ms: after that it may expire, and the next token comes from
-- the server's clock (next_token).
local token_keep = 1000

-- token_read is the token counter's value as this run last read or wrote
-- it (false: no counter), nil before the first read: a script reads it
-- once (read_token), as the release that hands the lock over reads the
-- holder's token and then draws the next. A script has one token key.
local token_read = nil
local function read_token(token_key)
  if token_read == nil then
    token_read = redis.call('get', token_key)
  end
  return token_read
end

-- next_token draws the fencing token of a new hold (X6). While the counter
-- lives it counts up by one; when it has expired (the lock unused for a
-- lease and a second), it starts again from the server's clock in
-- microseconds, which is past every token drawn before unless the lock was
-- granted more than a thousand times a millisecond on average (X15: the
-- counter does not outlive its use, and tokens never go backwards). The
-- counter then lives lifetime ms: the hold's lease and token_keep more,
-- as text when the caller has it (ARGV), else computed from lease.
--
-- Either way it is two commands. A run that has read the counter already
-- (the release that hands the lock over has checked the holder's token)
-- writes the next value with its expiry (SET PX); one that has not asks
-- the counter to count (INCR, which answers with the number itself: no
-- text is parsed or printed here) and sets the expiry (PEXPIRE). INCR of
-- an expired counter makes it at 1: that run starts from the clock.
local function next_token(token_key, lease, lifetime)
  lifetime = lifetime or lease + token_keep
  if token_read == nil then
    local token = redis.call('incr', token_key)
    if token > 1 then
      redis.call('pexpire', token_key, lifetime)
      return token
    end
    token_read = false
  end
  local token
  if token_read then
    token = token_read + 1
  else
    token = server_now() * 1000
  end
  token_read = string.format('%.0f', token)
  redis.call('set', token_key, token_read, 'px', lifetime)
  return token
end

-- refusal is the NOPERM error reply for a user that may not run cmd on
-- the channels channel_prefix .. ':*'.
local function refusal(cmd, channel_prefix)
  return redis.error_reply('NOPERM this user has no permissions to run ' .. cmd .. ' on the channels ' .. channel_prefix .. ':*, where the lock wakes its waiters (docs/security.md)')
end

-- refused returns the NOPERM error reply a script must return before it
-- writes anything when its user may not publish what the lock publishes:
-- with each command in publish on the channels channel_prefix .. ':' ..
-- owner (the wake-ups), and, when client_prefix is given, with PUBLISH on
-- client_prefix .. clientID (tell_evicted). Redis checks a script's
-- commands and channels only when the script reaches them and does not
-- undo the writes before a refused one, so asking first
-- (redis.acl_check_cmd, about a third of a microsecond) keeps a refusal
-- from leaving half a release behind (X19). Servers without that function
-- (before Redis 7.0, miniredis) are not asked.
local function refused(publish, channel_prefix, client_prefix)
  if not redis.acl_check_cmd then
    return nil
  end
  local channel = channel_prefix .. ':x'
  if publish == 'publish' then
    -- The usual list, one command: no pattern to match.
    if not redis.acl_check_cmd('publish', channel, '0') then
      return refusal('publish', channel_prefix)
    end
  else
    for cmd in string.gmatch(publish, '[^,]+') do
      if not redis.acl_check_cmd(cmd, channel, '0') then
        return refusal(cmd, channel_prefix)
      end
    end
  end
  if client_prefix and not redis.acl_check_cmd('publish', client_prefix .. 'x', '0') then
    return redis.error_reply('NOPERM this user has no permissions to run publish on the channels ' .. client_prefix .. '*, where the lock tells a holder it was evicted (docs/security.md)')
  end
  return nil
end
