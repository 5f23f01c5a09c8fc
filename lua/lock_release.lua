-- lock_release.lua: delete a lock only while it holds the caller's token.
--
-- KEYS[1]  lock key
-- ARGV[1]  token (the worker id)
--
-- returns 1 released, 0 the lock was not the caller's
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
