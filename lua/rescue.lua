-- rescue.lua: put back on their streams the tasks handed to workers that never read them.
--
-- A hand-off (enqueue.lua) starts a task for a waiting worker and puts the started row
-- on its inbox. A live worker blocked on its inbox reads the row within milliseconds; a
-- row still unread a second later belongs to a worker that died (SIGKILL, OOM) or froze
-- while it waited. Without this the task would wait for the visibility timeout. The
-- scheduler leader calls this every pass.
--
-- A row is unread when it is still on the inbox and not pending in the inbox group: the
-- worker's blocking read leaves a row pending until its next claim, and a claim that
-- reads rows itself deletes them. The rescue takes the unread rows with XREADGROUP (">"),
-- as the worker would: whichever reads first owns the row, so a worker never runs a task
-- that was rescued, nor is a task it read rescued. The function never started: the task
-- goes back to queued at attempt 0 with a new entry (the old one is acked and deleted),
-- no failure counted, and any worker picks it up as a fresh delivery. A "d" row (an
-- older entry delivered to the worker, often a retry's) gets a new entry in place of
-- that one, at the same attempt: the task was queued, and stays as it was.
--
-- KEYS[1]  hand-offs in flight  PREFIX:{Q}:handed (member "WORKER ROWID", score ms)
-- KEYS[2]  task key prefix      PREFIX:{Q}:t:
-- KEYS[3]  inbox prefix         PREFIX:{Q}:in:
-- KEYS[4..13] streams p0..p9
-- ARGV[1]  consumer group
-- ARGV[2]  now ms
-- ARGV[3]  rows handed at or before this time (ms) are rescued when unread
-- ARGV[4]  at most this many notes per call
-- ARGV[5]  at most this many inbox rows taken back per note (lua.RescueRowsPerNote)
--
-- returns the ids of the tasks put back
local group, now = ARGV[1], ARGV[2]
local notes = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", ARGV[3], "LIMIT", 0, tonumber(ARGV[4]))
local out = {}

-- requeue: the delivery eid of task id on band goes (acked, deleted) and a new entry at
-- attempt ea takes its place (at attempt 0 without the field, as enqueue.lua writes it)
local function requeue(band, eid, id, ea)
  local stream = KEYS[4 + band]
  redis.call("XACK", stream, group, eid)
  redis.call("XDEL", stream, eid)
  out[#out + 1] = id
  if ea == "0" then return redis.call("XADD", stream, "*", "task", id) end
  return redis.call("XADD", stream, "*", "task", id, "attempt", ea)
end

local function rescue(worker, f)
  local band = tonumber(f.b)
  if not band or band < 0 or band > 9 or band ~= math.floor(band) or not f.e then
    return
  end
  if f.i then
    local h = KEYS[2] .. f.i
    local ok, t = pcall(redis.call, "HMGET", h, "status", "attempt", "entry", "worker", "handback")
    -- only while the task is still the hand-off's: running from that entry for that worker
    if ok and is_current(t, f.a, f.e) and t[4] == worker and t[5] == f.a then
      -- started for the worker and never run: undone, back to attempt 0
      local new = requeue(band, f.e, f.i, "0")
      redis.call("HSET", h, "status", "queued", "attempt", "0", "entry", new, "worker", "",
        "started_at", "", "handback", "", "queued_at", now)
    end
  elseif f.d then
    local r = redis.call("XRANGE", KEYS[4 + band], f.e, f.e)[1]
    if not r then return end
    local id, ea = nil, "0" -- an entry without an attempt is at attempt 0
    for i = 1, #r[2], 2 do
      if r[2][i] == "task" then id = r[2][i + 1] elseif r[2][i] == "attempt" then ea = r[2][i + 1] end
    end
    if not id or id == "" or string.find(id, "{", 1, true) or string.find(id, "}", 1, true) then
      return -- a malformed entry: the claim that reclaims it deals with it
    end
    local h = KEYS[2] .. id
    local ok, t = pcall(redis.call, "HMGET", h, "status", "entry")
    if ok and t[1] == "queued" and t[2] == f.e then
      -- delivered, never started: the same delivery again (often a retry: its attempt
      -- and failures stand)
      local new = requeue(band, f.e, id, ea)
      redis.call("HSET", h, "entry", new, "queued_at", now)
    end
  end
end

for _, note in ipairs(notes) do
  redis.call("ZREM", KEYS[1], note)
  local worker, row = string.match(note, "^(.+) (%d+%-%d+)$")
  if worker then
    local inbox = KEYS[3] .. worker
    local okp, pending = false, nil
    if #redis.call("XRANGE", inbox, row, row) == 1 then
      okp, pending = pcall(redis.call, "XPENDING", inbox, group, row, row, 1)
    end
    if okp and #pending == 0 then
      -- every unread row up to this one (older unread rows are as stale)
      for _ = 1, tonumber(ARGV[5]) do
        local okr, r = pcall(redis.call, "XREADGROUP", "GROUP", group, "rescue", "COUNT", 1, "NOACK",
          "STREAMS", inbox, ">")
        local e = okr and r and r[1][2][1]
        if not e then break end
        redis.call("XDEL", inbox, e[1])
        if e[1] ~= row then redis.call("ZREM", KEYS[1], worker .. " " .. e[1]) end
        local f = inbox_fields(e[2])
        rescue(worker, f)
        if e[1] == row then break end
      end
    end
  end
end
return out
