-- The inbox row codec (a worker's inbox, PREFIX:{Q}:in:WORKER; lua.DecodeHandoff in Go).
-- A started row: e entry, b band, i task id, a attempt, f function, p payload,
-- t timeout ms, m max retries, u unique key, c created at ms. A delivered row: d "1",
-- e entry, b band.
local function inbox_add_started(inbox, entry, band, id, attempt, fn, payload, tmo, maxr, unique, created)
  return redis.call("XADD", inbox, "*", "e", entry, "b", band, "i", id, "a", attempt, "f", fn,
    "p", payload, "t", tmo, "m", maxr, "u", unique, "c", created)
end
local function inbox_add_delivered(inbox, entry, band)
  return redis.call("XADD", inbox, "*", "d", "1", "e", entry, "b", band)
end
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
-- KEYS[9]  limits hash          PREFIX:{Q}:limits (looked at only when a worker waits:
--          a queue with a rate or concurrency limit never hands off; claim.lua starts
--          its tasks within the limits)
-- ARGV[1]  queue name
-- ARGV[2]  consumer group
-- ARGV[3]  now ms
-- then 9 per task, from ARGV[4]:
--   id, function, payload, priority 0..9, max retries, timeout ms (0: the function's
--   default), run at ms (<= now: run now), unique key ("" for none), reuse ("1": a
--   unique key held by a dead or cancelled task passes to this one)
-- then, optionally, 2 more after the last task: the producer's W3C traceparent and
--   tracestate, written into every task of the call (a call without them writes no
--   trace fields: the 9-per-task layout tells the two apart)
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
-- Unique keys. A key names the task that holds it. A key whose holder no longer exists
-- (its record expired or was deleted) is free. A key held by a dead or cancelled task
-- passes to the new task only when the caller asks for it (reuse); the old record keeps
-- its history without the key. Otherwise the enqueue creates nothing and names the
-- holder and its status.
--
-- A call that fails (a wrong-type key) creates nothing for the task it failed on, its
-- unique key included; the tasks before it in the batch were created.
--
-- returns {id1, code1, status1, id2, …} in the order of the tasks: code 1 created, 0 a
-- task with this unique key exists (id is that task's, status its status), -1 a task
-- with this id exists already.
local now = ARGV[3]
local now_n = tonumber(now)
local group = ARGV[2]
local out = {}
local ready = {} -- band streams known to exist with their group
local waiters = true -- false once no worker waits (none can start waiting meanwhile)
local paused -- looked up on the first hand-off
local last = #ARGV
local traceparent, tracestate
if (last - 3) % 9 == 2 then
  traceparent, tracestate = ARGV[last - 1], ARGV[last]
  last = last - 2
end

-- handoff starts the task whose entry was just added to stream for one waiting worker,
-- if there is one; it returns the worker, or nil. It runs under pcall: a hand-off that
-- fails (a wrong-type key among the waiting set or an inbox) leaves the task queued, and
-- its entry, if the read had delivered it, is reclaimed like any silent delivery.
local function handoff(stream, entry, id, fn, payload, prio, maxr, tmo, unique)
  local w = redis.call("ZRANGEBYSCORE", KEYS[5], now, "+inf", "LIMIT", 0, 1)[1]
  if not w then
    waiters = false
    return nil
  end
  if paused == nil then
    paused = redis.call("EXISTS", KEYS[6]) == 1 or redis.call("EXISTS", KEYS[9]) == 1
  end
  if paused then
    waiters = false
    return nil
  end
  redis.call("ZREM", KEYS[5], w)
  local limit, consumer = string.match(w, "^(%d+) (.+)$")
  if not consumer or #payload > tonumber(limit) then return nil end
  local r = redis.call("XREADGROUP", "GROUP", group, consumer, "COUNT", 1, "STREAMS", stream, ">")
  local got = r and r[1][2][1]
  if got and got[1] == entry then
    local row = inbox_add_started(KEYS[7] .. consumer, entry, prio, id, "1", fn, payload, tmo, maxr, unique, now)
    redis.call("ZADD", KEYS[8], now, consumer .. " " .. row)
    return consumer
  elseif got then
    local row = inbox_add_delivered(KEYS[7] .. consumer, got[1], prio)
    redis.call("ZADD", KEYS[8], now, consumer .. " " .. row)
  end
  return nil
end

-- locals, not globals, in the loop every task takes: each use of a global is a lookup
local argv, keys, call = ARGV, KEYS, redis.call
local i = 4
while i <= last do
  local id, fn, payload, prio = argv[i], argv[i + 1], argv[i + 2], argv[i + 3]
  local maxr, tmo, run_at, unique, reuse = argv[i + 4], argv[i + 5], argv[i + 6], argv[i + 7], argv[i + 8]
  i = i + 9
  local task = keys[1] .. id
  -- the unique key's holder, and its status: a key whose holder is gone is free, and one
  -- held by a dead or cancelled task is taken over when the caller asks for it
  local holder, hstatus = unique ~= "" and call("GET", keys[4] .. unique), ""
  if holder then
    local ok, st = pcall(call, "HGET", keys[1] .. holder, "status")
    if not ok or not st then
      holder = false
    elseif reuse == "1" and (st == "dead" or st == "cancelled") then
      call("HSET", keys[1] .. holder, "unique", "")
      holder = false
    else
      hstatus = st
    end
  end
  if holder then
    out[#out + 1] = holder
    out[#out + 1] = 0
    out[#out + 1] = hstatus
  elseif call("EXISTS", task) == 1 then
    out[#out + 1] = id
    out[#out + 1] = -1
    out[#out + 1] = ""
  else
    -- The commands that can fail (a wrong-type stream or schedule) come before the
    -- task's writes, and the unique key is set last: a script is not rolled back, and an
    -- enqueue that fails must create nothing, its unique key included.
    -- Field order matters: small hashes are listpacks searched from the front, so the
    -- fields every claim and completion reads or rewrites come first, and the ones set
    -- later exist from the start (an absent field costs a scan of the whole hash).
    local status, entry, queued_at = "scheduled", "", ""
    local attempt, worker, started_at = "0", "", ""
    if tonumber(run_at) > now_n then
      call("ZADD", keys[3], run_at, id)
    else
      local stream = keys[2] .. prio
      if not ready[stream] then
        if call("EXISTS", stream) == 0 then
          call("XGROUP", "CREATE", stream, group, "0", "MKSTREAM")
        end
        ready[stream] = true
      end
      -- No attempt field: an entry without one is at attempt 0 (claim.lua, rescue.lua),
      -- and the claim turns every field of a delivered entry into a Lua string (two
      -- fewer: 3.9k instructions a claimed task). Workers built before c6b16e3 read such
      -- an entry as malformed: docs/data-model.md says the order of an upgrade from them.
      entry = call("XADD", stream, "*", "task", id)
      status, queued_at = "queued", now
      if waiters then
        local ok, consumer = pcall(handoff, stream, entry, id, fn, payload, prio, maxr, tmo, unique)
        if not ok then
          waiters = false -- a broken waiting set or inbox: no more hand-offs in this call
        elseif consumer then
          status, attempt, worker, started_at = "running", "1", consumer, now
        end
      end
    end
    -- the record is created whole in one HSET, a handed-off task's start with it: the
    -- fields claim.lua's start writes are the first five here. spec packs
    -- the start facts that never change after this as prelude.lua's pack_spec does
    -- (written out here: a call of it costs ~0.7k instructions a task), for claim.lua to
    -- read and reply as one field. Of them only function and unique are also kept by
    -- name, for the scripts that read them; the timeout, retries and creation time are
    -- in spec alone (client.DecodeTask reads them there): Redis checks each new field
    -- against every field before it, so each field more costs the enqueue ~3k.
    -- The usual task (not handed off, no unique key, due at once) leaves out the three
    -- fields that would hold their defaults: every reader takes an absent handback or
    -- unique for "", an absent run_at for 0 (docs/data-model.md), and a field written
    -- later by a rare path (a drain, a retry) is added then.
    if worker == "" and unique == "" and run_at == "0" then
      call("HSET", task,
        "status", status, "attempt", attempt, "entry", entry, "worker", worker, "started_at", started_at,
        "spec", tmo .. " " .. maxr .. " " .. now .. " 0 " .. fn, "payload", payload, "failures", "0",
        "function", fn, "priority", prio, "id", id, "queue", argv[1], "queued_at", queued_at)
    else
      call("HSET", task,
        "status", status, "attempt", attempt, "entry", entry, "worker", worker, "started_at", started_at,
        "handback", worker ~= "" and "1" or "",
        "spec", tmo .. " " .. maxr .. " " .. now .. (unique ~= "" and " 1 " or " 0 ") .. fn, "payload", payload, "failures", "0",
        "unique", unique, "function", fn, "priority", prio,
        "id", id, "queue", argv[1], "run_at", run_at, "queued_at", queued_at)
    end
    if traceparent then
      -- after the fields every claim reads: only a traced worker looks them up
      if tracestate ~= "" then
        call("HSET", task, "traceparent", traceparent, "tracestate", tracestate)
      else
        call("HSET", task, "traceparent", traceparent)
      end
    end
    if unique ~= "" then
      call("SET", keys[4] .. unique, id)
    end
    out[#out + 1] = id
    out[#out + 1] = 1
    out[#out + 1] = ""
  end
end
return out
