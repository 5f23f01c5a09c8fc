-- touch.lua: reset the PEL idle clock of in-flight entries this worker still owns, fenced.
--
-- The heartbeat calls it with idle 0 so a live worker's long tasks are not reclaimed.
-- Drain calls it at the deadline with idle = the visibility timeout and handback 1, so
-- a peer's next XAUTOCLAIM takes the cancelled entries at once (still not ACKed), and
-- the reclaim is not counted against the task's retries.
-- Only executions still current (task running, same attempt, same entry) are touched:
-- a worker that lost its task to a reclaimer never takes the entry back.
--
-- KEYS[2i+1], KEYS[2i+2] for item i (0-based): task hash, stream of the entry
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (worker id)
-- ARGV[3]  idle ms to set
-- ARGV[4]  "1": hand back (mark the attempt as handed back)
-- ARGV[5]  n items
-- ARGV[6+2i], ARGV[7+2i] for item i: entry id, attempt
--
-- A running task whose cancel was requested (field "cancel", cancel.lua) is touched and
-- answered 2: the worker cancels its function's context. The request rides on the
-- heartbeat's round trip, so an idle fleet pays nothing for it.
--
-- returns a list of n integers: 1 touched, 2 touched and its cancel requested, 0 no
-- longer this worker's
local group, consumer, idle, handback = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == "1"
local n = tonumber(ARGV[5])
local out = {}
for i = 0, n - 1 do
  local h, stream = KEYS[2 * i + 1], KEYS[2 * i + 2]
  local eid, attempt = ARGV[6 + 2 * i], ARGV[7 + 2 * i]
  -- pcall: a task key clobbered with another type is simply no longer this execution's
  local ok, t = pcall(redis.call, "HMGET", h, "status", "attempt", "entry", "cancel")
  if ok and is_current(t, attempt, eid) then
    redis.call("XCLAIM", stream, group, consumer, 0, eid, "IDLE", idle, "JUSTID")
    if handback then redis.call("HSET", h, "handback", attempt) end
    if t[4] then out[#out + 1] = 2 else out[#out + 1] = 1 end
  else
    out[#out + 1] = 0
  end
end
return out
