package lua_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dtq/dtq/lua"
)

// A band of another type is skipped and named; the other bands are read, and a waiting
// set of another type costs the registration only.
func TestClaimSkipsABrokenBand(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "hi", Priority: 8})
	f.enqueue(t, lua.NewTask{ID: "lo", Priority: 2})
	f.rdb.Set(f.ctx, f.q.Stream(5), "x", 0)
	f.rdb.Set(f.ctx, f.q.Waiting(), "x", 0)
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5, RegisterUntilMS: f.now + 1000})
	if len(r.Started) != 2 || len(r.Broken) != 1 || r.Broken[0] != 5 {
		t.Fatalf("claim = %+v, want hi and lo started and band 5 named broken", r)
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5, RegisterUntilMS: f.now + 1000})
	if len(r.Started) != 0 || len(r.Broken) != 1 {
		t.Fatalf("second claim = %+v, want nothing and band 5 named again", r)
	}
}

// Diagnose names the keys of another type; an error that is not a key's comes back as
// it is.
func TestDiagnoseNamesWrongTypeKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.rdb.Set(f.ctx, f.q.Schedule(), "x", 0)
	_, err := lua.SchedClaim.Run(f.ctx, f.rdb, lua.SchedClaimArgs{Queue: f.q, NowMS: f.now, Limit: 10, StaleMS: 0})
	if !lua.IsKeyError(err) {
		t.Fatalf("scheduler claim over a string schedule: %v, want a key error", err)
	}
	var qe *lua.QueueError
	if d := lua.Diagnose(f.ctx, f.rdb, f.q, "", "schedule", err); !errors.As(d, &qe) || len(qe.Wrong) != 1 ||
		qe.Wrong[0].Key != f.q.Schedule() || !strings.Contains(d.Error(), f.q.Schedule()+" is a string, want a zset") {
		t.Fatalf("diagnosis = %v, want the schedule named", d)
	}
	other := errors.New("connection reset")
	if lua.IsKeyError(other) || lua.Diagnose(f.ctx, f.rdb, f.q, "", "x", other) != other {
		t.Fatal("a network error was taken for a key error")
	}
}

// A retry whose schedule, or a death whose dead set, is of another type: nothing of the
// outcome is written and the entry stays pending (a record saying "retrying" that no
// schedule held was never run again); the other items of the call are applied.
func TestCompleteRefusesAnOutcomeItCannotFile(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, id := range []string{"r", "d", "s"} {
		f.enqueue(t, lua.NewTask{ID: id, MaxRetries: 3})
	}
	c := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 3})
	if len(c.Started) != 3 {
		t.Fatalf("claim = %+v", c)
	}
	f.rdb.Set(f.ctx, f.q.Schedule(), "x", 0)
	f.rdb.Set(f.ctx, f.q.Dead(), "x", 0)
	var items []lua.Completion
	for _, s := range c.Started {
		o := map[string]lua.Outcome{"r": lua.Retry, "d": lua.Dead, "s": lua.Succeeded}[s.ID]
		items = append(items, lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Outcome: o, Text: "boom", RetryMS: f.now + 10})
	}
	codes, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		want := lua.CompleteRefused
		if it.ID == "s" {
			want = lua.CompleteApplied
		}
		if codes[i] != want {
			t.Errorf("%s: code %d, want %d", it.ID, codes[i], want)
		}
	}
	for _, id := range []string{"r", "d"} {
		if st, fl := f.field(t, id, "status"), f.field(t, id, "failures"); st != "running" || fl != "0" {
			t.Errorf("%s: status %q failures %q, want running with nothing counted", id, st, fl)
		}
	}
	if p := f.pending(t, 0); p != 2 {
		t.Errorf("%d entries pending, want the two refused ones", p)
	}
	if st := f.field(t, "s", "status"); st != "succeeded" {
		t.Errorf("s: %q, want succeeded", st)
	}
}

// A reclaim never takes back from its caller an entry the caller names as running
// now, however idle it looks (its process stalled between touching it and the call);
// the same entry, not named, is reclaimed.
func TestReclaimLeavesTheCallersOwnEntries(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "own", MaxRetries: 3})
	c := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1})
	if len(c.Started) != 1 {
		t.Fatalf("claim = %+v", c)
	}
	s := c.Started[0]
	idleAll(t, f, 0, "w", 60_000)
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Reclaim: true, Want: 5, MinIdleMS: 1000,
		Holds: []lua.Delivered{{Band: s.Band, Entry: s.Entry}}})
	if len(r.Started)+len(r.Absorbed)+len(r.Invalid) != 0 {
		t.Fatalf("reclaim of the caller's own running entry = %+v, want it left alone", r)
	}
	if a, fl := f.field(t, "own", "attempt"), f.field(t, "own", "failures"); a != "1" || fl != "0" {
		t.Fatalf("attempt %s failures %s, want 1 and 0", a, fl)
	}
	idleAll(t, f, 0, "w", 60_000)
	if r := f.claim(t, lua.ClaimArgs{Consumer: "w", Reclaim: true, Want: 5, MinIdleMS: 1000}); len(r.Started) != 1 || r.Started[0].Attempt != 2 {
		t.Fatalf("reclaim not naming it = %+v, want attempt 2", r)
	}
}
