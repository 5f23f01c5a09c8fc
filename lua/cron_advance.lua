-- cron_advance.lua: move a periodic entry on from the tick it just fired (or skipped),
-- only while the entry still waits for that tick: a compare-and-set, so that an
-- overlapping leader that fired the same tick, or a pause, resume, remove or re-add
-- that ran meanwhile, is not undone.
--
-- KEYS[1]  the queue's cron zset  PREFIX:{Q}:cron
-- ARGV[1]  entry name
-- ARGV[2]  the tick handled (ms): the entry's score as the caller read it
-- ARGV[3]  the next tick (ms), or "-" to take the entry out of the zset (its definition
--          is gone, paused or moved to another queue)
--
-- returns 1 moved on (or taken out), 0 the entry no longer waits for that tick
local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == "-" then
  redis.call("ZREM", KEYS[1], ARGV[1])
else
  redis.call("ZADD", KEYS[1], ARGV[3], ARGV[1])
end
return 1
