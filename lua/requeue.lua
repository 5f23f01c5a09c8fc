-- requeue.lua: put a dead task back on its stream with a fresh retry budget.
--
-- KEYS[1]      dead zset     PREFIX:{Q}:dead
-- KEYS[2]      task hash     PREFIX:{Q}:t:ID
-- KEYS[3..12]  streams p0..p9
-- ARGV[1]  consumer group
-- ARGV[2]  now ms
-- ARGV[3]  task id
--
-- returns {1, entry id} requeued, {0, reason}, or {-1, "missing"} when there is no such task
local t = redis.call("HMGET", KEYS[2], "status", "priority", "attempt", "function")
if not t[1] then return {-1, "missing"} end
if t[1] ~= "dead" then return {0, "status is " .. t[1]} end
if not t[4] or t[4] == "" then return {0, "invalid entry record: nothing to run"} end
local p = tonumber(t[2]) or 0
if p < 0 or p > 9 or p ~= math.floor(p) then p = 0 end
local stream = KEYS[3 + p]
if redis.call("EXISTS", stream) == 0 then
  redis.call("XGROUP", "CREATE", stream, ARGV[1], "0", "MKSTREAM")
end
local xid = redis.call("XADD", stream, "*", "task", ARGV[3], "attempt", tonumber(t[3]) or 0)
redis.call("HSET", KEYS[2], "status", "queued", "failures", 0, "entry", xid, "queued_at", ARGV[2])
redis.call("HDEL", KEYS[2], "finished_at", "cancel") -- an old cancel request does not stop the new run
redis.call("ZREM", KEYS[1], ARGV[3])
return {1, xid}
