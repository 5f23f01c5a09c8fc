-- stale.lua: the observers' compare-and-emit of WORKER_STALE for one worker.
--
-- An observer's stale watcher judges every worker of PREFIX:workers in Go
-- (internal/liveness) and calls this with what it judged. The script publishes
-- WORKER_STALE only when the record is still the one judged and no observer published
-- for it yet, so any number of observer replicas publish one event per worker going
-- stale. The marker (KEYS[2]) says which outcome the observers settled and when:
-- "stale MS" (published at MS) or "stopped MS" (the record said stopped at MS). A marker
-- older than the record's last heartbeat belongs to an earlier life of the worker (it
-- heartbeated again since): it no longer counts, and a "live" call deletes it.
--
-- KEYS[1]  the worker's heartbeat hash  PREFIX:worker:ID
-- KEYS[2]  its marker                   PREFIX:stale:ID
-- KEYS[3]  the events stream            PREFIX:events
-- ARGV[1]  the judgement: "stale" (the record, heartbeat ARGV[3], is stale), "expired"
--          (no record), "stopped" (the record says stopped), "live"
-- ARGV[2]  the worker id
-- ARGV[3]  the record's last_heartbeat as read ("" for "expired")
-- ARGV[4]  now, ms
-- ARGV[5]  MAXLEN ~ of the events stream
-- ARGV[6]  the event's detail
-- ARGV[7]  the marker's lifetime, ms
--
-- returns 1 published; 0 nothing to publish; -1 the record is no longer the one judged
local judged, id, hb, now, maxlen, detail, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]

local mark = redis.call("GET", KEYS[2])
local markMS = mark and tonumber(string.match(mark, " (%d+)$"))

local function publish()
  redis.call("XADD", KEYS[3], "MAXLEN", "~", maxlen, "*", "type", "WORKER_STALE", "worker", id, "ts", now,
    "detail", detail)
  redis.call("SET", KEYS[2], "stale " .. now, "PX", ttl)
  return 1
end

if judged == "expired" then
  if redis.call("EXISTS", KEYS[1]) == 1 then return -1 end
  if mark then
    -- settled already (published, or seen stopped): keep the marker while the id lasts
    redis.call("PEXPIRE", KEYS[2], ttl)
    return 0
  end
  return publish()
end

local rec = redis.call("HMGET", KEYS[1], "last_heartbeat", "status")
if rec[1] ~= hb then return -1 end
-- the marker of an earlier life: the worker heartbeated after it was set
local earlier = mark and (markMS == nil or tonumber(hb) == nil or tonumber(hb) > markMS)

if judged == "live" then
  if earlier then redis.call("DEL", KEYS[2]) end
  return 0
end
if rec[2] == "stopped" then
  -- a clean stop is never stale: remember it for when the record expires
  if not mark or earlier then redis.call("SET", KEYS[2], "stopped " .. now, "PX", ttl) end
  return 0
end
if judged == "stopped" then return -1 end
if mark and not earlier then return 0 end
return publish()
