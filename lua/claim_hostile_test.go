package lua_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// Hostile input at the scripts: stream entries and task records written by someone else.
// Whatever is in Redis, a claim answers (no script error), accounts for every entry it
// took exactly once (started, absorbed, or a dead record that keeps the raw data), and
// leaves nothing pending that no worker runs.

func (f *fixture) xadd(t *testing.T, band int, vals ...any) string {
	t.Helper()
	id, err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.q.Stream(band), Values: vals}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (f *fixture) claimErr(t *testing.T, a lua.ClaimArgs) (lua.ClaimResult, error) {
	t.Helper()
	if a.NowMS == 0 {
		a.NowMS = f.now
	}
	if a.MaxPayload == 0 {
		a.MaxPayload = 1 << 20
	}
	a.Queue = f.q
	return lua.Claim.Run(f.ctx, f.rdb, a)
}

// A task key that is not a hash (a string, a list) must not abort the claim: its
// neighbours in the same batch start, and the entry becomes a dead record.
func TestClaimTaskKeyOfWrongType(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "before", Priority: 2})
	if err := f.rdb.Set(f.ctx, f.q.Task("str"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.RPush(f.ctx, f.q.Task("list"), "a").Err(); err != nil {
		t.Fatal(err)
	}
	f.xadd(t, 2, "task", "str", "attempt", 0)
	f.xadd(t, 2, "task", "list", "attempt", 0)
	f.enqueue(t, lua.NewTask{ID: "after", Priority: 2})

	r, err := f.claimErr(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if err != nil {
		t.Fatalf("claim failed on a task key of the wrong type: %v", err)
	}
	if len(r.Started) != 2 || r.Started[0].ID != "before" || r.Started[1].ID != "after" {
		t.Fatalf("started = %+v, want before and after", r.Started)
	}
	if len(r.Invalid) != 2 {
		t.Fatalf("invalid = %+v, want the two entries naming non-hash keys", r.Invalid)
	}
	for _, in := range r.Invalid {
		if !strings.Contains(in.Reason, "not a hash") {
			t.Errorf("reason %q does not say what is wrong", in.Reason)
		}
		if raw := f.field(t, in.DeadID, "raw"); !strings.Contains(raw, `"task":"`) {
			t.Errorf("dead record %s raw = %q, want the entry's fields", in.DeadID, raw)
		}
	}
	if p := f.pending(t, 2); p != 2 {
		t.Fatalf("pending = %d, want 2 (only the started tasks)", p)
	}
	// The offending keys are left as they were.
	if v := f.rdb.Get(f.ctx, f.q.Task("str")).Val(); v != "not a hash" {
		t.Fatalf("string key changed to %q", v)
	}
	// The reaper path is not wedged either: idle everything and reclaim.
	idleAll(t, f, 2, "w", 60_000)
	r, err = f.claimErr(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 10, MinIdleMS: 30_000})
	if err != nil || len(r.Started) != 2 {
		t.Fatalf("reclaim = %+v, %v; want both tasks reclaimed", r, err)
	}
}

// Attempts in entries that are not small counts are malformed entries, including ones
// too big for the attempt to survive the trip through Lua numbers (1e17 would come back
// as "1e+17", which no fence would ever match again).
func TestClaimEntryAttemptOutOfRange(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "x"})
	bad := []string{"100000000000000000", "1e20", "-1", "2.5", "inf", "nan", "", " ", "0x", "9007199254740993"}
	for _, a := range bad {
		f.xadd(t, 0, "task", "x", "attempt", a)
	}
	r, err := f.claimErr(t, lua.ClaimArgs{Consumer: "w", Want: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Started) != 1 || r.Started[0].Attempt != 1 {
		t.Fatalf("started = %+v, want the task once at attempt 1 (from its own entry)", r.Started)
	}
	if len(r.Invalid) != len(bad) {
		t.Fatalf("invalid = %d (%+v), want %d", len(r.Invalid), r.Invalid, len(bad))
	}
	if a := f.field(t, "x", "attempt"); a != "1" {
		t.Fatalf("task attempt = %q, want 1", a)
	}
}

// Corrupt control fields of a task record (status, attempt) cannot be guessed: the task
// may or may not have run. The claim kills it with an error that quotes the bad value,
// the rest of the record stays as it was, and the worker goes on. Descriptive fields
// that do not parse read as their defaults and the task runs.
func TestClaimCorruptTaskRecord(t *testing.T) {
	t.Parallel()
	f := setup(t)
	type tc struct {
		id      string
		fields  []any
		started bool
		errHas  string
	}
	cases := []tc{
		{"status-garbage", []any{"status", "zzz"}, false, `status "zzz"`},
		{"status-empty", []any{"status", ""}, false, `status ""`},
		{"attempt-word", []any{"attempt", "abc"}, false, `attempt "abc"`},
		{"attempt-fraction", []any{"attempt", "2.5"}, false, `attempt "2.5"`},
		{"attempt-huge", []any{"attempt", "1e30"}, false, `attempt "1e30"`},
		{"attempt-negative", []any{"attempt", "-3"}, false, `attempt "-3"`},
		{"priority-99", []any{"priority", "99"}, true, ""},
		{"priority-word", []any{"priority", "high"}, true, ""},
		{"failures-word", []any{"failures", "many"}, true, ""},
		{"max-retries-word", []any{"max_retries", "lots"}, true, ""},
		{"timeout-word", []any{"timeout_ms", "soon"}, true, ""},
		{"created-word", []any{"created_at", "yesterday"}, true, ""},
		{"no-function", []any{"function", ""}, true, ""},
	}
	for _, c := range cases {
		f.enqueue(t, lua.NewTask{ID: c.id, Payload: []byte("p-" + c.id)})
		if err := f.rdb.HSet(f.ctx, f.q.Task(c.id), c.fields...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := f.claimErr(t, lua.ClaimArgs{Consumer: "w", Want: 100})
	if err != nil {
		t.Fatal(err)
	}
	started := map[string]lua.Started{}
	for _, s := range r.Started {
		started[s.ID] = s
	}
	invalid := map[string]lua.Invalid{}
	for _, in := range r.Invalid {
		invalid[in.DeadID] = in
	}
	for _, c := range cases {
		s, ok := started[c.id]
		if ok != c.started {
			t.Errorf("%s: started = %v, want %v", c.id, ok, c.started)
			continue
		}
		if ok {
			if s.Attempt != 1 || s.Payload != "p-"+c.id {
				t.Errorf("%s: started %+v, want attempt 1 with its payload", c.id, s)
			}
			continue
		}
		in, ok := invalid[c.id]
		if !ok {
			t.Errorf("%s: neither started nor reported as a dead record: %+v", c.id, r)
			continue
		}
		if !strings.Contains(in.Reason, c.errHas) || !strings.Contains(in.Reason, "corrupt task record") {
			t.Errorf("%s: reason %q, want it to quote %s", c.id, in.Reason, c.errHas)
		}
		if st, e := f.field(t, c.id, "status"), f.field(t, c.id, "error"); st != "dead" || e != in.Reason {
			t.Errorf("%s: status %q error %q, want dead with the reason", c.id, st, e)
		}
		if p := f.field(t, c.id, "payload"); p != "p-"+c.id {
			t.Errorf("%s: payload %q, want the record kept", c.id, p)
		}
		if sc, err := f.rdb.ZScore(f.ctx, f.q.Dead(), c.id).Result(); err != nil || sc == 0 {
			t.Errorf("%s: not in the dead set (%v)", c.id, err)
		}
	}
	if p := f.pending(t, 0); p != int64(len(r.Started)) {
		t.Fatalf("pending = %d, want %d (only started tasks)", p, len(r.Started))
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(0)).Val(); n != int64(len(r.Started)) {
		t.Fatalf("xlen = %d, want %d", n, len(r.Started))
	}
	// A corrupt record on the reclaim path is handled the same way.
	f.rdb.HSet(f.ctx, f.q.Task("priority-99"), "status", "exploded")
	idleAll(t, f, 0, "w", 60_000)
	r, err = f.claimErr(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 100, MinIdleMS: 30_000})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Invalid) != 1 || r.Invalid[0].DeadID != "priority-99" {
		t.Fatalf("reclaim of a corrupt record = %+v, want it dead", r)
	}
}

// complete.lua and touch.lua meet a task key replaced by another type under a running
// execution: they answer "not yours" instead of failing the whole call, so a worker's
// completer and heartbeat are not wedged by one key.
func TestCompleteAndTouchOnWrongTypeKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "ok"})
	f.enqueue(t, lua.NewTask{ID: "gone"})
	c := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2}).Started
	if len(c) != 2 {
		t.Fatalf("started %d", len(c))
	}
	f.rdb.Del(f.ctx, f.q.Task("gone"))
	f.rdb.Set(f.ctx, f.q.Task("gone"), "clobbered", 0)
	var held []lua.Held
	var done []lua.Completion
	for _, s := range c {
		held = append(held, lua.Held{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt})
		done = append(done, lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Outcome: lua.Succeeded})
	}
	touched, err := lua.Touch.Run(f.ctx, f.rdb, lua.TouchArgs{Queue: f.q, Consumer: "w", IdleMS: 0, Handback: false, Items: held})
	if err != nil {
		t.Fatalf("touch failed on a clobbered key: %v", err)
	}
	applied, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: done})
	if err != nil {
		t.Fatalf("complete failed on a clobbered key: %v", err)
	}
	want := map[string]bool{"ok": true, "gone": false}
	for i, s := range c {
		if touched[i].Held() != want[s.ID] || (applied[i] == lua.CompleteApplied) != want[s.ID] {
			t.Errorf("%s: touched %v applied %v, want %v", s.ID, touched[i], applied[i], want[s.ID])
		}
	}
	// The clobbered task's entry stays pending; a reclaim turns it into a dead record.
	idleAll(t, f, 0, "w", 60_000)
	r, err := f.claimErr(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 10, MinIdleMS: 30_000})
	if err != nil || len(r.Invalid) != 1 || len(r.Started) != 0 {
		t.Fatalf("reclaim = %+v, %v; want the clobbered entry dead", r, err)
	}
	if p := f.pending(t, 0); p != 0 {
		t.Fatalf("pending = %d, want 0", p)
	}
}

// A band whose stream is broken under running executions (turned into another type,
// deleted, its group destroyed) costs nothing to the outcomes that share a completion
// call with it: every execution whose record says it is current is recorded, on the
// short path (plain successes under the claims' epoch) and on the long one, whichever
// band comes first in the call; the healthy band's entry is acked and gone.
func TestCompleteRecordsBesideABrokenBand(t *testing.T) {
	t.Parallel()
	breaks := map[string]func(f *fixture, stream string) error{
		"string":  func(f *fixture, s string) error { return f.rdb.Set(f.ctx, s, "clobbered", 0).Err() },
		"deleted": func(f *fixture, s string) error { return f.rdb.Del(f.ctx, s).Err() },
		"no group": func(f *fixture, s string) error {
			return f.rdb.XGroupDestroy(f.ctx, s, keys.Group).Err()
		},
	}
	for name, breakBand := range breaks {
		for _, long := range []bool{false, true} {
			for _, brokenFirst := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/long=%v/first=%v", name, long, brokenFirst), func(t *testing.T) {
					t.Parallel()
					f := setup(t)
					f.enqueue(t, lua.NewTask{ID: "broken", Priority: 2})
					f.enqueue(t, lua.NewTask{ID: "healthy", Priority: 3})
					r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2})
					if len(r.Started) != 2 {
						t.Fatalf("started %+v", r.Started)
					}
					items := map[string]lua.Completion{}
					for _, s := range r.Started {
						c := lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Outcome: lua.Succeeded, Epoch: s.Epoch}
						if long {
							c.Text = "result"
						}
						items[s.ID] = c
					}
					if err := breakBand(f, f.q.Stream(items["broken"].Band)); err != nil {
						t.Fatal(err)
					}
					call := []lua.Completion{items["broken"], items["healthy"]}
					if !brokenFirst {
						call[0], call[1] = call[1], call[0]
					}
					codes, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, Items: call, Consumer: "w"})
					if err != nil {
						t.Fatalf("complete beside a broken band: %v", err)
					}
					if !slices.Equal(codes, []lua.CompleteCode{lua.CompleteApplied, lua.CompleteApplied}) {
						t.Fatalf("codes %v, want both applied", codes)
					}
					for _, id := range []string{"broken", "healthy"} {
						if st := f.field(t, id, "status"); st != "succeeded" {
							t.Errorf("%s: status %q, want succeeded", id, st)
						}
					}
					if p := f.pending(t, items["healthy"].Band); p != 0 {
						t.Errorf("the healthy band keeps %d pending, want its entry acked", p)
					}
					if n := f.rdb.XLen(f.ctx, f.q.Stream(items["healthy"].Band)).Val(); n != 0 {
						t.Errorf("the healthy band holds %d entries, want its finished one gone", n)
					}
					if name == "string" {
						if v := f.rdb.Get(f.ctx, f.q.Stream(items["broken"].Band)).Val(); v != "clobbered" {
							t.Errorf("the broken band's key = %q, want it untouched", v)
						}
					}
					if name == "deleted" {
						if n := f.rdb.Exists(f.ctx, f.q.Stream(items["broken"].Band)).Val(); n != 0 {
							t.Errorf("the deleted band was made again")
						}
					}
				})
			}
		}
	}
}

// Entries with huge fields, ids with braces, empty ids, no fields but junk: dead records
// that keep what was written, the good task beside them runs.
func TestClaimHostileEntryFields(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "good", Priority: 5}) // creates the stream's group
	huge := strings.Repeat("h", 1<<20)
	f.xadd(t, 5, "task", huge, "attempt", 0)
	f.xadd(t, 5, "task", "a{b}c", "attempt", 0)
	f.xadd(t, 5, "task", "", "attempt", 0)
	f.xadd(t, 5, "attempt", 0)
	f.xadd(t, 5, "task", "x", "task", "y")
	f.xadd(t, 5, huge, huge)
	r, err := f.claimErr(t, lua.ClaimArgs{Consumer: "w", Want: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Started) != 1 || r.Started[0].ID != "good" || len(r.Invalid) != 6 {
		t.Fatalf("claim = started %+v invalid %d; want good started and 6 dead records", r.Started, len(r.Invalid))
	}
	raw := f.field(t, r.Invalid[0].DeadID, "raw")
	if len(raw) < 1<<20 {
		t.Fatalf("dead record of the huge entry keeps %d bytes, want the whole field", len(raw))
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(5)).Val(); n != 1 {
		t.Fatalf("xlen = %d, want 1", n)
	}
	if p, _ := f.rdb.XPending(f.ctx, f.q.Stream(5), keys.Group).Result(); p.Count != 1 {
		t.Fatalf("pending = %d, want 1", p.Count)
	}
}

// A claim whose reply was lost is retried by the client (go-redis retries a command on a
// dropped connection): the second run sees the same delivered entries, now the running
// attempt's own. It must leave them pending, not absorb them: an ACKed entry of a running
// task can never be reclaimed, and the task would stay "running" forever.
func TestClaimRetriedWithSameDeliveryKeepsEntry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "r", Priority: 6})
	xs, err := f.rdb.XReadGroup(f.ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w", Streams: []string{f.q.Stream(6), ">"}, Count: 1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	d := []lua.Delivered{{Band: 6, Entry: xs[0].Messages[0].ID}}
	first := f.claim(t, lua.ClaimArgs{Consumer: "w", Delivered: d})
	if len(first.Started) != 1 {
		t.Fatalf("first claim = %+v", first)
	}
	// The reply is lost; the same call runs again.
	again := f.claim(t, lua.ClaimArgs{Consumer: "w", Delivered: d})
	if len(again.Started) != 0 || len(again.Absorbed) != 0 || len(again.Invalid) != 0 {
		t.Fatalf("retried claim = %+v, want the entry left alone", again)
	}
	if p := f.pending(t, 6); p != 1 {
		t.Fatalf("pending = %d, want 1: the running attempt keeps its entry", p)
	}
	// Nobody runs attempt 1 (the worker never heard of it): a reaper takes it over.
	idleAll(t, f, 6, "w", 60_000)
	r := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 10, MinIdleMS: 30_000})
	if len(r.Started) != 1 || r.Started[0].Attempt != 2 {
		t.Fatalf("reclaim = %+v, want attempt 2", r)
	}
}

// The claim takes task ids from entries up to lua.MaxEntryTaskID bytes; one byte more
// is a malformed entry, refused with its reason, and the task is not started.
func TestClaimEntryTaskIDLimit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	longest := strings.Repeat("a", lua.MaxEntryTaskID)
	over := strings.Repeat("b", lua.MaxEntryTaskID+1)
	f.enqueue(t, lua.NewTask{ID: longest})
	f.enqueue(t, lua.NewTask{ID: over})
	r, err := f.claimErr(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Started) != 1 || r.Started[0].ID != longest {
		t.Fatalf("started = %+v, want the %d-byte id alone", r.Started, lua.MaxEntryTaskID)
	}
	if len(r.Invalid) != 1 || !strings.Contains(r.Invalid[0].Reason, "bad task id") {
		t.Fatalf("invalid = %+v, want the %d-byte id refused as a bad task id", r.Invalid, lua.MaxEntryTaskID+1)
	}
}
