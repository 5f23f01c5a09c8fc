-- wait.lua: register a waiter on a task (client.Wait), or end a registration.
--
-- A waiter subscribes to the task's channel (KEYS[1] .. ":" .. id) first, then calls
-- this, so no end is missed: an end before the call shows in the status returned, one
-- after it is published (complete.lua, cancel.lua find the task in KEYS[1]).
-- Registrations lapse: the member's score is when (ms); the waiter renews it while it
-- waits. Lapsed members are dropped at every registration, and the key expires with its
-- latest lapse, so a waiter that vanished leaves nothing behind once its lease ends.
--
-- KEYS[1]  waiters zset   PREFIX:{Q}:waiters
-- KEYS[2]  task hash      PREFIX:{Q}:t:ID
-- ARGV[1]  task id
-- ARGV[2]  now ms
-- ARGV[3]  lapse ms: register until then; "0": end the registration that lapses at
--          ARGV[4] (another waiter's later one stays)
-- ARGV[4]  the registration's lapse to end (ARGV[3] "0")
--
-- returns the task's status, or "" when there is no such task (nothing registered)
local id, now, untilms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if untilms == 0 then
  if redis.call("ZSCORE", KEYS[1], id) == ARGV[4] then redis.call("ZREM", KEYS[1], id) end
  return ""
end
local status = redis.call("HGET", KEYS[2], "status")
if not status then return "" end
if status == "succeeded" or status == "dead" or status == "cancelled" then return status end
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", "(" .. ARGV[2])
redis.call("ZADD", KEYS[1], "GT", untilms, id)
local ttl = redis.call("PTTL", KEYS[1])
if ttl < untilms - now then redis.call("PEXPIRE", KEYS[1], untilms - now) end
return status
