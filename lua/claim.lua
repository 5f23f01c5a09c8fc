-- claim.lua: take stream entries for one worker and start their tasks, atomically.
--
-- Closes the design's races 1 and 2. A task is started from an entry only when
--   * the task is queued and the entry's attempt is not older than the task's
--     (a fresh delivery; the task's attempt becomes entry attempt + 1), or
--   * the task is running from this very entry and the entry was just taken over by
--     XAUTOCLAIM from a silent worker (a reclaim; the attempt is incremented, so the
--     silent worker's execution is fenced off).
-- Every other entry is absorbed: XACK + XDEL, nothing runs (TASK_DUPLICATE_ABSORBED),
-- except the entry a task is running from, which stays pending for its owner or a reaper.
-- An entry without an attempt field is at attempt 0 (a fresh task's entry is written
-- so: see enqueue.lua). An entry without a task field, with a bad attempt or naming no
-- task hash (or a key that is not a hash) is moved to a dead record "invalid-<entry id>"
-- that keeps its raw fields.
-- A task record whose status or attempt is not one dtq writes cannot be run safely (it may
-- or may not have run): the task is killed with an error quoting the bad value, the rest
-- of its record kept, and reported among the invalid entries under its own id.
--
-- The task hash is named by the entry just read, so it cannot come in through KEYS; it
-- is KEYS[12] .. task id, a key of the same slot (same {Q} hash tag) as every KEY here.
--
-- KEYS[1..10] streams p0..p9
-- KEYS[11]    paused flag          PREFIX:{Q}:paused
-- KEYS[12]    task key prefix      PREFIX:{Q}:t:
-- KEYS[13]    dead zset            PREFIX:{Q}:dead
-- KEYS[14]    receipt of this call PREFIX:{Q}:r:CALL
-- KEYS[15]    receipt of the caller's previous call on this queue (deleted: it got its reply)
-- KEYS[16]    waiting workers      PREFIX:{Q}:waiting
-- KEYS[17]    this worker's inbox  PREFIX:{Q}:in:WORKER
-- KEYS[18]    left marker          PREFIX:{Q}:left:WORKER (leave.lua)
-- KEYS[19]    hand-offs in flight  PREFIX:{Q}:handed (enqueue.lua, rescue.lua)
-- KEYS[20]    limits hash          PREFIX:{Q}:limits
-- KEYS[21]    limit state prefix   PREFIX:{Q}:lim: (+ "rate:SCOPE", "run:SCOPE")
-- KEYS[22]    waiters zset         PREFIX:{Q}:waiters (wait.lua): a task this call ends
--             (killed, or cancelled by a reclaim) wakes its waiters as complete.lua does
-- KEYS[23]    unique key prefix    PREFIX:{Q}:u: (+ unique key)
-- KEYS[24]    fence epoch          PREFIX:{Q}:epoch: raised by one (GET, then SET: the
--             documented ACL has no INCR) by a call that reclaims a running task, before
--             the task's record changes (its old execution loses it while the entry
--             stays pending); the reply's last value is the epoch after the call (see
--             complete.lua)
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (worker id)
-- ARGV[3]  now ms
-- ARGV[4]  mode: "read" (XREADGROUP new entries, bands 9..0) or "reclaim" (XAUTOCLAIM);
--          "reread": read, after the caller's idle read failed without a reply from
--          Redis (its connection dropped): the inbox rows pending for the caller that
--          it did not name as received were delivered to that read, and are taken
--          as unread ones are
-- ARGV[5]  how many entries to take at most
-- ARGV[6]  payload limit in bytes
-- ARGV[7]  min idle ms (reclaim mode)
-- ARGV[8]  queue name
-- ARGV[9]  read mode: when nothing is started, register in KEYS[16] for a hand-off
--          (enqueue.lua) until this time in ms; "0": do not
-- ARGV[10] the calling process's tag: a process that left (KEYS[18] holds its tag) is
--          draining and never registers again
-- ARGV[11] receipt lifetime ms (lua.ReceiptTTL)
-- ARGV[12] inbox lifetime ms past the worker's registration (lua.InboxTTL)
-- ARGV[13] the longest task id taken from an entry (lua.MaxEntryTaskID)
-- ARGV[14] lapsed registrations removed per call at most (lua.LapsedPerCall)
-- ARGV[15] r: hand-offs the caller got from its blocking read of the inbox
-- then r pairs: inbox entry id, task id
-- then n: entries already delivered to this consumer (from a blocking XREADGROUP)
-- then n pairs: band, entry id
-- then h: entries the caller runs now (reclaim mode: never taken back from itself)
-- then h pairs: band, entry id
-- last: retention ms of finished tasks ("0": kept), for a task a reclaim ends cancelled:
--       its record and unique key then expire as complete.lua's and cancel.lua's do
--
-- Hand-offs (see enqueue.lua). The caller's inbox rows it names were received: they are
-- deleted, their tasks' handback marks cleared and their notes in KEYS[19] removed. Rows
-- it has not read yet (it was busy and did not block) are read here and returned among
-- the started, still-current ones only; "d" rows name an entry delivered to it, taken here as a delivered one. In read
-- mode a call that starts a task ends the caller's registration; one that finds nothing
-- registers it (member "PAYLOADLIMIT WORKER"), creating the inbox and its group.
--
-- A call resent after its reply was lost (a dropped connection; go-redis resends, or the
-- worker's next call reuses the unanswered call's name) finds its receipt and gets the
-- same reply, less the starts that are no longer current: nothing it claimed is stranded,
-- and nothing reclaimed meanwhile runs twice. Receipts live ARGV[11] at most; the caller's
-- next call on the queue deletes the previous one.
--
-- While the queue is paused (KEYS[11] exists) nothing starts that the caller did not
-- already hold: no entries are read, none reclaimed, and entries delivered to the caller
-- (by a blocking read issued before the pause, or an inbox "d" row) are returned to
-- their stream unstarted, as new entries. Hand-offs already started for the caller (an
-- inbox row written before the pause) are the caller's and run.
--
-- Rate and concurrency limits (KEYS[20], one HGETALL a call; empty: none, and nothing
-- else here costs anything). A definition "rate=R;per=MS;burst=B;conc=C" limits its
-- scope ("" the whole queue, else the tasks of one function): at most R starts per MS
-- ms (GCRA, up to B at once; the theoretical arrival time in µs in KEYS[21].."rate:SCOPE")
-- and at most C running tasks (their ids in the set KEYS[21].."run:SCOPE"; SCOPE is "q"
-- or "f:NAME"). A fresh start takes a token and a slot of each scope it falls in; a
-- reclaim of a running task keeps the slot it holds (same task id) and takes no token.
-- An entry over a limit is not started: it is set aside, XCLAIMed to the pseudo-consumer
-- "~limited" (it stays pending, its task queued); a read looks at a band's oldest
-- set-aside entries (SETASIDE_SCAN) before its new ones and starts those now allowed,
-- and reads no new entries from a band holding SETASIDE_MAX set-aside ones; a reclaim
-- does the same look first, then restarts the idle clock of the entries still set aside,
-- so its XAUTOCLAIM reaches silent workers' entries behind them. A scope that
-- looks full has its members checked: a task no longer running gives its slot back.
-- A queue with a limit never registers its worker for hand-offs. A read that the
-- queue's own limit leaves nothing to start replies throttled = the time (ms) of its
-- next token, or now + CONC_RECHECK ms when its slots are full.
--
-- returns {started, absorbed, invalid, paused, returned, broken, throttled, recheck}
--   started:  flat, 3 values a start: head, spec, payload, and 2 more, failures and
--             slots, when the task failed before or the queue has limits (failures is
--             the only integer among them: it tells a start of 5 values from the next
--             start's head). One list, not a table a start: Redis converts each table
--             of a script's reply with several lookups, more than a start's values cost.
--             head: "ENTRY{BAND{ATTEMPT{HOW{ID" (the id last: it may hold an opening
--             brace, in a hand-off a closing one too), how 0 a fresh delivery, 1 a reclaim, 2 a hand-off read from the
--             inbox; the receipt's text row of the start as is (see below)
--             spec: the task's start facts packed as enqueue.lua writes them,
--             "TIMEOUT_MS MAX_RETRIES CREATED_AT UNIQUE FUNCTION" (a record written before
--             specs has them built from its own fields; a hand-off's from its inbox row)
--             slots: the concurrency scopes the task holds a slot of, space separated
--             ("q", "f:NAME"); "" none (complete.lua gives them back)
--             A replay of a receipt written by an earlier release may also return whole
--             rows as tables ({entry, band, id, attempt, function, payload, …}).
--   absorbed: list of {entry, band, id, status}  (status "dead" when the script killed the task,
--             "cancelled" when a reclaim found its cancel requested)
--   invalid:  list of {entry, band, dead id, reason}
--   paused:   1 when the queue is paused (no new entries were read or reclaimed)
--   returned: list of {entry, band, task id, new entry}: delivered while paused, put back
--   broken:   bands (read mode) whose key is not a stream: skipped, the others served
--   throttled: 0, or (read mode) the time in ms before which the queue's limit starts nothing
--   recheck:  0, or the time in ms when entries set aside by a limit may start: the
--             caller looks again then (a blocking read would not wake for them)
--   epoch:    the queue's fence epoch (KEYS[24]) when the call ended, as a string: "0"
--             when the key is absent, "" when it holds no count (then no completion of
--             these starts takes complete.lua's short path). Every start of the reply is
--             current at this epoch.
-- now stays a string: a Lua number passed to redis.call is formatted with snprintf.
local group, consumer, now = ARGV[1], ARGV[2], ARGV[3]
local mode, want, maxpayload = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
-- "reread": read mode, and the inbox rows of a lost idle read are taken (see the top)
local reread = mode == "reread"
if reread then mode = "read" end
local minidle, queue = tonumber(ARGV[7]), ARGV[8]
local maxid, lapsedmax = tonumber(ARGV[13]), ARGV[14]
local prefix, deadkey = KEYS[12], KEYS[13]
local keep = ARGV[#ARGV]
-- locals, not globals, on the path every start takes: each use of a global is a lookup
local rcall, rpcall, keys, find = redis.call, redis.pcall, KEYS, string.find

-- epoch_of reads the fence epoch as the reply carries it (see the top): v the reply of a
-- GET of KEYS[24]. A count has at most 15 digits, so that Lua's numbers raise it exactly.
local function epoch_of(v)
  if v == false then return "0" end
  if type(v) == "string" and #v <= 15 and string.match(v, "^%d+$") then return v end
  return "" -- another type, or not a count: no short path, and nothing raises it
end

-- A receipt keeps, for each start, its entry, band, task id, attempt, how and slots, not
-- the whole started row: packing every row with its payload cost more than the start
-- itself, and a replay is rare. It is built from the started rows once the call is done
-- (see the end of this script), as text when it can be: the starts' heads,
-- "ENTRY{BAND{ATTEMPT{HOW{ID", joined by "}" (a call without limits, whose task ids hold
-- no closing brace: claim.lua starts no other from an entry); else flat, RECEIPT_STRIDE
-- values a start, slots false without limits. The rest of the reply is kept with them
-- (MessagePack), unless it is all empty or 0, as in a busy worker's usual call: then the
-- receipt is the text alone (it starts with a digit, an entry id; MessagePack's array
-- with a byte of 0x90 or more).
local RECEIPT_STRIDE = 6

-- head_of is a start's head as the reply and the receipt's text carry it (see the top);
-- every part a string
local function head_of(eid, band, attempt, how, id)
  return eid .. "{" .. band .. "{" .. attempt .. "{" .. how .. "{" .. id
end

-- is_text reports whether a receipt is the starts' text alone (it begins with an entry
-- id's digit), not MessagePack (an array begins with a byte of 0x90 or more)
local function is_text(receipt)
  local c = string.byte(receipt, 1)
  return c ~= nil and c >= 48 and c <= 57
end

-- the reply's starts (see the top), and their heads in order: the receipt's text
local started, heads, nheads = {}, {}, 0

-- start appends a start to started as the reply carries it (see the top): head, spec,
-- payload, then failures and slots when failures is not 0 or slots is given ("": the
-- queue has limits, the task holds no slot); and its head to heads
local function start(head, spec, payload, failures, slots)
  local n = #started
  started[n + 1], started[n + 2], started[n + 3] = head, spec, payload
  if failures ~= 0 or slots then started[n + 4], started[n + 5] = failures, slots or "" end
  nheads = nheads + 1
  heads[nheads] = head
end

-- old_spec builds the spec of task record h written before enqueue.lua packed its start
-- facts into the field "spec" (absent there) from the fields that hold them one by one.
local function old_spec(h)
  local o = redis.call("HMGET", h, "timeout_ms", "max_retries", "created_at", "unique", "function")
  return pack_spec(o[1] or "0", o[2] or "0", o[3] or "0", o[4] or "", o[5] or "")
end

-- spec_fn is the function a spec names (after its four numbers)
local function spec_fn(spec)
  return string.match(spec, "^[^ ]* [^ ]* [^ ]* [^ ]* (.*)$") or ""
end

local receipt = redis.call("GET", KEYS[14])
if receipt then
  -- A replay can come long after the call ran: the reply was lost, and the worker resends
  -- the call by name once Redis answers again. A task started then may have been
  -- reclaimed since (its entry went idle past the visibility timeout): replay only the
  -- starts still current, and restart their entries' idle clocks, so no reaper takes
  -- them before this worker's next heartbeat does.
  local out
  if is_text(receipt) then
    out = {receipt, {}, {}, 0, {}, {}, 0, 0}
  else
    out = cmsgpack.unpack(receipt)
  end
  local kept = out[1]
  if type(kept) == "string" then
    -- text (see the top): the row is rebuilt from the task's record, which a
    -- still-current start has not changed since
    for rec in string.gmatch(kept, "[^}]+") do
      local eid, band, attempt, how, id = string.match(rec, "^([^{]*){(%d){(%d+){(%d){(.*)$")
      if eid then
        local h = prefix .. id
        local t = redis.pcall("HMGET", h, "status", "attempt", "entry", "worker", "spec", "payload", "failures")
        if is_current(t, attempt, eid) and t[4] == consumer then
          band = tonumber(band)
          redis.call("XCLAIM", KEYS[band + 1], group, consumer, 0, eid, "JUSTID")
          start(rec, t[5] or old_spec(h), t[6] or "", tonumber(t[7]) or 0)
        end
      end
    end
  elseif type(kept[1]) == "table" then
    -- a receipt holding whole started rows (written before receipts were made compact)
    for _, s in ipairs(kept) do
      local ok, t = pcall(redis.call, "HMGET", prefix .. s[3], "status", "attempt", "entry", "worker")
      if ok and is_current(t, tostring(s[4]), s[1]) and t[4] == consumer then
        redis.call("XCLAIM", KEYS[s[2] + 1], group, consumer, 0, s[1], "JUSTID")
        started[#started + 1] = s
      end
    end
  else
    -- RECEIPT_STRIDE values a start (see the end of this script): the row is rebuilt
    -- from the task's record, which a still-current start has not changed since
    for i = 1, #kept, RECEIPT_STRIDE do
      local eid, band, id, attempt, how, slots = kept[i], kept[i + 1], kept[i + 2], kept[i + 3], kept[i + 4], kept[i + 5]
      local h = prefix .. id
      local t = redis.pcall("HMGET", h, "status", "attempt", "entry", "worker", "spec", "payload", "failures")
      if is_current(t, tostring(attempt), eid) and t[4] == consumer then
        redis.call("XCLAIM", KEYS[band + 1], group, consumer, 0, eid, "JUSTID")
        start(head_of(eid, tostring(band), tostring(attempt), tostring(how), id),
          t[5] or old_spec(h), t[6] or "", tonumber(t[7]) or 0, slots or nil)
      end
    end
  end
  out[1] = started
  -- a receipt of an earlier release may hold fewer values: the epoch comes last
  if not out[5] then out[5] = {} end
  if not out[6] then out[6] = {} end
  out[7], out[8] = out[7] or 0, out[8] or 0
  out[9] = epoch_of(rpcall("GET", KEYS[24]))
  return out
end
if KEYS[15] ~= KEYS[14] then
  redis.call("DEL", KEYS[15])
end

-- the queue's limits, by scope ("" the queue, else a function): false when none
local limits = false
do
  local raw = redis.pcall("HGETALL", KEYS[20])
  if raw.err then
    return redis.error_reply("WRONGTYPE the limits key " .. KEYS[20] .. " is not a hash")
  end
  for i = 1, #raw, 2 do
    local d = {}
    for k, v in string.gmatch(raw[i + 1], "(%a+)=([^;]*)") do d[k] = tonumber(v) end
    local l = {}
    if d.rate and d.rate >= 1 and d.per and d.per >= 1 then
      l.t = d.per * 1000 / d.rate -- emission interval, µs
      l.burst = math.max(1, math.floor(d.burst or 1))
    end
    if d.conc and d.conc >= 1 then l.conc = math.floor(d.conc) end
    if l.t or l.conc then
      if not limits then limits = {} end
      limits[raw[i]] = l
    end
  end
end

local absorbed, invalid, returned, broken = {}, {}, {}, {}
-- the fence epoch this call raised KEYS[24] to (see the top), once it reclaims a running
-- task; false before
local bumped = false

-- bump raises the fence epoch, once a call: a key of another type, or not holding a
-- count, is left as it is (every claim replies "" for it, so nothing takes the short
-- path); SET through redis.call, so that a failure stops the call before the record of
-- the task being reclaimed changes
local function bump()
  if bumped then return end
  local e = epoch_of(rpcall("GET", KEYS[24]))
  if e ~= "" then
    e = string.format("%d", tonumber(e) + 1)
    rcall("SET", KEYS[24], e)
  end
  bumped = e
end
-- false once a start's task id holds a brace: its receipt is not text (see the top)
local textreceipt = true
-- the entries the caller runs now, "band entry": a reclaim leaves them to it (its process
-- may have stalled between touching them and this call; they are not a silent worker's)
local holds = {}
-- A paused queue starts nothing its caller did not already hold: no new reads, no
-- reclaims, and entries a blocking read issued before the pause delivered anyway go back.
local paused = 0
if redis.call("EXISTS", KEYS[11]) == 1 then paused = 1 end

local function ack(stream, eid)
  redis.call("XACK", stream, group, eid)
  redis.call("XDEL", stream, eid)
end

local function reject(stream, band, eid, fields, reason)
  ack(stream, eid)
  local did = "invalid-" .. eid
  local raw = "{}"
  if fields and #fields > 0 then
    local m = {}
    for i = 1, #fields, 2 do m[tostring(fields[i])] = tostring(fields[i + 1]) end
    raw = cjson.encode(m)
  end
  redis.call("HSET", prefix .. did, "id", did, "queue", queue, "function", "",
    "status", "dead", "priority", band, "attempt", 0, "failures", 0,
    "error", reason, "raw", raw, "entry", eid, "created_at", now, "finished_at", now)
  redis.call("ZADD", deadkey, now, did)
  invalid[#invalid + 1] = {eid, band, did, reason}
end

-- small counts as strings: a Lua number passed to redis.call is formatted with snprintf
local digits = {"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16"}
local bands = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
-- and the other way: the usual counts without tonumber (strtod)
local small = {["0"] = 0, ["1"] = 1, ["2"] = 2, ["3"] = 3}

local statuses = {queued = true, running = true, scheduled = true, retrying = true,
  succeeded = true, dead = true, cancelled = true}

-- a count as dtq writes it: an integer small enough to come back from Lua unchanged
-- (a number above 1e17 would be written back as "1e+17", which no fence matches)
local floor = math.floor
local function count(v)
  local x = tonumber(v)
  if not x or x < 0 or x ~= floor(x) or x > 1e9 then return nil end
  return x
end

local function quote(s)
  if #s > 64 then s = string.sub(s, 1, 64) .. "..." end
  return string.format("%q", s)
end

-- ended: task id (function fn) ended here, with status. The concurrency slots a running
-- task held come back now (an SREM of a slot it did not hold changes nothing), and a
-- waiter on it is woken. Rare paths only: nothing here runs for a task that starts.
local function ended(id, fn, status)
  if limits then
    redis.pcall("SREM", KEYS[21] .. "run:q", id)
    if fn and fn ~= "" then redis.pcall("SREM", KEYS[21] .. "run:f:" .. fn, id) end
  end
  -- pcall: a waiters key of another type costs its waiters the push, not the outcome
  if redis.pcall("ZREM", KEYS[22], id) == 1 then
    redis.call("PUBLISH", KEYS[22] .. ":" .. id, status)
  end
end

local function corrupt(stream, band, eid, id, h, what, fn)
  local reason = "corrupt task record: " .. what
  ack(stream, eid)
  redis.call("HSET", h, "status", "dead", "error", reason, "finished_at", now)
  redis.call("ZADD", deadkey, now, id)
  invalid[#invalid + 1] = {eid, band, id, reason}
  ended(id, fn, "dead")
end

local function kill(stream, band, eid, id, h, reason, fn)
  -- the task cannot run at all (its payload is over the limit): dead, kept for inspection
  ack(stream, eid)
  redis.call("HSET", h, "status", "dead", "error", reason, "finished_at", now)
  redis.call("ZADD", deadkey, now, id)
  absorbed[#absorbed + 1] = {eid, band, id, "dead"}
  ended(id, fn, "dead")
end

-- Limits: the state of a scope, looked up once a call (nil: not yet, false: no limit).
local SETASIDE, SETASIDE_MAX, SETASIDE_SCAN, CONC_RECHECK = "~limited", 1000, 100, 100
-- recheck: when set-aside entries may start (ms); 0: none waits
local recheck = 0
local scopes = {}
-- defined only when the queue has limits (closures cost every call that makes them)
local scope, allowed, consume, next_at, setaside_at, slots_of, setaside_count, revisit
local nowus
if limits then
  nowus = tonumber(now) * 1000
  function scope(name)
    local s = scopes[name]
    if s ~= nil then return s end
    local l = limits and limits[name]
    if not l then
      scopes[name] = false
      return false
    end
    local sc = "q"
    if name ~= "" then sc = "f:" .. name end
    s = {t = l.t, burst = l.burst, conc = l.conc, sc = sc, avail = math.huge, free = math.huge}
    if l.t then
      s.rkey = KEYS[21] .. "rate:" .. sc
      local ok, v = pcall(redis.call, "GET", s.rkey)
      local tat = ok and tonumber(v) or 0
      -- A claim late for its token, by less than a period, keeps up to half a period of
      -- the time it missed: workers wake a little after each token, and resetting to now
      -- would lose that much every period (at burst 1; a larger burst absorbs it). Two
      -- starts are never closer than half a period. A period or more late, the scope
      -- was idle: it starts from now.
      if tat < nowus then
        if tat > nowus - l.t then
          if tat < nowus - l.t / 2 then tat = nowus - l.t / 2 end
        else
          tat = nowus
        end
      end
      s.tat = tat
      s.avail = math.floor((nowus - tat) / l.t + l.burst + 1e-9)
    end
    if l.conc then
      s.run = KEYS[21] .. "run:" .. sc
      local ok, n = pcall(redis.call, "SCARD", s.run)
      if not ok then
        redis.call("DEL", s.run) -- not a set: dtq's own state, rebuilt from here
        n = 0
      end
      if n >= l.conc then
        -- looks full: a slot whose task is no longer running (a release missed) comes back
        for _, id in ipairs(redis.call("SMEMBERS", s.run)) do
          local ok2, st = pcall(redis.call, "HGET", prefix .. id, "status")
          if not ok2 or st ~= "running" then
            redis.call("SREM", s.run, id)
            n = n - 1
          end
        end
      end
      s.free = l.conc - n
    end
    scopes[name] = s
    return s
  end

  function allowed(s)
    if not s then return math.huge end
    return math.min(s.avail, s.free)
  end

  -- takes a token and a slot of s for task id; returns the slot's scope name or nil
  function consume(s, id)
    if not s then return nil end
    if s.t then
      s.avail = s.avail - 1
      s.tat = s.tat + s.t
      s.dirty = true
    end
    if s.conc then
      s.free = s.free - 1
      redis.call("SADD", s.run, id)
      return s.sc
    end
    return nil
  end

  -- next_at is when scope s lets a task start again (ms): its next token, or a recheck
  -- of its slots
  function next_at(s)
    if s.t and s.avail < 1 then return math.ceil((s.tat - s.burst * s.t + s.t) / 1000) end
    return tonumber(now) + CONC_RECHECK
  end
  function setaside_at(s)
    if s and allowed(s) < 1 then
      local at = next_at(s)
      if recheck == 0 or at < recheck then recheck = at end
    end
  end

  function slots_of(a, b)
    if a and b then return a .. " " .. b end
    return a or b or ""
  end
end

local function take(band, eid, fields, reclaiming)
  local stream = keys[band + 1]
  if not fields then
    return -- deleted while pending; XAUTOCLAIM drops it from the PEL itself
  end
  local id, a
  for i = 1, #fields, 2 do
    if fields[i] == "task" then id = fields[i + 1] elseif fields[i] == "attempt" then a = fields[i + 1] end
  end
  if not id or id == "" then
    return reject(stream, band, eid, fields, "malformed entry: no task field")
  end
  a = a or "0"
  local an = small[a] or count(a)
  if not an then
    return reject(stream, band, eid, fields, "malformed entry: attempt " .. tostring(a) .. " is not a count")
  end
  -- a closing brace would split the receipt's text (an opening one is harmless: the id
  -- comes last in its head, and prefix .. id stays in the slot of the prefix's {Q})
  if #id > maxid or find(id, "}", 1, true) then
    return reject(stream, band, eid, fields, "malformed entry: bad task id")
  end
  local h = prefix .. id
  -- in the order enqueue.lua writes them: listpack lookups scan from the front
  -- (handback, read on a reclaim only, is left out: every field asked for costs a scan)
  -- redis.pcall, not pcall(redis.call): no protected call of its own, and a key of another
  -- type comes back as a table with an err field
  -- spec: the start facts that never change after the enqueue, packed in one field
  -- failures is read only past attempt 0 (below): a task never started has none
  local t = rpcall("HMGET", h, "status", "attempt", "entry", "spec", "payload")
  if t.err then
    return reject(stream, band, eid, fields, "task record " .. id .. " is not a hash")
  end
  local status = t[1]
  if not status then
    return reject(stream, band, eid, fields, "unknown task " .. id)
  end
  local spec = t[4] or old_spec(h)
  if not statuses[status] then
    return corrupt(stream, band, eid, id, h, "status " .. quote(status) .. " is not a task status", limits and spec_fn(spec))
  end
  local attempt = 0
  if t[2] then
    attempt = small[t[2]] or count(t[2])
    if not attempt then
      return corrupt(stream, band, eid, id, h, "attempt " .. quote(t[2]) .. " is not a count", limits and spec_fn(spec))
    end
  end
  local failures = 0
  if attempt ~= 0 then
    local fv = rcall("HGET", h, "failures")
    failures = small[fv]
    if not failures then
      failures = tonumber(fv) or 0
      if failures ~= failures or failures == math.huge or failures == -math.huge then failures = 0 end
    end
  end
  local reclaimed = 0
  local qs, fs = false, false
  if status == "queued" and an >= attempt then
    if limits then
      local fn = spec_fn(spec)
      qs, fs = scope(""), fn ~= "" and scope(fn)
      if allowed(qs) < 1 or allowed(fs) < 1 then
        -- over a limit: not started, set aside (pending, its task queued)
        redis.call("XCLAIM", stream, group, SETASIDE, 0, eid, "JUSTID")
        setaside_at(qs)
        setaside_at(fs)
        return
      end
    end
    attempt = an + 1
  elseif reclaiming and holds[band .. " " .. eid] then
    return -- the caller's own live execution: XAUTOCLAIM restarted its idle clock, as a touch
  elseif reclaiming and status == "running" and t[3] == eid then
    -- The worker running this entry went silent past the visibility timeout. A hand-back
    -- at drain (handback == attempt) is not the task's fault; a silent death counts as a
    -- failure (the caller kills the task instead of running it when none are left).
    -- A task whose cancel was requested (cancel.lua) is cancelled, not run again.
    local hc = redis.call("HMGET", h, "handback", "cancel")
    if hc[2] then
      ack(stream, eid)
      redis.call("HSET", h, "status", "cancelled", "finished_at", now)
      if keep ~= "0" then
        redis.call("PEXPIRE", h, keep)
        local u = redis.call("HGET", h, "unique")
        if u and u ~= "" then redis.call("PEXPIRE", KEYS[23] .. u, keep) end
      end
      absorbed[#absorbed + 1] = {eid, band, id, "cancelled"}
      ended(id, limits and spec_fn(spec), "cancelled")
      return
    end
    -- the silent worker's execution is fenced off with its entry still pending: its
    -- completion must not take complete.lua's short path
    bump()
    if hc[1] ~= tostring(attempt) then
      failures = failures + 1
      redis.call("HSET", h, "failures", failures)
    end
    attempt = attempt + 1
    reclaimed = 1
    redis.call("HINCRBY", h, "reclaims", 1)
    if limits then
      -- a started task keeps (or takes back) its slots; no new token
      local fn = spec_fn(spec)
      qs, fs = scope(""), fn ~= "" and scope(fn)
    end
  elseif status == "running" and t[3] == eid then
    -- The running attempt's own entry, not handed over by XAUTOCLAIM: the same delivery
    -- is being taken a second time (a client retried a claim whose reply was lost).
    -- Acking it would strip the running attempt of its entry, and nobody could ever
    -- reclaim the task: leave it pending for its owner, or for the reaper.
    return
  else
    ack(stream, eid)
    absorbed[#absorbed + 1] = {eid, band, id, status}
    return
  end
  local payload = t[5] or ""
  if #payload > maxpayload then
    redis.call("HSET", h, "attempt", attempt, "worker", consumer, "entry", eid)
    return kill(stream, band, eid, id, h, "payload is " .. #payload .. " bytes, over the limit of " .. maxpayload, limits and spec_fn(spec))
  end
  local as = digits[attempt] or string.format("%d", attempt)
  -- the start, written in the record's first fields (enqueue.lua creates them in this
  -- order); the usual case: the entry is the one the task was queued with (one field less
  -- to write). Written out here, not a function: a call costs a start ~0.6k instructions
  if t[3] ~= eid then
    rcall("HSET", h, "status", "running", "attempt", as, "worker", consumer, "started_at", now, "entry", eid)
  else
    rcall("HSET", h, "status", "running", "attempt", as, "worker", consumer, "started_at", now)
  end
  local slots = nil
  if limits then
    if reclaimed == 1 then
      if qs and qs.conc then redis.call("SADD", qs.run, id) end
      if fs and fs.conc then redis.call("SADD", fs.run, id) end
      slots = slots_of(qs and qs.conc and qs.sc or nil, fs and fs.conc and fs.sc or nil)
    else
      slots = slots_of(consume(qs, id), consume(fs, id))
    end
  end
  -- the usual start (fresh, no failures, no limits): three values, its head a string
  -- the receipt reuses; head_of's format and start() written out, as a call of either
  -- costs a start 0.6-0.9k instructions
  local head = eid .. "{" .. bands[band + 1] .. "{" .. as .. (reclaimed == 1 and "{1{" or "{0{") .. id
  local n = #started
  started[n + 1], started[n + 2], started[n + 3] = head, spec, payload
  if failures ~= 0 or slots then started[n + 4], started[n + 5] = failures, slots or "" end
  nheads = nheads + 1
  heads[nheads] = head
end

-- putback returns an entry delivered while the queue is paused to its stream unstarted:
-- a new entry with the same fields takes its place (at the band's tail, undelivered),
-- and a queued task that named the old entry names the new one (cancel.lua deletes it).
local function putback(band, eid, fields)
  local stream = KEYS[band + 1]
  ack(stream, eid)
  local new = redis.call("XADD", stream, "*", unpack(fields))
  local id = ""
  for i = 1, #fields, 2 do
    if fields[i] == "task" then id = fields[i + 1] end
  end
  if id ~= "" and #id <= maxid and not string.find(id, "}", 1, true) then
    local h = prefix .. id
    local ok, t = pcall(redis.call, "HMGET", h, "status", "entry")
    if ok and t[1] == "queued" and t[2] == eid then
      redis.call("HSET", h, "entry", new)
    end
  end
  returned[#returned + 1] = {eid, band, id, new}
end

local function delivered(band, eid)
  local r = redis.call("XRANGE", KEYS[band + 1], eid, eid)
  if #r ~= 1 then
    redis.call("XACK", KEYS[band + 1], group, eid)
  elseif paused == 1 then
    putback(band, eid, r[1][2])
  else
    take(band, eid, r[1][2], false)
  end
end

local inbox = KEYS[17]
-- hand-offs the caller received: no longer unread, so no longer a hand-back if it dies
local r = tonumber(ARGV[15])
local at = 16
for i = 0, r - 1 do
  -- XDEL leaves a read row in the group's PEL: XACK it first, or the PEL grows forever
  pcall(redis.call, "XACK", inbox, group, ARGV[at])
  redis.call("XDEL", inbox, ARGV[at])
  redis.call("ZREM", KEYS[19], consumer .. " " .. ARGV[at])
  local h = prefix .. ARGV[at + 1]
  local ok, t = pcall(redis.call, "HMGET", h, "status", "attempt", "handback", "worker")
  if ok and t[1] and t[3] == t[2] and t[4] == consumer then
    redis.call("HSET", h, "handback", "")
  end
  at = at + 2
end

-- hand-offs not read yet
if redis.call("EXISTS", inbox) == 1 then
  -- row takes inbox row e as the caller's blocking read would have: a started task
  -- still current for the caller runs, a delivered entry is taken as delivered
  local function row(e)
    local f = inbox_fields(e[2])
    local band = tonumber(f.b)
    redis.call("XDEL", inbox, e[1])
    redis.call("ZREM", KEYS[19], consumer .. " " .. e[1])
    if band and band >= 0 and band <= 9 and f.e then
      if f.d then
        delivered(band, f.e)
      elseif f.i then
        local h = prefix .. f.i
        local ok2, t = pcall(redis.call, "HMGET", h, "status", "attempt", "entry", "worker", "failures")
        if ok2 and is_current(t, f.a, f.e) and t[4] == consumer then
          redis.call("HSET", h, "handback", "")
          start(head_of(f.e, bands[band + 1], f.a or "", "2", f.i),
            pack_spec(f.t or "0", f.m or "0", f.c or "0", f.u or "", f.f or ""),
            f.p or "", tonumber(t[5]) or 0, limits and "" or nil)
          if not tonumber(f.a) or string.find(f.i, "}", 1, true) then textreceipt = false end
        end
      end
    end
  end
  if reread then
    -- rows the caller's idle read was delivered and never saw (its reply was lost):
    -- pending for it in the inbox group, not among the received (acked above)
    local ok, rows = pcall(redis.call, "XREADGROUP", "GROUP", group, consumer, "STREAMS", inbox, "0")
    if ok and rows and rows[1] then
      for _, e in ipairs(rows[1][2]) do
        redis.call("XACK", inbox, group, e[1])
        if e[2] then row(e) end -- false: the row was deleted meanwhile
      end
    end
  end
  local ok, rows = pcall(redis.call, "XREADGROUP", "GROUP", group, consumer, "NOACK", "STREAMS", inbox, ">")
  if ok and rows then
    for _, e in ipairs(rows[1][2]) do row(e) end
  end
end

-- entries a blocking XREADGROUP already delivered to this consumer
local n = tonumber(ARGV[at])
for i = 0, n - 1 do
  delivered(tonumber(ARGV[at + 1 + 2 * i]), ARGV[at + 2 + 2 * i])
end
at = at + 1 + 2 * n
local h = tonumber(ARGV[at]) or 0
for i = 0, h - 1 do
  holds[ARGV[at + 1 + 2 * i] .. " " .. ARGV[at + 2 + 2 * i]] = true
end

if limits then
  -- setaside_count is how many of band's entries are set aside (limits only)
  function setaside_count(stream)
    local ok, p = pcall(redis.call, "XPENDING", stream, group)
    if not ok or not p[4] then return 0 end
    for _, c in ipairs(p[4]) do
      if c[1] == SETASIDE then return tonumber(c[2]) end
    end
    return 0
  end

  -- revisit starts band's oldest set-aside entries that the limits now allow
  function revisit(band)
    local stream = KEYS[band + 1]
    local len = redis.pcall("XLEN", stream)
    if type(len) ~= "number" or len == 0 then return 0 end
    local n = setaside_count(stream)
    if n == 0 then return 0 end
    local ok, p = pcall(redis.call, "XPENDING", stream, group, "-", "+", SETASIDE_SCAN, SETASIDE)
    if not ok then return n end
    for _, e in ipairs(p) do
      if want <= 0 or allowed(scope("")) < 1 then break end
      local eid = e[1]
      local r = redis.call("XRANGE", stream, eid, eid)
      if #r ~= 1 then
        redis.call("XACK", stream, group, eid) -- deleted meanwhile
        n = n - 1
      else
        local id
        local f = r[1][2]
        for i = 1, #f, 2 do
          if f[i] == "task" then id = f[i + 1] end
        end
        local fn = id and #id <= maxid and redis.pcall("HGET", prefix .. id, "function")
        if type(fn) ~= "string" or fn == "" or allowed(scope(fn)) >= 1 then
          redis.call("XCLAIM", stream, group, consumer, 0, eid, "JUSTID")
          take(band, eid, f, false)
          holds[band .. " " .. eid] = true -- a reclaim's XAUTOCLAIM below leaves it be
          want = want - 1
          n = n - 1
        else
          setaside_at(scope(fn))
        end
      end
    end
    return n
  end
end

local throttled = 0
if mode == "read" and paused == 0 and limits and want > 0 then
  local qs = scope("")
  if allowed(qs) < 1 then
    want = 0
    throttled = next_at(qs)
  end
end

if mode == "read" then
  if paused == 0 then
    -- the bands found empty, whose stream may not exist yet (see below)
    local empty, nempty = {}, 0
    local band = 9
    while band >= 0 and want > 0 do
      local full = false
      if limits then
        full = revisit(band) >= SETASIDE_MAX
        want = math.min(want, allowed(scope("")))
      end
      -- XLEN is far cheaper than an XREADGROUP that finds nothing: skip empty bands.
      -- A band whose key is not a stream is skipped and named in the reply: the other
      -- bands (and queues) are served, and nothing is half done.
      local ok, r = true, false
      local len = rpcall("XLEN", keys[band + 1])
      if type(len) ~= "number" then
        broken[#broken + 1] = band
      elseif full or want <= 0 then
        r = false -- too many set aside: the band waits until they drain
      elseif len > 0 then
        ok, r = pcall(rcall, "XREADGROUP", "GROUP", group, consumer,
          "COUNT", want, "STREAMS", keys[band + 1], ">")
      else
        nempty = nempty + 1
        empty[nempty] = band
      end
      if not ok then
        -- no group yet (the stream was deleted and written again): create it, nothing to read
        redis.call("XGROUP", "CREATE", KEYS[band + 1], group, "0", "MKSTREAM")
      elseif r then
        local es = r[1][2]
        for i = 1, #es do
          local e = es[i]
          take(band, e[1], e[2], false)
        end
        want = want - #es
      end
      band = band - 1
    end
    -- An empty band's stream may not exist yet (never enqueued to, or deleted). A call
    -- that ends wanting more creates it with its group, as its caller's next read is a
    -- blocking XREADGROUP of every band; a call that found what it wanted leaves it
    -- (an EXISTS an empty band cost every busy call, at 32 starts a call ~1.2k
    -- instructions a start).
    if want > 0 or limits then
      for i = 1, nempty do
        if redis.call("EXISTS", KEYS[empty[i] + 1]) == 0 then
          redis.call("XGROUP", "CREATE", KEYS[empty[i] + 1], group, "0", "MKSTREAM")
        end
      end
    end
  end
elseif mode == "reclaim" and paused == 0 then
  for band = 9, 0, -1 do
    if limits and want > 0 and revisit(band) > 0 then
      -- Entries still set aside and idle past the visibility timeout get their idle
      -- clock restarted (XCLAIM to "~limited" again, JUSTID) before the XAUTOCLAIM:
      -- taken by it, each would use up the reclaim's budget only to be set aside
      -- again, and a dead worker's running task behind them would wait for passes.
      local ok, p = pcall(redis.call, "XPENDING", KEYS[band + 1], group, "IDLE", minidle,
        "-", "+", SETASIDE_MAX, SETASIDE)
      if ok and #p > 0 then
        local ids = {}
        for i, e in ipairs(p) do ids[i] = e[1] end
        redis.call("XCLAIM", KEYS[band + 1], group, SETASIDE, 0, unpack(ids))
      end
    end
    local cursor, rounds = "0-0", 0
    while want > 0 and rounds < 10 do
      local ok, r = pcall(redis.call, "XAUTOCLAIM", KEYS[band + 1], group, consumer,
        minidle, cursor, "COUNT", want)
      if not ok then break end
      for _, e in ipairs(r[2]) do
        if e and e[1] then
          take(band, e[1], e[2], true)
          want = want - 1
        end
      end
      cursor = r[1]
      rounds = rounds + 1
      if cursor == "0-0" then break end
    end
  end
end

-- register makes the caller a waiting worker for a hand-off (enqueue.lua) until ARGV[9].
local function register(member)
  -- lapsed registrations (workers gone without leaving) go, a few per call; only
  -- commands of the documented ACL (docs/reliability.md) are used
  local lapsed = redis.call("ZRANGEBYSCORE", KEYS[16], "-inf", "(" .. now, "LIMIT", 0, lapsedmax)
  if #lapsed > 0 then redis.call("ZREM", KEYS[16], unpack(lapsed)) end
  redis.call("ZADD", KEYS[16], ARGV[9], member)
  if redis.call("EXISTS", inbox) == 0 then
    redis.call("XGROUP", "CREATE", inbox, group, "0", "MKSTREAM")
  end
  -- an inbox outlives its worker's last registration by ARGV[12]
  redis.call("PEXPIRE", inbox, tonumber(ARGV[9]) - tonumber(now) + tonumber(ARGV[12]))
end

if mode == "read" then
  local member = ARGV[6] .. " " .. consumer
  -- the registration is best-effort: a waiting set, marker or inbox of another type
  -- costs this worker its hand-offs on the queue, not the claim
  if #started > 0 then
    redis.pcall("ZREM", KEYS[16], member)
  elseif paused == 0 and not limits and ARGV[9] ~= "0" and redis.pcall("GET", KEYS[18]) ~= ARGV[10] then
    pcall(register, member)
  end
end

if limits then
  -- the rate scopes' new theoretical arrival times, once a call; they expire when spent
  for _, s in pairs(scopes) do
    if s and s.dirty then
      local ttl = math.ceil((s.tat - nowus) / 1000) + 1000
      redis.call("SET", s.rkey, string.format("%d", math.ceil(s.tat)), "PX", ttl)
    end
  end
end

local epoch = bumped
if not epoch then epoch = epoch_of(rpcall("GET", KEYS[24])) end
local out = {started, absorbed, invalid, paused, returned, broken, throttled, recheck, epoch}
if #started + #absorbed + #invalid + #returned > 0 then
  -- the starts as the top says: text, their heads; else RECEIPT_STRIDE values a start
  local kept
  if textreceipt and not limits then
    kept = table.concat(heads, "}")
  else
    kept = {}
    local i, k, n = 1, 0, #started
    while i <= n do
      local eid, band, attempt, how, id = string.match(started[i], "^([^{]*){(%d){([^{]*){(%d){(.*)$")
      local slots = false
      if type(started[i + 3]) == "number" then
        if limits then slots = started[i + 4] end
        i = i + 5
      else
        i = i + 3
      end
      kept[k + 1], kept[k + 2], kept[k + 3] = eid, tonumber(band), id
      kept[k + 4], kept[k + 5], kept[k + 6] = tonumber(attempt) or attempt, tonumber(how), slots
      k = k + RECEIPT_STRIDE
    end
  end
  -- MessagePack, not JSON: JSON formats every number with snprintf, a real cost per task
  local ok, enc = true, kept
  if type(kept) ~= "string" or not is_text(kept) or #absorbed + #invalid + #returned + #broken > 0 or paused ~= 0 or
      throttled ~= 0 or recheck ~= 0 then
    ok, enc = pcall(cmsgpack.pack, {kept, absorbed, invalid, paused, returned, broken, throttled, recheck})
  end
  if ok then redis.call("SET", KEYS[14], enc, "PX", ARGV[11]) end
end
return out
