package main

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// The demo's Redis when no redis-server is on PATH: miniredis, an in-process Redis. Its
// Lua lacks the cmsgpack library that claim.lua keeps its receipts in (a claim's reply,
// replayed when a claim is resent after its reply was lost); the server given here
// provides one, written in Lua, to every script that names it. Nor does it know Redis
// 7's script flags (a first line "#!lua flags=…", which trim_dead.lua has): that line is
// made a comment. Real Redis runs the scripts as they are: nothing of this is on its path.

// msgpackShim defines a local cmsgpack with pack and unpack, as one line: put before a
// script, it shadows the global the script names and keeps its line numbers. Its
// encoding is its own (a receipt is only read back by the script that wrote it): a
// string is s<len>:<bytes>, a number n<%.17g>; (i, I, N for +inf, -inf, nan), a
// boolean t or f, nil z, a table T<pairs>: followed by each key and its value.
var msgpackShim = strings.Join(strings.Fields(`
local cmsgpack = (function()
  local fmt, sub, find, concat = string.format, string.sub, string.find, table.concat
  local enc
  enc = function(v, out)
    local t = type(v)
    if t == "string" then
      out[#out + 1] = "s" .. #v .. ":" .. v
    elseif t == "number" then
      if v ~= v then out[#out + 1] = "N"
      elseif v == math.huge then out[#out + 1] = "i"
      elseif v == -math.huge then out[#out + 1] = "I"
      else out[#out + 1] = "n" .. fmt("%.17g", v) .. ";" end
    elseif t == "boolean" then
      out[#out + 1] = v and "t" or "f"
    elseif t == "table" then
      local n = 0
      for _ in pairs(v) do n = n + 1 end
      out[#out + 1] = "T" .. n .. ":"
      for k, x in pairs(v) do enc(k, out) enc(x, out) end
    else
      out[#out + 1] = "z"
    end
  end
  local dec
  dec = function(s, i)
    local c = sub(s, i, i)
    if c == "s" then
      local j = find(s, ":", i, true)
      local n = tonumber(sub(s, i + 1, j - 1))
      return sub(s, j + 1, j + n), j + n + 1
    elseif c == "n" then
      local j = find(s, ";", i, true)
      return tonumber(sub(s, i + 1, j - 1)), j + 1
    elseif c == "N" then return 0 / 0, i + 1
    elseif c == "i" then return math.huge, i + 1
    elseif c == "I" then return -math.huge, i + 1
    elseif c == "t" then return true, i + 1
    elseif c == "f" then return false, i + 1
    elseif c == "T" then
      local j = find(s, ":", i, true)
      local n = tonumber(sub(s, i + 1, j - 1))
      local t = {}
      i = j + 1
      for _ = 1, n do
        local k, x
        k, i = dec(s, i)
        x, i = dec(s, i)
        t[k] = x
      end
      return t, i
    end
    return nil, i + 1
  end
  return {
    pack = function(v) local out = {} enc(v, out) return concat(out) end,
    unpack = function(s) return (dec(s, 1)) end,
  }
end)();
`), " ")

// shimMark starts every script the hook rewrote.
var shimMark = msgpackShim[:len("local cmsgpack = (function()")]

// startEmbedded starts miniredis on a free port of 127.0.0.1.
func startEmbedded() (*miniredis.Miniredis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	// TTLs (receipts, locks, heartbeats) run on the wall clock, as on Redis.
	m.ClockTTL(true)
	s := &scriptShim{srv: m.Server(), src: map[string]string{}}
	m.Server().SetPreHook(s.hook)
	return m, nil
}

// scriptShim rewrites the scripts that name cmsgpack or start with flags before
// miniredis runs them.
type scriptShim struct {
	srv *server.Server
	mu  sync.Mutex
	src map[string]string // SHA-1 of each script loaded or run that needs the shim → it
}

func needsShim(script string) bool {
	return hasFlags(script) || strings.Contains(script, "cmsgpack") && !strings.HasPrefix(script, shimMark)
}

// hasFlags reports whether script starts with a shebang, which is not Lua to miniredis.
func hasFlags(script string) bool { return strings.HasPrefix(script, "#!") }

// shimmed is script as miniredis runs it: the shebang a comment, the same line numbers,
// and the cmsgpack shim before it when it names cmsgpack.
func shimmed(script string) string {
	if hasFlags(script) {
		script = "--" + script
	}
	if strings.Contains(script, "cmsgpack") {
		script = msgpackShim + script
	}
	return script
}

// hook runs before every command; it returns true when it answered the command.
func (s *scriptShim) hook(c *server.Peer, cmd string, args ...string) bool {
	switch cmd {
	case "EVAL", "EVAL_RO":
		if len(args) == 0 || !needsShim(args[0]) {
			return false
		}
		s.remember(args[0])
		s.srv.Dispatch(c, append([]string{cmd, shimmed(args[0])}, args[1:]...))
		return true
	case "EVALSHA", "EVALSHA_RO":
		if len(args) == 0 {
			return false
		}
		s.mu.Lock()
		src, ok := s.src[strings.ToLower(args[0])]
		s.mu.Unlock()
		if !ok {
			return false // miniredis answers, NOSCRIPT when it does not know it either
		}
		eval := "EVAL"
		if cmd == "EVALSHA_RO" {
			eval = "EVAL_RO"
		}
		s.srv.Dispatch(c, append([]string{eval, shimmed(src)}, args[1:]...))
		return true
	case "SCRIPT":
		// miniredis loads the script as sent (it only parses it) and answers its SHA-1;
		// EVALSHA of that SHA-1 then runs it shimmed.
		if len(args) == 2 && strings.EqualFold(args[0], "LOAD") && needsShim(args[1]) {
			sha := s.remember(args[1])
			if hasFlags(args[1]) { // miniredis would not parse it: answer as Redis does
				c.WriteBulk(sha)
				return true
			}
		}
		if len(args) >= 1 && strings.EqualFold(args[0], "FLUSH") {
			s.mu.Lock()
			clear(s.src)
			s.mu.Unlock()
		}
	}
	return false
}

// remember keeps script under its SHA-1, which it returns.
func (s *scriptShim) remember(script string) string {
	sum := sha1.Sum([]byte(script))
	sha := hex.EncodeToString(sum[:])
	s.mu.Lock()
	s.src[sha] = script
	s.mu.Unlock()
	return sha
}
