-- lock_renew.lua: extend a lock only while it holds the caller's token.
--
-- KEYS[1]  lock key
-- ARGV[1]  token (the worker id)
-- ARGV[2]  ttl ms
--
-- returns 1 renewed, 0 the lock is not (or no longer) the caller's
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
