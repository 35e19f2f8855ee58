-- describe.lua: write or delete a client's description (WithDescription).
--
-- KEYS[1] description key "<key prefix>fairlock_client_info:<clientID>"
-- ARGV[1] the description, JSON {"host", "pid", "name"}; "" deletes it
-- ARGV[2] its lifetime in ms (ignored when deleting)
--
-- Returns 1.
--
-- The key is the client's own, in its own cluster slot (not the locks'),
-- so this script runs apart from the lock scripts. The client rewrites it
-- every third of its lifetime while it is open and deletes it on Close; a
-- client that died leaves it for at most the lifetime (X15).
if ARGV[1] == '' then
  redis.call('del', KEYS[1])
else
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return 1
