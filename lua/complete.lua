-- complete.lua: record the outcome of finished executions of one queue, fenced.
--
-- An execution applies only while it is the task's current one: the task is running,
-- its attempt is the execution's attempt and its entry is the execution's entry. A fenced
-- execution (its task was reclaimed after its worker went silent) changes nothing and
-- does not ACK: the entry belongs to the newer attempt.
--
-- KEYS[1]  schedule zset    PREFIX:{Q}:schedule
-- KEYS[2]  dead zset        PREFIX:{Q}:dead
-- KEYS[3]  throughput hash  PREFIX:{Q}:tp:HOUR, the hour of now
-- KEYS[4]  succeeded list   PREFIX:{Q}:succeeded
-- KEYS[5]  retrying zset    PREFIX:{Q}:retrying
-- KEYS[6]  waiters zset     PREFIX:{Q}:waiters (wait.lua): a task that ends while someone
--          waits on it is removed from it and its end published on KEYS[6]:ID (the
--          final status); one EXISTS a call, a ZREM per ended task only when it exists
-- KEYS[7]  concurrency slot prefix PREFIX:{Q}:lim:run: (+ scope: a limit's running set)
-- KEYS[8]  task key prefix   PREFIX:{Q}:t:  (+ id: the task's hash)
-- KEYS[9]  band stream prefix PREFIX:{Q}:p  (+ band: the stream of the entries)
-- KEYS[10] unique key prefix PREFIX:{Q}:u:  (+ unique key)
-- KEYS[11] fence epoch       PREFIX:{Q}:epoch (claim.lua): read once a call
-- The keys of each item are built here from these prefixes, in the slot of the {Q} hash
-- tag like every KEY: passed one by one, three keys an item cost Redis more than the
-- item's HSET.
-- ARGV[1]  consumer group
-- ARGV[2]  now ms
-- ARGV[3]  retention ms of finished tasks (0: keep)
-- ARGV[4]  n items
-- ARGV[5]  throughput field of now's minute counting completions ("p" .. minute of the hour)
-- ARGV[6]  throughput field of now's minute counting failed attempts ("f" .. minute)
-- ARGV[7]  lifetime ms of a throughput hash after its newest minute
-- ARGV[8]  succeeded tasks the succeeded list keeps, about (the newest)
-- ARGV[9]  the fence epoch the claims that started every item replied (claim.lua's
--          last value), "" when not one for all: the short path below
-- ARGV[10] consumer (the worker's id), to whom the short path gives back an entry it
--          acked for a record it then found gone
-- then the items, in groups of one band each: the band (0..9), the group's count of plain
-- successes p and of other items m; then the p plain successes (succeeded, no result, no
-- unique key, no slots: the usual completion), 3 values each: task id, entry id, attempt
-- (each value sent costs Redis ~1k instructions to parse and hand to Lua); then the m
-- others, 5 values each: task id, entry id, attempt,
--          outcome ("s" succeeded, "r MS" retry at MS, "d" dead, "c" cancelled: the
--          worker stopped the function on a cancel request; in capitals, "S", "R MS", …,
--          when the task may hold a unique key: only then is it looked up), result or
--          error text. An execution holding concurrency slots (claim.lua's slots:
--          scopes "q" / "f:NAME") has them after its outcome, "s q f:NAME", "r MS q": an
--          applied outcome gives them back (SREM from KEYS[7] .. scope). In the outcome,
--          not an argument of its own: an execution without slots (and the usual
--          success) costs nothing more.
--
-- A retry of a task whose cancel was requested (field "cancel", cancel.lua) is recorded
-- as cancelled instead: the request is read on the retry branch only, never on the
-- success path. A cancelled outcome keeps the record the retention ms like a success.
--
-- Once per call, not per item: the applied completions are added to the minute's
-- throughput counters (the failed ones, retry or dead, to its failed counter too), and
-- the call's succeeded tasks to the head of the succeeded list as one entry,
-- "MS ID1 ID2 …" (MS the time they succeeded, the ids in the order of the items; a list,
-- not a zset by time: a push and a trim cost Redis a quarter of a zset's insert and
-- removal, and this runs for every task). One entry a call, not one a task: a Lua
-- string built per task ("MS ID") cost the completion 3k instructions a task. The list
-- is then cut to ceil(ARGV[8] / n) entries, n this call's successes, so that it keeps
-- about the newest ARGV[8] while calls are of a size (at most ARGV[8] entries).
-- These are bookkeeping for observers: a key of another type there is skipped, never
-- a reason to refuse an outcome. A retry is also filed in the retrying zset (removed again by
-- sched_enqueue.lua, cancel.lua and run_now.lua), so that retries are counted by ZCARD.
--
-- The short path: a band's plain successes are recorded without reading their records
-- when the queue's fence epoch (KEYS[11]) is still the one their claims replied
-- (ARGV[9]) and one XACK of their entries, made first, acks every one of them. A script
-- that takes a running task from its execution either acks the execution's entry (a
-- completion, an absorbed duplicate, a kill, a rescue) or, when the entry stays
-- pending (a reclaim), raises the epoch: with the epoch unchanged since the claims and
-- every entry still pending, each execution is still its task's current one. A
-- resent call (its first run acked the entries) and a batch after a reclaim take the
-- long path, item by item, as before. The HSET's reply still tells a record that is gone
-- (2 fields added) or of another type (WRONGTYPE): that item is answered 0 and its entry
-- given back to ARGV[10] as pending (XCLAIM … FORCE), for a reclaim to make it a dead
-- record as the long path leaves it; any other refusal fails the call once every entry
-- acked and not recorded is pending again.
--
-- Finished entries are XACKed and removed from the stream (XDEL, or XTRIM MINID below the
-- oldest pending entry), so a band's XLEN stays its undelivered plus in-flight work.
-- A band stream broken under running executions (of another type, deleted, or without
-- its group) refuses nothing: its executions' records still fence them, so their
-- outcomes are recorded like any other's, and the call goes on to the other bands (one
-- broken band refused the whole call once, and every outcome in it ran again after the
-- visibility timeout). Only the removal is skipped where there is nothing to remove.
--
-- returns a list of n integers, in the order of the items: 1 applied, 0 fenced off, 2
-- refused (the schedule or the dead set is not a zset: nothing recorded, not ACKed; a
-- reclaim retries the task); or, when every item applied (the usual call), n alone, an
-- integer
-- idless reports whether stream id a sorts before b. Ids are "ms-seq" in decimal without
-- leading zeros, so the longer ms part is the later one; with ms parts of one length and
-- ids of one length, byte order is numeric order. Plain finds and one comparison: this runs
-- for every finished entry, and pattern captures with tonumber cost more than the HSET.
local function idless(a, b)
  local da, db = string.find(a, "-", 1, true), string.find(b, "-", 1, true)
  if da ~= db then return da < db end
  if #a == #b then return a < b end
  local ma, mb = string.sub(a, 1, da), string.sub(b, 1, db)
  if ma ~= mb then return ma < mb end
  return #a < #b
end

-- nextid is the smallest stream id after id.
local function nextid(id)
  local ms, seq = string.match(id, "^(%d+)-(%d+)$")
  return ms .. "-" .. string.format("%d", tonumber(seq) + 1)
end

-- now and keep stay strings: a Lua number passed to redis.call is formatted with snprintf.
local group, now, keep = ARGV[1], ARGV[2], ARGV[3]
local waiters, slotprefix, taskprefix, streamprefix, uniqueprefix = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local waited = redis.call("EXISTS", waiters) == 1
-- The end of a finished record's retention, Redis's clock + keep, read once a call: a
-- PEXPIREAT to it costs a task 1k instructions less than a PEXPIRE, which rewrites itself
-- into a PEXPIREAT (a string object built and swapped in) for propagation. Not the
-- worker's clock: it may lag Redis's. false: PEXPIRE keep, as an ACL user set up by an
-- older docs/reliability.md, without +time or +pexpireat, still allows (its first
-- refusal switches the rest of the call over).
local expat = false
if keep ~= "0" then
  local t = redis.pcall("TIME")
  if not t.err then
    expat = string.format("%d", tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(keep))
  end
end
local function ended(id, status)
  -- pcall: a waiters key of another type costs its waiters the push, not the outcome
  if redis.pcall("ZREM", waiters, id) == 1 then
    redis.call("PUBLISH", waiters .. ":" .. id, status)
  end
end

-- finish removes a band's finished entries ids from its stream, XACKing those of them
-- in acks first (nacks of them; the short path acked the others already).
-- A band broken under its executions costs their outcomes nothing (they are recorded,
-- fenced by their records, before this) nor the other bands' in the call: a stream of
-- another type is left as it is (nothing of it to remove); a stream deleted, or without
-- its group, has nothing pending: its finished entries are XDELed (a no-op on a missing
-- key), so a group made again from the start does not deliver them anew.
local function finish(stream, ids, acks, nacks)
  if nacks > 0 and type(redis.pcall("XACK", stream, group, unpack(acks))) == "table" then return end
  -- A group delivers in id order, so every entry older than the oldest pending one was
  -- delivered and is finished: XTRIM MINID drops those node by node, far cheaper than
  -- seeking each one for XDEL. Finished entries at or after the oldest pending one are
  -- XDELed. (With nothing pending, everything up to this batch's newest entry is done.)
  local oldest = redis.pcall("XPENDING", stream, group, "-", "+", 1)
  if oldest.err then
    if string.find(oldest.err, "NOGROUP", 1, true) then redis.call("XDEL", stream, unpack(ids)) end
    return
  end
  local floor = nil
  if #oldest > 0 then floor = oldest[1][1] end
  if floor then
    -- ids as long as the floor with their dash where the floor has it (every id of a
    -- stream written with "*" in these centuries) compare as strings: one byte read,
    -- not idless's two finds and a call
    local byte = string.byte
    local del, nd = {}, 0
    local fl = #floor
    local fd = string.find(floor, "-", 1, true)
    for i = 1, #ids do
      local eid = ids[i]
      local later
      if #eid == fl and byte(eid, fd) == 45 then later = eid >= floor else later = not idless(eid, floor) end
      if later then
        nd = nd + 1
        del[nd] = eid
      end
    end
    if nd > 0 then redis.call("XDEL", stream, unpack(del)) end
  else
    local newest = ids[1]
    for i = 2, #ids do
      if idless(newest, ids[i]) then newest = ids[i] end
    end
    floor = nextid(newest)
  end
  redis.call("XTRIM", stream, "MINID", floor)
end

-- an outcome in capitals: the task may hold a unique key
local capital = {S = "s", R = "r", D = "d", C = "c"}
-- out: the codes of the items not applied, by position; the applied ones' 1s are filled
-- in at the end, and only when some item was not applied: a call whose items all apply
-- replies their count alone (a table of n ones cost each task a table insert and a
-- reply conversion)
local out, nout = {}, 0
-- applied and failed completions; the ids of the succeeded ones, for the succeeded list
local applied, failed, succ, nsucc = 0, 0, {}, 0
-- locals, not globals: each use of ARGV or redis would be a lookup in the globals
local argv, call, pcall_ = ARGV, redis.call, redis.pcall
-- the short path (see the top): the epoch is still the claims'
local short = false
if argv[9] ~= "" then
  local ep = pcall_("GET", KEYS[11])
  if ep == false then ep = "0" end
  short = ep == argv[9]
end
local consumer = argv[10]
local at, last = 11, #argv
while at < last do
  local stream, p, m = streamprefix .. argv[at], tonumber(argv[at + 1]), tonumber(argv[at + 2])
  at = at + 3
  -- the group's applied entries, removed from the stream at the end, and those of them
  -- still to XACK: one XACK for them all, not one per entry
  local done, ndone, acks, nacks = {}, 0, {}, 0
  -- the short path: every plain success's entry acked here, by one XACK
  local acked = false
  if short and p > 0 then
    local eids = {}
    for k = 1, p do eids[k] = argv[at + 3 * k - 2] end
    -- pcall: a stream of another type is not acked here, and its items take the long
    -- path (their records decide), like those of a deleted stream (XACK replies 0)
    acked = pcall_("XACK", stream, group, unpack(eids)) == p
  end
  if acked then
    for k = 0, p - 1 do
      local id, eid = argv[at + 3 * k], argv[at + 3 * k + 1]
      local h = taskprefix .. id
      local r = pcall_("HSET", h, "status", "succeeded", "finished_at", now)
      nout = nout + 1
      if r == 0 or r == 1 then
        if keep ~= "0" and (not expat or pcall_("PEXPIREAT", h, expat) ~= 1) then
          expat = false
          call("PEXPIRE", h, keep)
        end
        nsucc = nsucc + 1
        succ[nsucc] = id
        if waited then ended(id, "succeeded") end
        applied = applied + 1
        ndone = ndone + 1
        done[ndone] = eid
      else
        -- the record is gone (the HSET made one of the two fields: they go again, and
        -- with them the key; a hash holding other fields but no status keeps them) or of
        -- another type: not this execution's; its entry pending again, as the long path
        -- leaves it
        if r == 2 then call("HDEL", h, "status", "finished_at") end
        call("XCLAIM", stream, group, consumer, 0, eid, "FORCE", "JUSTID")
        if type(r) == "table" and not string.find(r.err, "WRONGTYPE", 1, true) then
          -- any other refusal fails the call, as the long path's HSET would, once the
          -- entries of the items not recorded are pending again: the worker sends the
          -- call again, and its long path records them
          for j = k + 1, p - 1 do
            call("XCLAIM", stream, group, consumer, 0, argv[at + 3 * j + 1], "FORCE", "JUSTID")
          end
          return redis.error_reply(r.err)
        end
        out[nout] = 0
      end
    end
    at = at + 3 * p
  end
  -- plain successes on the long path: the success branch below, written out (a function
  -- call would cost each ~0.6k instructions)
  for _ = 1, acked and 0 or p do
    local id, eid, attempt = argv[at], argv[at + 1], argv[at + 2]
    at = at + 3
    local h = taskprefix .. id
    local t = pcall_("HMGET", h, "status", "attempt", "entry")
    nout = nout + 1
    if t[1] == "running" and t[2] == attempt and t[3] == eid then
      call("HSET", h, "status", "succeeded", "finished_at", now)
      if keep ~= "0" and (not expat or pcall_("PEXPIREAT", h, expat) ~= 1) then
        expat = false
        call("PEXPIRE", h, keep)
      end
      nsucc = nsucc + 1
      succ[nsucc] = id
      if waited then ended(id, "succeeded") end
      applied = applied + 1
      ndone = ndone + 1
      done[ndone] = eid
      nacks = nacks + 1
      acks[nacks] = eid
    else
      out[nout] = 0
    end
  end
  for _ = 1, m do
    local id, eid, attempt, outcome, text = argv[at], argv[at + 1], argv[at + 2], argv[at + 3], argv[at + 4]
    at = at + 5
    local h = taskprefix .. id
    local slots, runat
    if #outcome > 1 then
      slots = string.sub(outcome, 3)
      outcome = string.sub(outcome, 1, 1)
    end
    local uniq = capital[outcome]
    if uniq then outcome = uniq end
    if slots then
      if outcome == "r" then
        runat, slots = string.match(slots, "^(%d+) ?(.*)$")
      end
      if slots == "" then slots = nil end
    end
    -- redis.pcall: a task key clobbered with another type is simply no longer this
    -- execution's (its error table is no current record). The task's unique key ("" or
    -- absent: none) is the record's own, as a finished task keeps it: read only when the
    -- task may hold one (a field far in the record costs the lookup a scan)
    local t
    if uniq then
      t = pcall_("HMGET", h, "status", "attempt", "entry", "unique")
    else
      t = pcall_("HMGET", h, "status", "attempt", "entry")
    end
    -- a retry goes on the schedule, a death on the dead set, first: when that zset is of
    -- another type nothing of the outcome is written (a record saying "retrying" that no
    -- schedule holds would never run again), and the entry stays pending for a reclaim
    -- prelude's is_current written out: a call of it costs a task ~0.6k instructions
    local current = t[1] == "running" and t[2] == attempt and t[3] == eid
    if current and outcome == "r" and call("HGET", h, "cancel") then outcome = "c" end
    local refused = false
    if current and (outcome == "r" or outcome == "d") then
      local r
      if outcome == "r" then r = pcall_("ZADD", KEYS[1], runat, id) else r = pcall_("ZADD", KEYS[2], now, id) end
      refused = type(r) == "table" and r.err ~= nil
    end
    nout = nout + 1
    if refused then
      out[nout] = 2
    elseif not current then
      out[nout] = 0
    else
      if outcome == "s" then
        if text == "" then
          -- no result: the field stays absent (it reads as ""), one field less to add
          call("HSET", h, "status", "succeeded", "finished_at", now)
        else
          call("HSET", h, "status", "succeeded", "result", text, "finished_at", now)
        end
        if keep ~= "0" then
          if not expat or pcall_("PEXPIREAT", h, expat) ~= 1 then
            expat = false
            call("PEXPIRE", h, keep)
          end
          local unique = t[4]
          if unique and unique ~= "" then
            if expat then call("PEXPIREAT", uniqueprefix .. unique, expat) else call("PEXPIRE", uniqueprefix .. unique, keep) end
          end
        end
        nsucc = nsucc + 1
        succ[nsucc] = id
        if waited then ended(id, "succeeded") end
      elseif outcome == "c" then
        if text == "" then
          call("HSET", h, "status", "cancelled", "finished_at", now)
        else
          call("HSET", h, "status", "cancelled", "error", text, "finished_at", now)
        end
        if keep ~= "0" then
          if not expat or pcall_("PEXPIREAT", h, expat) ~= 1 then
            expat = false
            call("PEXPIRE", h, keep)
          end
          local unique = t[4]
          if unique and unique ~= "" then
            if expat then call("PEXPIREAT", uniqueprefix .. unique, expat) else call("PEXPIRE", uniqueprefix .. unique, keep) end
          end
        end
        if waited then ended(id, "cancelled") end
      elseif outcome == "r" then
        call("HINCRBY", h, "failures", 1)
        call("HSET", h, "status", "retrying", "error", text, "run_at", runat)
        pcall_("ZADD", KEYS[5], runat, id)
        failed = failed + 1
      else
        call("HINCRBY", h, "failures", 1)
        call("HSET", h, "status", "dead", "error", text, "finished_at", now)
        failed = failed + 1
        if waited then ended(id, "dead") end
      end
      applied = applied + 1
      if slots then
        for sc in string.gmatch(slots, "%S+") do
          pcall_("SREM", slotprefix .. sc, id)
        end
      end
      ndone = ndone + 1
      done[ndone] = eid
      nacks = nacks + 1
      acks[nacks] = eid
    end
  end
  if ndone > 0 then finish(stream, done, acks, nacks) end
end
if applied > 0 then
  -- The hour's hash gets its lifetime when a minute's first completion creates the
  -- minute's field (the reply equals what was added): once a minute, not once a call.
  local c = pcall_("HINCRBY", KEYS[3], argv[5], applied)
  if c == applied then call("PEXPIRE", KEYS[3], argv[7]) end
  if failed > 0 and type(c) == "number" then call("HINCRBY", KEYS[3], argv[6], failed) end
end
if nsucc > 0 then
  local len = pcall_("LPUSH", KEYS[4], now .. " " .. table.concat(succ, " "))
  local kept = math.ceil(tonumber(argv[8]) / nsucc)
  if type(len) == "number" and len > kept then call("LTRIM", KEYS[4], 0, kept - 1) end
end
if applied == nout then return nout end
for k = 1, nout do
  if not out[k] then out[k] = 1 end
end
return out
