-- run_now.lua: put a scheduled or retrying task on its stream now, ahead of its time.
--
-- The task is queued as the scheduler would queue it (sched_enqueue.lua): a new entry at
-- the task's attempt, status queued. The XADD comes first: when the stream refuses it
-- (a key of another type) nothing is written. The task then leaves the schedule, the
-- retrying set and the scheduler's claimed set; a scheduler pass that claimed it before
-- finds it queued and drops its claim without a second entry, so it runs once.
--
-- KEYS[1]      task hash        PREFIX:{Q}:t:ID
-- KEYS[2]      schedule zset    PREFIX:{Q}:schedule
-- KEYS[3]      claimed zset     PREFIX:{Q}:claimed
-- KEYS[4]      retrying zset    PREFIX:{Q}:retrying
-- KEYS[5..14]  streams p0..p9
-- ARGV[1]  consumer group
-- ARGV[2]  now ms
-- ARGV[3]  task id
--
-- returns {1, entry id} queued, {0, current status}, or {-1, "missing"} when there is no
-- such task
local t = redis.call("HMGET", KEYS[1], "status", "priority", "attempt")
local status = t[1]
if not status then return {-1, "missing"} end
if status ~= "scheduled" and status ~= "retrying" then return {0, status} end
local p = tonumber(t[2]) or 0
if p < 0 or p > 9 or p ~= math.floor(p) then p = 0 end
local stream = KEYS[5 + p]
if redis.call("EXISTS", stream) == 0 then
  redis.call("XGROUP", "CREATE", stream, ARGV[1], "0", "MKSTREAM")
end
local xid = redis.call("XADD", stream, "*", "task", ARGV[3], "attempt", tonumber(t[3]) or 0)
redis.call("HSET", KEYS[1], "status", "queued", "entry", xid, "queued_at", ARGV[2])
-- pcall: a set of another type keeps a stale member, which the scheduler drops (the task
-- is no longer scheduled); it must not undo the queueing
redis.pcall("ZREM", KEYS[2], ARGV[3])
redis.pcall("ZREM", KEYS[3], ARGV[3])
redis.pcall("ZREM", KEYS[4], ARGV[3])
return {1, xid}
