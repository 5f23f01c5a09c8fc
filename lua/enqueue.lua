-- enqueue.lua: create one task, atomically.
--
-- KEYS[1]  task hash            PREFIX:{Q}:t:ID
-- KEYS[2]  stream of the band   PREFIX:{Q}:pN
-- KEYS[3]  schedule zset        PREFIX:{Q}:schedule
-- KEYS[4]  unique key           PREFIX:{Q}:u:KEY (when ARGV[10] is "1"; otherwise any key of the slot, unused)
-- ARGV[1]  task id
-- ARGV[2]  queue name
-- ARGV[3]  function name
-- ARGV[4]  payload
-- ARGV[5]  priority 0..9
-- ARGV[6]  max retries
-- ARGV[7]  timeout ms (0: the function's default)
-- ARGV[8]  now ms
-- ARGV[9]  run at ms (<= now: run now)
-- ARGV[10] "1" when KEYS[4] is a unique key
-- ARGV[11] consumer group
-- ARGV[12] unique key text (stored on the task)
--
-- Numbers stay the strings ARGV holds: a Lua number passed to redis.call is formatted
-- with snprintf, a measurable cost per task.
--
-- returns {id, code}: code 1 created, 0 a task with this unique key exists (id is that task's),
--         -1 a task with this id exists already.
local now = tonumber(ARGV[8])
local run_at = tonumber(ARGV[9])

if ARGV[10] == "1" then
  local existing = redis.call("GET", KEYS[4])
  if existing then
    return {existing, 0}
  end
end
if redis.call("EXISTS", KEYS[1]) == 1 then
  return {ARGV[1], -1}
end

local unique = ""
if ARGV[10] == "1" then
  redis.call("SET", KEYS[4], ARGV[1])
  unique = ARGV[12]
end

-- Field order matters: small hashes are listpacks searched from the front, so the
-- fields every claim and completion reads or rewrites come first, and the ones set later
-- exist from the start (an absent field costs a scan of the whole hash).
local status, entry, queued_at = "scheduled", "", ""
if run_at > now then
  redis.call("ZADD", KEYS[3], ARGV[9], ARGV[1])
else
  if redis.call("EXISTS", KEYS[2]) == 0 then
    redis.call("XGROUP", "CREATE", KEYS[2], ARGV[11], "0", "MKSTREAM")
  end
  entry = redis.call("XADD", KEYS[2], "*", "task", ARGV[1], "attempt", "0")
  status, queued_at = "queued", ARGV[8]
end
redis.call("HSET", KEYS[1],
  "status", status, "attempt", "0", "entry", entry, "worker", "", "started_at", "", "handback", "",
  "function", ARGV[3], "payload", ARGV[4], "timeout_ms", ARGV[7], "max_retries", ARGV[6],
  "failures", "0", "unique", unique, "created_at", ARGV[8], "priority", ARGV[5],
  "id", ARGV[1], "queue", ARGV[2], "run_at", ARGV[9], "queued_at", queued_at)
return {ARGV[1], 1}
