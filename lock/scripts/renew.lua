-- renew.lua: the watchdog's renewal, and the check that a hold still exists.
--
-- KEYS[1] lock hash
-- ARGV[1] owner field
-- ARGV[2] lease in ms; "0" only checks
--
-- Returns 1 while the owner holds the lock, else 0 (the hold was lost: the
-- lease ran out or someone force-unlocked; X7).
--
-- Rules: B6 watchdog renewal to the full lease.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if tonumber(ARGV[2]) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return 1
