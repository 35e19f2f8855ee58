-- memory_policy.lua: the server's memory limit and eviction policy, read
-- by the client when it starts and after a reconnect, so that a server
-- that may evict lock keys is refused (X18).
--
-- No KEYS, no ARGV. INFO is one of the few server commands a script may
-- run; a server that renamed or forbids it answers with an error, and the
-- client then lets it through.
--
-- Returns {maxmemory in bytes (0: no limit), maxmemory-policy}.
local info = redis.call('info', 'memory')
local limit = string.match(info, 'maxmemory:(%d+)')
local policy = string.match(info, 'maxmemory_policy:([%w%-]+)')
if not limit or not policy then
  return redis.error_reply('ERR INFO memory has no maxmemory or maxmemory_policy')
end
return {tonumber(limit), policy}
