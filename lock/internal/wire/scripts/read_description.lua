-- read_description.lua: read a client's description (Mutex.Inspect).
--
-- KEYS[1] description key "<key prefix>fairlock_client_info:<clientID>"
--
-- Returns the description (JSON, see describe.lua), or nil when the client
-- has none: it does not describe itself, or it is gone. Changes nothing.
return redis.call('get', KEYS[1])
