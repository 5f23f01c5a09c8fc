-- dead_delete.lua: delete dead tasks of one queue, named or the oldest, a bounded
-- number per call.
--
-- A dead task goes whole: its record, its member of the dead set, and its unique key
-- when the key still names it (as trim_dead.lua deletes). A task that is not dead (a
-- worker runs it, it was requeued) is not deleted: it is reported not found, as is a
-- task with no record; a dead-set member whose record is gone, not a hash or no longer
-- dead loses its member only.
--
-- KEYS[1]  dead zset          PREFIX:{Q}:dead
-- KEYS[2]  task key prefix    PREFIX:{Q}:t:   (+ task id: the task hash)
-- KEYS[3]  unique key prefix  PREFIX:{Q}:u:   (+ unique key: holds the task id)
-- The task and unique keys are named by what the call reads; they carry the {Q} hash
-- tag, so they are in the slot of KEYS.
-- ARGV[1]  "ids": the tasks ARGV[4..]; "all": the dead set's oldest ARGV[2] members at
--          most, of those that died at or before ARGV[3] ms
--
-- returns {deleted, not found ids, examined}
local dead, prefix, uprefix = KEYS[1], KEYS[2], KEYS[3]
redis.call("ZCARD", dead) -- a dead set of another type fails the call before any write
local ids
if ARGV[1] == "all" then
  ids = redis.call("ZRANGEBYSCORE", dead, "-inf", ARGV[3], "LIMIT", 0, ARGV[2])
else
  ids = {}
  for i = 4, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local deleted, missing = 0, {}
for _, id in ipairs(ids) do
  local h = prefix .. id
  -- pcall: a key of another type under a task's name is not dtq's to delete
  local ok, t = pcall(redis.call, "HMGET", h, "status", "unique")
  if ok and t[1] == "dead" then
    local u = t[2]
    if u and u ~= "" then
      local uk = uprefix .. u
      local gok, holder = pcall(redis.call, "GET", uk)
      if gok and holder == id then redis.call("DEL", uk) end
    end
    redis.call("DEL", h)
    deleted = deleted + 1
  else
    missing[#missing + 1] = id
  end
  redis.call("ZREM", dead, id)
end
return {deleted, missing, #ids}
