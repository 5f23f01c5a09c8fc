-- sched_enqueue.lua: put claimed tasks on their priority stream, idempotently.
--
-- For each claimed task: XADD first, then ZREM from the claimed set. A task that is
-- already queued (an earlier pass XADDed it and died before its ZREM, or two leaders
-- overlapped on a stale claim) is dropped from the claimed set without a second XADD;
-- a cancelled or vanished task is dropped too.
--
-- KEYS[1]       claimed zset   PREFIX:{Q}:claimed
-- KEYS[2..11]   streams p0..p9
-- KEYS[12]      retrying zset  PREFIX:{Q}:retrying (a retry queued leaves it)
-- KEYS[13..]    task hashes, one per ARGV id
-- ARGV[1]  consumer group
-- ARGV[2]  now ms
-- ARGV[3..] task ids
--
-- returns {enqueued ids, dropped ids}
local group, now = ARGV[1], tonumber(ARGV[2])
local enq, dropped = {}, {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local h = KEYS[10 + i]
  local t = redis.call("HMGET", h, "status", "priority", "attempt")
  if t[1] == "scheduled" or t[1] == "retrying" then
    local p = tonumber(t[2]) or 0
    if p < 0 or p > 9 or p ~= math.floor(p) then p = 0 end
    local stream = KEYS[2 + p]
    if redis.call("EXISTS", stream) == 0 then
      redis.call("XGROUP", "CREATE", stream, group, "0", "MKSTREAM")
    end
    local xid = redis.call("XADD", stream, "*", "task", id, "attempt", tonumber(t[3]) or 0)
    redis.call("HSET", h, "status", "queued", "entry", xid, "queued_at", now)
    if t[1] == "retrying" then redis.pcall("ZREM", KEYS[12], id) end
    enq[#enq + 1] = id
  else
    dropped[#dropped + 1] = id
  end
  redis.call("ZREM", KEYS[1], id)
end
return {enq, dropped}
