-- complete.lua: record the outcome of finished executions of one queue, fenced.
--
-- An execution applies only while it is the task's current one: the task is running,
-- its attempt is the execution's attempt and its entry is the execution's entry. A fenced
-- execution (its task was reclaimed after its worker went silent) changes nothing and
-- does not ACK: the entry belongs to the newer attempt.
--
-- KEYS[1]  schedule zset    PREFIX:{Q}:schedule
-- KEYS[2]  dead zset        PREFIX:{Q}:dead
-- KEYS[3+3i], KEYS[4+3i], KEYS[5+3i] for item i (0-based):
--          task hash, stream of the entry, unique key (the task hash again when none)
-- ARGV[1]  consumer group
-- ARGV[2]  now ms
-- ARGV[3]  retention ms of finished tasks (0: keep)
-- ARGV[4]  n items
-- ARGV[5+6i .. 10+6i] for item i: task id, entry id, attempt,
--          outcome ("s" succeeded, "r" retry, "d" dead), result or error text, retry at ms
--
-- returns a list of n integers: 1 applied, 0 fenced off
local group, now, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = tonumber(ARGV[4])
local out = {}
for i = 0, n - 1 do
  local h, stream, ukey = KEYS[3 + 3 * i], KEYS[4 + 3 * i], KEYS[5 + 3 * i]
  local b = 5 + 6 * i
  local id, eid, attempt, outcome, text = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4]
  -- pcall: a task key clobbered with another type is simply no longer this execution's
  local ok, t = pcall(redis.call, "HMGET", h, "status", "attempt", "entry")
  if not ok or t[1] ~= "running" or t[2] ~= attempt or t[3] ~= eid then
    out[#out + 1] = 0
  else
    if outcome == "s" then
      redis.call("HSET", h, "status", "succeeded", "result", text, "finished_at", now)
      if keep > 0 then
        redis.call("PEXPIRE", h, keep)
        if ukey ~= h then redis.call("PEXPIRE", ukey, keep) end
      end
    elseif outcome == "r" then
      local at = tonumber(ARGV[b + 5])
      redis.call("HINCRBY", h, "failures", 1)
      redis.call("HSET", h, "status", "retrying", "error", text, "run_at", at)
      redis.call("ZADD", KEYS[1], at, id)
    else
      redis.call("HINCRBY", h, "failures", 1)
      redis.call("HSET", h, "status", "dead", "error", text, "finished_at", now)
      redis.call("ZADD", KEYS[2], now, id)
    end
    redis.call("XACK", stream, group, eid)
    redis.call("XDEL", stream, eid)
    out[#out + 1] = 1
  end
end
return out
