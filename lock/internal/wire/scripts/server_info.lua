-- server_info.lua: what the client needs to know of the server, read when
-- it starts and after a reconnect: the memory limit and eviction policy,
-- so that a server that may evict lock keys is refused (X18), and the
-- version, so that wake-ups go by sharded pub/sub only where the server
-- has it (Redis 7.0+; Valkey reports redis_version 7.2 or later).
--
-- No KEYS, no ARGV. INFO is one of the few server commands a script may
-- run; a server that renamed or forbids it answers with an error, and the
-- client then lets it through and wakes waiters with plain PUBLISH.
--
-- Returns {maxmemory in bytes (0: no limit), maxmemory-policy, redis_version}.
local memory = redis.call('info', 'memory')
local limit = string.match(memory, 'maxmemory:(%d+)')
local policy = string.match(memory, 'maxmemory_policy:([%w%-]+)')
local version = string.match(redis.call('info', 'server'), 'redis_version:([%d%.]+)')
if not limit or not policy or not version then
  return redis.error_reply('ERR INFO has no maxmemory, maxmemory_policy or redis_version')
end
return {tonumber(limit), policy, version}
