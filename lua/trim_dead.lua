#!lua flags=allow-oom
-- trim_dead.lua: delete the oldest dead tasks of one queue beyond the retention bounds.
--
-- A dead task is kept while it is among the newest MAX of its queue and died less than
-- TTL ago. The ones beyond either bound go, oldest first, at most LIMIT a call: each
-- one's member of the dead zset, its record (when it is still a dead task's: a member
-- whose task lives again, or whose key is not a hash, loses its member only) and its
-- unique key when the key still names it. Invalid-entry records ("invalid-<entry id>")
-- are dead records like any other.
--
-- allow-oom (the shebang, Redis 7): at maxmemory Redis refuses every script that may
-- write, and this one is what frees memory; it adds nothing but a counter.
--
-- The count of members removed is added to the queue's stats hash, field dead_trimmed,
-- before anything is deleted: a stats key of another type fails the call with nothing
-- changed.
--
-- KEYS[1]  dead zset          PREFIX:{Q}:dead
-- KEYS[2]  task key prefix    PREFIX:{Q}:t:   (+ task id: the task hash)
-- KEYS[3]  unique key prefix  PREFIX:{Q}:u:   (+ unique key: holds the task id)
-- KEYS[4]  stats hash         PREFIX:{Q}:stats
-- The task and unique keys are named by what the call reads, so they cannot come in
-- through KEYS; they carry the same {Q} hash tag, so they are in the same slot.
-- ARGV[1]  now ms
-- ARGV[2]  MAX: dead tasks kept at most (0: no count bound)
-- ARGV[3]  TTL ms: dead tasks older than this go (0: no age bound)
-- ARGV[4]  LIMIT: most dead tasks deleted by this call
--
-- returns {trimmed, kept, more}: dead tasks deleted, dead tasks left, and 1 when some
-- left are still beyond a bound (LIMIT stopped the call), 0 otherwise
local now, max, ttl, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local total = redis.call("ZCARD", KEYS[1])
local over = 0
if max > 0 and total > max then over = total - max end
if ttl > 0 then
  -- the dead zset is scored by the ms the task died: a prefix of it is past the TTL
  local aged = redis.call("ZCOUNT", KEYS[1], "-inf", string.format("%d", now - ttl))
  if aged > over then over = aged end
end
local take = over
if take > limit then take = limit end
if take <= 0 then return {0, total, 0} end

local ids = redis.call("ZRANGE", KEYS[1], 0, take - 1)
redis.call("HINCRBY", KEYS[4], "dead_trimmed", #ids)
for _, id in ipairs(ids) do
  local h = KEYS[2] .. id
  -- pcall: a key of another type under a task's name is not dtq's to delete
  local ok, t = pcall(redis.call, "HMGET", h, "status", "unique")
  if ok and t[1] == "dead" then
    local u = t[2]
    if u and u ~= "" then
      local uk = KEYS[3] .. u
      local gok, holder = pcall(redis.call, "GET", uk)
      if gok and holder == id then redis.call("DEL", uk) end
    end
    redis.call("DEL", h)
  end
end
redis.call("ZREM", KEYS[1], unpack(ids))
local more = 0
if over > #ids then more = 1 end
return {#ids, total - #ids, more}
