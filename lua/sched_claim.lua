-- sched_claim.lua: the scheduler's claim of due tasks (seed race 3).
--
-- Moves due tasks from the schedule to the claimed set in one atomic step, so during a
-- leader overlap a due task is claimed by at most one scheduler per pass. Also returns
-- claims older than ARGV[3]: a scheduler that died between claim and enqueue left them.
--
-- KEYS[1]  schedule zset   PREFIX:{Q}:schedule
-- KEYS[2]  claimed zset    PREFIX:{Q}:claimed
-- ARGV[1]  now ms
-- ARGV[2]  most tasks to claim
-- ARGV[3]  claims at or before this time (ms) are stale
--
-- returns {due ids, stale ids, next due ms or -1}
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, limit)
for _, id in ipairs(due) do
  redis.call("ZREM", KEYS[1], id)
  redis.call("ZADD", KEYS[2], now, id)
end
local stale = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", ARGV[3], "LIMIT", 0, limit)
local nxt = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local nextdue = -1
if #nxt == 2 then nextdue = tonumber(nxt[2]) end
return {due, stale, nextdue}
