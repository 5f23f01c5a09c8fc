package main

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// servers runs fn against redis-server and against the demo's embedded Redis: every
// expectation of fn holds on both.
func servers(t *testing.T, fn func(t *testing.T, rdb *redis.Client, prefix string)) {
	serversOn(t, func(t *testing.T) *redistest.Server { return redistest.Shared(t) }, fn)
}

// ownServers is servers with a redis-server of the test's own, for a test that flushes
// what every client of a server shares (its script cache): on the shared one, a SCRIPT
// FLUSH lands between another parallel test's SCRIPT LOAD and its EVALSHA.
func ownServers(t *testing.T, fn func(t *testing.T, rdb *redis.Client, prefix string)) {
	serversOn(t, func(t *testing.T) *redistest.Server { return redistest.Start(t, redistest.Options{}) }, fn)
}

func serversOn(t *testing.T, srv func(t *testing.T) *redistest.Server, fn func(t *testing.T, rdb *redis.Client, prefix string)) {
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		fn(t, srv(t).Client(t), redistest.Prefix(t))
	})
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		m, err := startEmbedded()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		fn(t, rdb, "dtq")
	})
}

// The shim's cmsgpack gives back what it was given: binary strings (with the bytes its
// encoding uses as separators), integers, fractions, infinities, booleans, nested
// tables with holes and string keys.
func TestEmbeddedMsgpackRoundTrip(t *testing.T) {
	t.Parallel()
	const script = `
local bin = {}
for i = 0, 255 do bin[#bin + 1] = string.char(i) end
bin = table.concat(bin)
local v = {bin, "", "s3:abc", "n1;", 0, -1, 42, 2^53, 0.1, -2.5e-300, 1e300, math.huge, -math.huge,
  true, false, {}, {1, {2, {3, "x"}}}, {a = "b", [7] = "seven", [2.5] = "half"}}
local function eq(x, y)
  if type(x) ~= type(y) then return false end
  if type(x) ~= "table" then return x == y end
  for k, a in pairs(x) do if not eq(a, y[k]) then return false end end
  for k in pairs(y) do if x[k] == nil then return false end end
  return true
end
local packed = cmsgpack.pack(v)
local back = cmsgpack.unpack(packed)
local nan = cmsgpack.unpack(cmsgpack.pack(0 / 0))
return {eq(v, back) and 1 or 0, nan ~= nan and 1 or 0, back[1], back[3], back[17][2][2][2]}`
	servers(t, func(t *testing.T, rdb *redis.Client, _ string) {
		ctx := context.Background()
		// EVAL, then EVALSHA of the script SCRIPT LOAD loaded: both run it shimmed.
		got, err := rdb.Eval(ctx, script, nil).Slice()
		if err != nil {
			t.Fatalf("EVAL: %v", err)
		}
		sha, err := rdb.ScriptLoad(ctx, script).Result()
		if err != nil {
			t.Fatal(err)
		}
		again, err := rdb.EvalSha(ctx, sha, nil).Slice()
		if err != nil {
			t.Fatalf("EVALSHA: %v", err)
		}
		bin := make([]byte, 256)
		for i := range bin {
			bin[i] = byte(i)
		}
		want := []any{int64(1), int64(1), string(bin), "s3:abc", "x"}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(again, want) {
			t.Fatalf("round trip: EVAL %q, EVALSHA %q; want %q", got, again, want)
		}
	})
}

// The shim leaves alone what does not name cmsgpack, and what miniredis does not know
// stays unknown: EVALSHA of a script never loaded is NOSCRIPT, as on Redis, and so is
// one loaded before SCRIPT FLUSH.
func TestEmbeddedScriptCache(t *testing.T) {
	t.Parallel()
	ownServers(t, func(t *testing.T, rdb *redis.Client, _ string) {
		ctx := context.Background()
		if v, err := rdb.Eval(ctx, "return ARGV[1] .. KEYS[1]", []string{"k"}, "a").Text(); err != nil || v != "ak" {
			t.Fatalf("plain EVAL: %q, %v", v, err)
		}
		if err := rdb.EvalSha(ctx, "0123456789012345678901234567890123456789", nil).Err(); !lua.IsNoScript(err) {
			t.Fatalf("EVALSHA of an unknown script: %v, want NOSCRIPT", err)
		}
		src := "return cmsgpack.unpack(cmsgpack.pack('v'))"
		sha, err := rdb.ScriptLoad(ctx, src).Result()
		if err != nil {
			t.Fatal(err)
		}
		if v, err := rdb.EvalSha(ctx, sha, nil).Text(); err != nil || v != "v" {
			t.Fatalf("EVALSHA: %q, %v", v, err)
		}
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.EvalSha(ctx, sha, nil).Err(); !lua.IsNoScript(err) {
			t.Fatalf("EVALSHA after SCRIPT FLUSH: %v, want NOSCRIPT", err)
		}
		// A script error keeps the script's own line numbers.
		err = rdb.Eval(ctx, "local x = cmsgpack.pack(1)\nerror('here')", nil).Err()
		if err == nil || !strings.Contains(err.Error(), ":2:") {
			t.Fatalf("error of line 2: %v", err)
		}
	})
}

// A script with Redis 7's flags (a shebang) runs by EVAL and by EVALSHA of what SCRIPT
// LOAD loaded, with its own line numbers.
func TestEmbeddedRunsFlaggedScripts(t *testing.T) {
	t.Parallel()
	const script = "#!lua flags=allow-oom\nreturn cmsgpack.unpack(cmsgpack.pack(ARGV[1]))"
	servers(t, func(t *testing.T, rdb *redis.Client, _ string) {
		ctx := context.Background()
		if v, err := rdb.Eval(ctx, script, nil, "x").Text(); err != nil || v != "x" {
			t.Fatalf("EVAL: %q, %v", v, err)
		}
		sha, err := rdb.ScriptLoad(ctx, script).Result()
		if err != nil || sha != redis.NewScript(script).Hash() {
			t.Fatalf("SCRIPT LOAD: %q, %v; want the script's SHA-1", sha, err)
		}
		if v, err := rdb.EvalSha(ctx, sha, nil, "y").Text(); err != nil || v != "y" {
			t.Fatalf("EVALSHA: %q, %v", v, err)
		}
		err = rdb.Eval(ctx, "#!lua flags=allow-oom\nerror('here')", nil).Err()
		if err == nil || !strings.Contains(err.Error(), ":2:") {
			t.Fatalf("error of line 2: %v", err)
		}
	})
}

// Every script a worker, the scheduler and the CLI run, through their lua wrappers, on
// the path the demo takes them: enqueue (a hand-off too), claim and the replay of its
// receipt, touch, complete (retry, dead), the scheduler's claim and enqueue, reclaim
// from a silent worker, requeue, cancel, rescue of an unread hand-off, leave, the
// scheduler lock, the retention's trim of dead tasks.
func TestEmbeddedRunsEveryScript(t *testing.T) {
	t.Parallel()
	servers(t, func(t *testing.T, rdb *redis.Client, prefix string) {
		ctx := context.Background()
		if err := lua.Load(ctx, rdb); err != nil {
			t.Fatal(err)
		}
		q := keys.New(prefix).Queue("q")
		now := time.Now().UnixMilli()
		payload := make([]byte, 1000)
		for i := range payload {
			payload[i] = byte(i)
		}
		enqueue := func(nt lua.NewTask) (string, bool, error) {
			rs, err := lua.Enqueue.Run(ctx, rdb, lua.EnqueueArgs{Queue: q, NowMS: now, Tasks: []lua.NewTask{nt}})
			if err != nil {
				return "", false, err
			}
			return rs[0].ID, rs[0].Created, rs[0].Err
		}
		a, created, err := enqueue(lua.NewTask{ID: "a", Function: "f", Payload: payload, Priority: 3,
			MaxRetries: 5, RunAtMS: now, Unique: "ua"})
		if err != nil || !created || a != "a" {
			t.Fatalf("enqueue: %q %v %v", a, created, err)
		}
		if _, created, _ := enqueue(lua.NewTask{ID: "a2", Function: "f", RunAtMS: now, Unique: "ua"}); created {
			t.Fatal("a second task with a taken unique key was created")
		}

		claim := func(consumer, call, prev string, reclaim bool) lua.ClaimResult {
			t.Helper()
			r, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: consumer, NowMS: now, Reclaim: reclaim, Want: 10,
				MaxPayload: 1 << 20, Call: call, Previous: prev, Tag: consumer})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		first := claim("w1", "c1", "", false)
		if len(first.Started) != 1 || first.Started[0].ID != "a" || first.Started[0].Attempt != 1 || first.Started[0].Payload != string(payload) {
			t.Fatalf("claim: %+v", first)
		}
		// The same call resent (its reply lost): the receipt gives the same reply.
		if replay := claim("w1", "c1", "", false); !reflect.DeepEqual(replay.Started, first.Started) {
			t.Fatalf("replay of the claim: %+v, want %+v", replay.Started, first.Started)
		}
		held := first.Started[0].Held()
		if ok, err := lua.Touch.Run(ctx, rdb, lua.TouchArgs{Queue: q, Consumer: "w1", IdleMS: 0, Handback: false, Items: []lua.Held{held}}); err != nil || !ok[0].Held() {
			t.Fatalf("touch: %v %v", ok, err)
		}
		// A retry goes to the schedule, the scheduler puts it back on its stream.
		if ok, err := lua.Complete.Run(ctx, rdb, lua.CompleteArgs{Queue: q, NowMS: now, KeepMS: 60000, Items: []lua.Completion{{ID: "a", Entry: held.Entry, Band: 3,
			Attempt: 1, Outcome: lua.Retry, Text: "boom", RetryMS: now}}}); err != nil || ok[0] != lua.CompleteApplied {
			t.Fatalf("complete (retry): %v %v", ok, err)
		}
		sc, err := lua.SchedClaim.Run(ctx, rdb, lua.SchedClaimArgs{Queue: q, NowMS: now, Limit: 10, StaleMS: now - 60000})
		due := sc.Due
		if err != nil || !slices.Equal(due, []string{"a"}) {
			t.Fatalf("scheduler claim: %v %v", due, err)
		}
		if se, err := lua.SchedEnqueue.Run(ctx, rdb, lua.SchedEnqueueArgs{Queue: q, NowMS: now, IDs: due}); err != nil || !slices.Equal(se.Enqueued, []string{"a"}) {
			t.Fatalf("scheduler enqueue: %v %v", se, err)
		}
		second := claim("w1", "c2", "c1", false)
		if len(second.Started) != 1 || second.Started[0].Attempt != 2 {
			t.Fatalf("claim of the retry: %+v", second)
		}
		// w1 goes silent: w2 reclaims the entry (idle 0 suffices), w1's touch is fenced.
		third := claim("w2", "c3", "", true)
		if len(third.Started) != 1 || !third.Started[0].Reclaimed || third.Started[0].Attempt != 3 {
			t.Fatalf("reclaim: %+v", third)
		}
		if ok, err := lua.Touch.Run(ctx, rdb, lua.TouchArgs{Queue: q, Consumer: "w1", IdleMS: 0, Handback: false, Items: []lua.Held{second.Started[0].Held()}}); err != nil || ok[0].Held() {
			t.Fatalf("touch of a reclaimed task: %v %v, want fenced", ok, err)
		}
		if ok, err := lua.Complete.Run(ctx, rdb, lua.CompleteArgs{Queue: q, NowMS: now, KeepMS: 60000, Items: []lua.Completion{{ID: "a", Entry: third.Started[0].Entry, Band: 3,
			Attempt: 3, Outcome: lua.Dead, Text: "gave up"}}}); err != nil || ok[0] != lua.CompleteApplied {
			t.Fatalf("complete (dead): %v %v", ok, err)
		}
		if st := rdb.HGet(ctx, q.Task("a"), "status").Val(); st != "dead" {
			t.Fatalf("status %q, want dead", st)
		}
		if _, err := lua.Requeue.Run(ctx, rdb, lua.RequeueArgs{Queue: q, ID: "a", NowMS: now}); err != nil {
			t.Fatalf("requeue: %v", err)
		}
		if _, err := lua.Cancel.Run(ctx, rdb, lua.CancelArgs{Queue: q, ID: "a", Unique: "ua", NowMS: now, KeepMS: 60000}); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		if _, err := lua.Cancel.Run(ctx, rdb, lua.CancelArgs{Queue: q, ID: "a", Unique: "ua", NowMS: now, KeepMS: 60000}); err == nil {
			t.Fatal("cancel of a cancelled task succeeded")
		}

		// A worker that found nothing registers; the next enqueue hands it the task; it
		// never reads it: the rescue puts it back, and another worker runs it.
		if r := claim("w3", "c4", "", false); len(r.Started) != 0 {
			t.Fatalf("claim of an empty queue: %+v", r)
		}
		if _, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: "w3", NowMS: now, Want: 1, MaxPayload: 1 << 20,
			RegisterUntilMS: now + 60000, Tag: "w3"}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := enqueue(lua.NewTask{ID: "b", Function: "f", Priority: 1, RunAtMS: now}); err != nil {
			t.Fatal(err)
		}
		if st := rdb.HGet(ctx, q.Task("b"), "worker").Val(); st != "w3" {
			t.Fatalf("task b's worker %q, want w3 (a hand-off)", st)
		}
		if ids, err := lua.Rescue.Run(ctx, rdb, lua.RescueArgs{Queue: q, NowMS: now, CutoffMS: now + 1, Limit: 10}); err != nil || !slices.Equal(ids, []string{"b"}) {
			t.Fatalf("rescue: %v %v", ids, err)
		}
		if r := claim("w4", "c5", "", false); len(r.Started) != 1 || r.Started[0].ID != "b" {
			t.Fatalf("claim of the rescued task: %+v", r)
		}
		if left, err := lua.Leave.Run(ctx, rdb, lua.LeaveArgs{Queue: q, Consumer: "w3", Tag: "w3", MaxPayload: 1 << 20}); err != nil || len(left) != 0 {
			t.Fatalf("leave: %v %v", left, err)
		}

		// The retention deletes a dead task and frees its unique key.
		if _, _, err := enqueue(lua.NewTask{ID: "c", Function: "f", RunAtMS: now, Unique: "uc"}); err != nil {
			t.Fatal(err)
		}
		c := claim("w4", "c6", "c5", false)
		if len(c.Started) != 1 || c.Started[0].ID != "c" {
			t.Fatalf("claim of c: %+v", c)
		}
		if ok, err := lua.Complete.Run(ctx, rdb, lua.CompleteArgs{Queue: q, NowMS: now, KeepMS: 60000, Items: []lua.Completion{{ID: "c", Entry: c.Started[0].Entry,
			Attempt: c.Started[0].Attempt, Outcome: lua.Dead, Text: "gave up"}}}); err != nil || ok[0] != lua.CompleteApplied {
			t.Fatalf("complete c (dead): %v %v", ok, err)
		}
		if r, err := lua.TrimDead.Run(ctx, rdb, lua.TrimDeadArgs{Queue: q, NowMS: now + 1, TTLMS: 1, Limit: 10}); err != nil || r.Trimmed != 1 {
			t.Fatalf("trim dead: %+v %v", r, err)
		}
		if n := rdb.Exists(ctx, q.Task("c"), q.Unique("uc")).Val(); n != 0 || rdb.HGet(ctx, q.Stats(), keys.StatDeadTrimmed).Val() != "1" {
			t.Fatalf("after the trim: %d of c's keys left, stats %v", n, rdb.HGetAll(ctx, q.Stats()).Val())
		}

		// The scheduler lock.
		lock := prefix + ":lock:test"
		if err := rdb.Set(ctx, lock, "tok", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if ok, err := lua.LockRenew.Run(ctx, rdb, lua.LockArgs{Lock: lock, Token: "other", TTLMS: 60000}); err != nil || ok {
			t.Fatalf("renew by another token: %v %v", ok, err)
		}
		if ok, err := lua.LockRenew.Run(ctx, rdb, lua.LockArgs{Lock: lock, Token: "tok", TTLMS: 60000}); err != nil || !ok {
			t.Fatalf("renew: %v %v", ok, err)
		}
		if ok, err := lua.LockRelease.Run(ctx, rdb, lua.LockArgs{Lock: lock, Token: "tok"}); err != nil || !ok {
			t.Fatalf("release: %v %v", ok, err)
		}
	})
}
