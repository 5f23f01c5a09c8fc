-- leave.lua: end a worker's hand-off registration on one queue and take back what was
-- handed to it but not read (a draining worker hands those back instead of running them).
--
-- KEYS[1]  waiting workers   PREFIX:{Q}:waiting
-- KEYS[2]  the worker's inbox PREFIX:{Q}:in:WORKER (deleted)
-- KEYS[3]  left marker       PREFIX:{Q}:left:WORKER: holds ARGV[4] for ARGV[5] ms, so a claim
--          of this process still in flight does not register it again
-- KEYS[4]  hand-offs in flight PREFIX:{Q}:handed: the unread rows' notes are removed
-- ARGV[1]  consumer group
-- ARGV[2]  consumer (worker id)
-- ARGV[3]  its registration member ("PAYLOADLIMIT WORKER")
-- ARGV[4]  the leaving process's tag
-- ARGV[5]  left marker lifetime ms (lua.LeftTTL)
--
-- returns the unread rows, each {band, entry, task id ("" for a "d" row), attempt}
redis.call("ZREM", KEYS[1], ARGV[3])
redis.call("SET", KEYS[3], ARGV[4], "PX", ARGV[5])
local out = {}
if redis.call("EXISTS", KEYS[2]) == 1 then
  local ok, rows = pcall(redis.call, "XREADGROUP", "GROUP", ARGV[1], ARGV[2], "STREAMS", KEYS[2], ">")
  if ok and rows then
    for _, e in ipairs(rows[1][2]) do
      local f = inbox_fields(e[2])
      local band = tonumber(f.b)
      redis.call("ZREM", KEYS[4], ARGV[2] .. " " .. e[1])
      if band and f.e then
        out[#out + 1] = {band, f.e, f.i or "", tonumber(f.a) or 0}
      end
    end
  end
  redis.call("DEL", KEYS[2])
end
return out
