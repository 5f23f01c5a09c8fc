-- enqueue.lua: create one task, atomically.
--
-- KEYS[1]  task hash            PREFIX:{Q}:t:ID
-- KEYS[2]  stream of the band   PREFIX:{Q}:pN
-- KEYS[3]  schedule zset        PREFIX:{Q}:schedule
-- KEYS[4]  unique key           PREFIX:{Q}:u:KEY (when ARGV[10] is "1"; otherwise any key of the slot, unused)
-- KEYS[5]  waiting workers      PREFIX:{Q}:waiting
-- KEYS[6]  paused flag          PREFIX:{Q}:paused
-- KEYS[7]  inbox prefix         PREFIX:{Q}:in:
-- KEYS[8]  hand-offs in flight  PREFIX:{Q}:handed
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
-- The hand-off. A worker whose last claim on this queue found nothing registers in
-- KEYS[5] (claim.lua) and blocks on the bands and on its inbox. A task to run now is
-- then started here for one such worker, as claim.lua starts a fresh delivery: the
-- entry is delivered to it (XREADGROUP, so it sits in its PEL like any claimed entry),
-- the task written running at attempt 1, and the started row put on its inbox, whose
-- blocking read returns it: the function starts without a claim round trip. A
-- registration serves once and lapses at its score (ms). No hand-off when the queue is
-- paused or the payload is over the worker's limit (the claim kills such a task). The
-- task's handback field is set to the attempt until the worker's next claim says it
-- got the row: a worker that died holding an unread hand-off did not fail the task.
-- When the read delivers an older entry instead (one still undelivered: a retry put back
-- while every worker was busy, or one left while the queue was paused), the inbox says
-- so ("d"), and the worker claims that entry itself.
-- Every inbox row is noted in KEYS[8] ("WORKER ROWID", scored by now) until the worker's
-- next claim says it got it; the scheduler leader puts back on the stream the tasks of
-- rows a dead worker never read (rescue.lua).
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
local attempt, worker, started_at = "0", "", ""
if run_at > now then
  redis.call("ZADD", KEYS[3], ARGV[9], ARGV[1])
else
  if redis.call("EXISTS", KEYS[2]) == 0 then
    redis.call("XGROUP", "CREATE", KEYS[2], ARGV[11], "0", "MKSTREAM")
  end
  entry = redis.call("XADD", KEYS[2], "*", "task", ARGV[1], "attempt", "0")
  status, queued_at = "queued", ARGV[8]
  local w = redis.call("ZRANGEBYSCORE", KEYS[5], ARGV[8], "+inf", "LIMIT", 0, 1)[1]
  if w and redis.call("EXISTS", KEYS[6]) == 0 then
    redis.call("ZREM", KEYS[5], w)
    local limit, consumer = string.match(w, "^(%d+) (.+)$")
    if consumer and #ARGV[4] <= tonumber(limit) then
      local r = redis.call("XREADGROUP", "GROUP", ARGV[11], consumer, "COUNT", 1,
        "STREAMS", KEYS[2], ">")
      local got = r and r[1][2][1]
      if got and got[1] == entry then
        status, attempt, worker, started_at = "running", "1", consumer, ARGV[8]
        local row = redis.call("XADD", KEYS[7] .. consumer, "*", "e", entry, "b", ARGV[5], "i", ARGV[1],
          "a", "1", "f", ARGV[3], "p", ARGV[4], "t", ARGV[7], "m", ARGV[6], "u", unique,
          "c", ARGV[8])
        redis.call("ZADD", KEYS[8], ARGV[8], consumer .. " " .. row)
      elseif got then
        local row = redis.call("XADD", KEYS[7] .. consumer, "*", "d", "1", "e", got[1], "b", ARGV[5])
        redis.call("ZADD", KEYS[8], ARGV[8], consumer .. " " .. row)
      end
    end
  end
end
redis.call("HSET", KEYS[1],
  "status", status, "attempt", attempt, "entry", entry, "worker", worker, "started_at", started_at,
  "handback", worker ~= "" and "1" or "",
  "function", ARGV[3], "payload", ARGV[4], "timeout_ms", ARGV[7], "max_retries", ARGV[6],
  "failures", "0", "unique", unique, "created_at", ARGV[8], "priority", ARGV[5],
  "id", ARGV[1], "queue", ARGV[2], "run_at", ARGV[9], "queued_at", queued_at)
return {ARGV[1], 1}
