-- cancel.lua: cancel a queued, scheduled or retrying task; ask a running one to stop.
--
-- A queued task's entry is deleted when no worker has it yet; when one has it (delivered,
-- not yet started) the worker's claim finds the task cancelled and absorbs the entry.
--
-- A running task is not changed but for its field "cancel" (the request's ms, kept from
-- the first request): its status, attempt and entry, the fence of every write of its
-- execution, stay. Its worker reads the request on its next heartbeat (touch.lua) and
-- cancels the function's context; the outcome is then recorded cancelled
-- (complete.lua "c"), as is a retry outcome of the attempt. A function that ended before
-- its worker learned of the request keeps its outcome. A reclaim of the task (its worker
-- died or handed it back) cancels it instead of running it again (claim.lua).
--
-- KEYS[1]      task hash        PREFIX:{Q}:t:ID
-- KEYS[2]      schedule zset    PREFIX:{Q}:schedule
-- KEYS[3..12]  streams p0..p9
-- KEYS[13]     unique key (the task hash again when none)
-- KEYS[14]     retrying zset    PREFIX:{Q}:retrying
-- KEYS[15]     waiters zset     PREFIX:{Q}:waiters: a waiter on the task is told
--              (PUBLISH KEYS[15]:ID "cancelled", wait.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  now ms
-- ARGV[3]  retention ms (0: keep)
-- ARGV[4]  task id
--
-- returns {1, "cancelled"}, {2, "running"} when the running task's stop was requested,
-- {0, current status} (a final one), or {-1, "missing"} when there is no such task
local t = redis.call("HMGET", KEYS[1], "status", "priority", "entry")
local status = t[1]
if not status then return {-1, "missing"} end
if status == "queued" then
  local p = tonumber(t[2]) or 0
  if p >= 0 and p <= 9 and t[3] then
    local stream = KEYS[3 + p]
    local pend = redis.pcall("XPENDING", stream, ARGV[1], t[3], t[3], 1)
    if type(pend) ~= "table" or #pend == 0 then
      redis.call("XDEL", stream, t[3])
    end
  end
elseif status == "scheduled" or status == "retrying" then
  redis.call("ZREM", KEYS[2], ARGV[4])
  if status == "retrying" then redis.pcall("ZREM", KEYS[14], ARGV[4]) end
elseif status == "running" then
  if not redis.call("HGET", KEYS[1], "cancel") then redis.call("HSET", KEYS[1], "cancel", ARGV[2]) end
  return {2, "running"}
else
  return {0, status}
end
redis.call("HSET", KEYS[1], "status", "cancelled", "finished_at", ARGV[2])
local keep = tonumber(ARGV[3])
if keep > 0 then
  redis.call("PEXPIRE", KEYS[1], keep)
  if KEYS[13] ~= KEYS[1] then redis.call("PEXPIRE", KEYS[13], keep) end
end
if redis.pcall("ZREM", KEYS[15], ARGV[4]) == 1 then
  redis.call("PUBLISH", KEYS[15] .. ":" .. ARGV[4], "cancelled")
end
return {1, "cancelled"}
