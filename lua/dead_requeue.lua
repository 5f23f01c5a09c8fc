-- dead_requeue.lua: requeue dead tasks of one queue, named or the oldest, a bounded
-- number per call.
--
-- Each task is requeued as requeue.lua does it: only while its record says dead (a task
-- that a worker runs, or that another call requeued, is refused, so nothing runs twice),
-- a new entry at the task's attempt, failures 0. A record with nothing to run (an
-- invalid-entry record) is refused and stays dead. A dead-set member whose record is
-- gone, not a hash, or no longer dead loses its member only. When a stream refuses its
-- XADD (a key of another type) the call stops there and says so: what it did before
-- stays done and is counted.
--
-- KEYS[1]      dead zset          PREFIX:{Q}:dead
-- KEYS[2]      task key prefix    PREFIX:{Q}:t:   (+ task id: the task hash)
-- KEYS[3..12]  streams p0..p9
-- The task keys are named by what the call reads (all) or by ARGV; they carry the {Q}
-- hash tag, so they are in the slot of KEYS.
-- ARGV[1]  consumer group
-- ARGV[2]  now ms
-- ARGV[3]  "ids": the tasks ARGV[7..]; "all": the dead set's members that died at or
--          before ARGV[6] ms, from rank ARGV[4] among those, ARGV[5] of them at most
--
-- returns {requeued, not found ids, wrong state ids, examined, kept, error}: kept counts
-- (all) the examined members still in the dead set (refused dead records), where the
-- next call starts; error is "" or the text of the stream's refusal that stopped the call
local dead, prefix, group, now = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
redis.call("ZCARD", dead) -- a dead set of another type fails the call before any write
local ids
if ARGV[3] == "all" then
  ids = redis.call("ZRANGEBYSCORE", dead, "-inf", ARGV[6], "LIMIT", ARGV[4], ARGV[5])
else
  ids = {}
  for i = 7, #ARGV do ids[#ids + 1] = ARGV[i] end
end
local requeued, missing, wrong, kept = 0, {}, {}, 0
for n, id in ipairs(ids) do
  local h = prefix .. id
  -- pcall: a key of another type under a task's name is no dead task of dtq's
  local ok, t = pcall(redis.call, "HMGET", h, "status", "priority", "attempt", "function")
  if not ok or not t[1] then
    redis.call("ZREM", dead, id)
    missing[#missing + 1] = id
  elseif t[1] ~= "dead" then
    redis.call("ZREM", dead, id)
    wrong[#wrong + 1] = id
  elseif not t[4] or t[4] == "" then
    if ARGV[3] == "all" then kept = kept + 1 end -- read from the dead set: still in it
    wrong[#wrong + 1] = id
  else
    local p = tonumber(t[2]) or 0
    if p < 0 or p > 9 or p ~= math.floor(p) then p = 0 end
    local stream = KEYS[3 + p]
    if redis.call("EXISTS", stream) == 0 then
      redis.call("XGROUP", "CREATE", stream, group, "0", "MKSTREAM")
    end
    local r = redis.pcall("XADD", stream, "*", "task", id, "attempt", tonumber(t[3]) or 0)
    if type(r) == "table" and r.err then
      return {requeued, missing, wrong, n - 1, kept, r.err}
    end
    redis.call("HSET", h, "status", "queued", "failures", 0, "entry", r, "queued_at", now)
    redis.call("HDEL", h, "finished_at", "cancel") -- an old cancel request does not stop the new run
    redis.call("ZREM", dead, id)
    requeued = requeued + 1
  end
end
return {requeued, missing, wrong, #ids, kept, ""}
