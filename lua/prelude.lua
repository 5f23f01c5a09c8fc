-- prelude.lua: rules several scripts share, written once. Each script that needs them
-- is this file followed by its own body (lua/script.go joins them when the package is
-- built): Redis sees, caches and runs one script. Only local definitions go here, and
-- only cheap ones: every call of a script runs them anew.

-- is_current reports whether t, a task's HMGET of "status", "attempt", "entry" (first,
-- in that order), is the execution at attempt (a string) from stream entry eid: the
-- fence every write of an execution passes. A task reclaimed from a silent worker, or
-- finished, or requeued, is no longer that execution: its old holder writes nothing.
local function is_current(t, attempt, eid)
  return t[1] == "running" and t[2] == attempt and t[3] == eid
end

-- pack_spec packs a task's start facts that never change after its enqueue into its
-- record's "spec" field: "TIMEOUT_MS MAX_RETRIES CREATED_AT UNIQUE FUNCTION", UNIQUE 1
-- when the task was given a unique key (unique not ""), which it may hold still, 0 when
-- it never holds one; the function last, so that it may hold spaces (lua.parseSpec).
local function pack_spec(tmo, maxr, created, unique, fn)
  return tmo .. " " .. maxr .. " " .. created .. (unique ~= "" and " 1 " or " 0 ") .. fn
end

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

-- inbox_fields reads a row's field list into a table: f.e, f.b, f.i, …
local function inbox_fields(list)
  local f = {}
  for i = 1, #list, 2 do f[list[i]] = list[i + 1] end
  return f
end
