-- enqueue.lua: create tasks of one queue, each atomically — one task or a batch of them
-- in one call (a batch runs as that many calls in a row would, with nothing between).
--
-- KEYS[1]  task hash prefix     PREFIX:{Q}:t:      (+ id: the task's hash)
-- KEYS[2]  band stream prefix   PREFIX:{Q}:p       (+ priority: the band's stream)
-- KEYS[3]  schedule zset        PREFIX:{Q}:schedule
-- KEYS[4]  unique key prefix    PREFIX:{Q}:u:      (+ unique key: holds the task's id)
-- KEYS[5]  waiting workers      PREFIX:{Q}:waiting
-- KEYS[6]  paused flag          PREFIX:{Q}:paused
-- KEYS[7]  inbox prefix         PREFIX:{Q}:in:
-- KEYS[8]  hand-offs in flight  PREFIX:{Q}:handed
-- ARGV[1]  queue name
-- ARGV[2]  consumer group
-- ARGV[3]  now ms
-- then 8 per task, from ARGV[4]:
--   id, function, payload, priority 0..9, max retries, timeout ms (0: the function's
--   default), run at ms (<= now: run now), unique key ("" for none)
--
-- Numbers stay the strings ARGV holds: a Lua number passed to redis.call is formatted
-- with snprintf, a measurable cost per task. A batch pays the call's own cost once, looks
-- at each band's stream once and at the waiting workers until none is left.
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
-- returns {id1, code1, id2, code2, …} in the order of the tasks: code 1 created, 0 a task
-- with this unique key exists (id is that task's), -1 a task with this id exists already.
local now = ARGV[3]
local now_n = tonumber(now)
local group = ARGV[2]
local out = {}
local ready = {} -- band streams known to exist with their group
local waiters = true -- false once no worker waits (none can start waiting meanwhile)
local paused -- looked up on the first hand-off

local i = 4
while i <= #ARGV do
  local id, fn, payload, prio = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local maxr, tmo, run_at, unique = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  i = i + 8
  local task = KEYS[1] .. id
  local existing = unique ~= "" and redis.call("GET", KEYS[4] .. unique)
  if existing then
    out[#out + 1] = existing
    out[#out + 1] = 0
  elseif redis.call("EXISTS", task) == 1 then
    out[#out + 1] = id
    out[#out + 1] = -1
  else
    if unique ~= "" then
      redis.call("SET", KEYS[4] .. unique, id)
    end
    -- Field order matters: small hashes are listpacks searched from the front, so the
    -- fields every claim and completion reads or rewrites come first, and the ones set
    -- later exist from the start (an absent field costs a scan of the whole hash).
    local status, entry, queued_at = "scheduled", "", ""
    local attempt, worker, started_at = "0", "", ""
    if tonumber(run_at) > now_n then
      redis.call("ZADD", KEYS[3], run_at, id)
    else
      local stream = KEYS[2] .. prio
      if not ready[stream] then
        if redis.call("EXISTS", stream) == 0 then
          redis.call("XGROUP", "CREATE", stream, group, "0", "MKSTREAM")
        end
        ready[stream] = true
      end
      entry = redis.call("XADD", stream, "*", "task", id, "attempt", "0")
      status, queued_at = "queued", now
      local w = waiters and redis.call("ZRANGEBYSCORE", KEYS[5], now, "+inf", "LIMIT", 0, 1)[1]
      if not w then
        waiters = false
      else
        if paused == nil then
          paused = redis.call("EXISTS", KEYS[6]) == 1
        end
        if paused then
          waiters = false
        else
          redis.call("ZREM", KEYS[5], w)
          local limit, consumer = string.match(w, "^(%d+) (.+)$")
          if consumer and #payload <= tonumber(limit) then
            local r = redis.call("XREADGROUP", "GROUP", group, consumer, "COUNT", 1,
              "STREAMS", stream, ">")
            local got = r and r[1][2][1]
            if got and got[1] == entry then
              status, attempt, worker, started_at = "running", "1", consumer, now
              local row = redis.call("XADD", KEYS[7] .. consumer, "*", "e", entry, "b", prio, "i", id,
                "a", "1", "f", fn, "p", payload, "t", tmo, "m", maxr, "u", unique, "c", now)
              redis.call("ZADD", KEYS[8], now, consumer .. " " .. row)
            elseif got then
              local row = redis.call("XADD", KEYS[7] .. consumer, "*", "d", "1", "e", got[1], "b", prio)
              redis.call("ZADD", KEYS[8], now, consumer .. " " .. row)
            end
          end
        end
      end
    end
    redis.call("HSET", task,
      "status", status, "attempt", attempt, "entry", entry, "worker", worker, "started_at", started_at,
      "handback", worker ~= "" and "1" or "",
      "function", fn, "payload", payload, "timeout_ms", tmo, "max_retries", maxr,
      "failures", "0", "unique", unique, "created_at", now, "priority", prio,
      "id", id, "queue", ARGV[1], "run_at", run_at, "queued_at", queued_at)
    out[#out + 1] = id
    out[#out + 1] = 1
  end
end
return out
