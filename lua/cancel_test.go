package lua_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dtq/dtq/lua"
)

func (f *fixture) cancel(t *testing.T, id string) (lua.CancelOutcome, error) {
	t.Helper()
	return lua.Cancel.Run(f.ctx, f.rdb, lua.CancelArgs{Queue: f.q, ID: id, NowMS: f.now, KeepMS: 0})
}

func (f *fixture) touch(t *testing.T, consumer string, idle int64, ss ...lua.Started) []lua.Touched {
	t.Helper()
	hs := make([]lua.Held, len(ss))
	for i, s := range ss {
		hs[i] = s.Held()
	}
	r, err := lua.Touch.Run(f.ctx, f.rdb, lua.TouchArgs{Queue: f.q, Consumer: consumer, IdleMS: idle, Items: hs})
	if err != nil {
		t.Fatalf("touch: %v", err)
	}
	return r
}

// A cancel of a running task only records the request: the status and the fence stay,
// the heartbeat's touch reports it, and a second request keeps the first one's time.
func TestCancelRunningRecordsARequest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.start(t, "r", "other")
	if got := f.touch(t, "w", 0, s["r"], s["other"]); got[0] != lua.StillHeld || got[1] != lua.StillHeld {
		t.Fatalf("touch before the request = %v", got)
	}
	out, err := f.cancel(t, "r")
	if err != nil || out != lua.CancelRequested {
		t.Fatalf("cancel of a running task = %q, %v; want requested", out, err)
	}
	if st, at := f.field(t, "r", "status"), f.field(t, "r", "cancel"); st != "running" || at == "" {
		t.Fatalf("after the request: status %q cancel %q; want running with the request's time", st, at)
	}
	first := f.field(t, "r", "cancel")
	f.now += 1000
	if out, err := f.cancel(t, "r"); err != nil || out != lua.CancelRequested || f.field(t, "r", "cancel") != first {
		t.Fatalf("second request = %q, %v, time %q; want requested, first time %q kept", out, err, f.field(t, "r", "cancel"), first)
	}
	if got := f.touch(t, "w", 0, s["r"], s["other"]); got[0] != lua.StopRequested || got[1] != lua.StillHeld {
		t.Fatalf("touch after the request = %v; want [stop still]", got)
	}
	// another worker's stale view of the task is still refused, request or not
	if got := f.touch(t, "stranger", 0, lua.Started{ID: "r", Entry: s["r"].Entry, Band: 0, Attempt: 2}); got[0] != lua.NotHeld {
		t.Fatalf("touch of an attempt that is not current = %v", got)
	}
}

// The outcomes once a cancel was requested: a cancelled outcome and a retry end the task
// cancelled; a success or a death that got there first keeps its outcome.
func TestCompleteAfterCancelRequest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.start(t, "c", "r", "ok", "dead")
	for _, id := range []string{"c", "r", "ok", "dead"} {
		if out, err := f.cancel(t, id); err != nil || out != lua.CancelRequested {
			t.Fatalf("cancel %s = %q, %v", id, out, err)
		}
	}
	codes := f.complete(t, f.now, done(s["c"], lua.Cancelled, 0), done(s["r"], lua.Retry, f.now+10), done(s["ok"], lua.Succeeded, 0), done(s["dead"], lua.Dead, 0))
	for i, c := range codes {
		if c != lua.CompleteApplied {
			t.Fatalf("item %d: code %v", i, c)
		}
	}
	want := map[string]string{"c": "cancelled", "r": "cancelled", "ok": "succeeded", "dead": "dead"}
	for id, st := range want {
		if got := f.field(t, id, "status"); got != st {
			t.Errorf("%s: status %q, want %q", id, got, st)
		}
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Schedule()).Val(); n != 0 {
		t.Errorf("schedule holds %d: a retry of a task whose cancel was requested was filed", n)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Retrying()).Val(); n != 0 {
		t.Errorf("retrying set holds %d", n)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(0)).Val(); n != 0 {
		t.Errorf("stream holds %d entries after every outcome", n)
	}
	if got := f.field(t, "c", "failures"); got != "0" {
		t.Errorf("a cancelled attempt counted as a failure: failures %q", got)
	}
	// a final task refuses the cancel, naming its status
	if _, err := f.cancel(t, "ok"); !errors.Is(err, lua.ErrWrongStatus) {
		t.Errorf("cancel of a succeeded task: %v; want ErrWrongStatus", err)
	}
}

// A cancelled outcome from an execution that is no longer current (reclaimed) changes
// nothing: completions stay fenced.
func TestCancelledOutcomeIsFenced(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.start(t, "f")
	if _, err := f.cancel(t, "f"); err != nil {
		t.Fatal(err)
	}
	stale := s["f"]
	stale.Attempt = 7
	if codes := f.complete(t, f.now, done(stale, lua.Cancelled, 0)); codes[0] != lua.CompleteFenced {
		t.Fatalf("stale cancelled outcome: %v", codes)
	}
	if st := f.field(t, "f", "status"); st != "running" {
		t.Fatalf("status %q after a fenced outcome", st)
	}
}

// A running task whose worker died after the request is cancelled by the reclaim, not
// run again; a handed-back one too.
func TestReclaimCancelsARequestedTask(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.start(t, "gone", "kept")
	if _, err := f.cancel(t, "gone"); err != nil {
		t.Fatal(err)
	}
	f.touch(t, "w", 60_000, s["gone"], s["kept"]) // both idle past the visibility timeout
	r := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 4, MinIdleMS: 30_000})
	if len(r.Started) != 1 || r.Started[0].ID != "kept" {
		t.Fatalf("reclaim started %+v; want only kept", r.Started)
	}
	if len(r.Absorbed) != 1 || r.Absorbed[0].ID != "gone" || r.Absorbed[0].Status != "cancelled" {
		t.Fatalf("reclaim absorbed %+v; want gone cancelled", r.Absorbed)
	}
	if st, fl := f.field(t, "gone", "status"), f.field(t, "gone", "failures"); st != "cancelled" || fl != "0" {
		t.Fatalf("gone: status %q failures %q", st, fl)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(0)).Val(); n != 1 {
		t.Fatalf("stream holds %d; want kept's entry only", n)
	}
	// the dead worker's late outcome is fenced
	if codes := f.complete(t, f.now, done(s["gone"], lua.Succeeded, 0)); codes[0] != lua.CompleteFenced {
		t.Fatalf("late outcome of the cancelled task: %v", codes)
	}
}

// A task that died after a cancel request (its last attempt failed first) and is then
// requeued runs again without the old request stopping it.
func TestRequeueClearsACancelRequest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.start(t, "x")
	if _, err := f.cancel(t, "x"); err != nil {
		t.Fatal(err)
	}
	f.complete(t, f.now, done(s["x"], lua.Dead, 0))
	if st := f.field(t, "x", "status"); st != "dead" {
		t.Fatalf("status %q, want dead", st)
	}
	if _, err := lua.Requeue.Run(f.ctx, f.rdb, lua.RequeueArgs{Queue: f.q, ID: "x", NowMS: f.now}); err != nil {
		t.Fatal(err)
	}
	if c := f.field(t, "x", "cancel"); c != "" {
		t.Fatalf("cancel request %q survived the requeue", c)
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1})
	if len(r.Started) != 1 || f.touch(t, "w", 0, r.Started[0])[0] != lua.StillHeld {
		t.Fatalf("requeued task: started %+v", r.Started)
	}
}

// A task a reclaim ends cancelled keeps its record and unique key the retention the
// reclaim is given, as a cancel or a cancelled outcome would: not forever. Without a
// retention (KeepMS 0) both stay, as everywhere else.
func TestReclaimCancelKeepsTheRetention(t *testing.T) {
	t.Parallel()
	for _, keep := range []int64{0, 90_000} {
		f := setup(t)
		f.enqueue(t, lua.NewTask{ID: "c", Unique: "once"})
		f.enqueue(t, lua.NewTask{ID: "plain"})
		s := map[string]lua.Started{}
		for _, st := range f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 4}).Started {
			s[st.ID] = st
		}
		for _, id := range []string{"c", "plain"} {
			if _, err := f.cancel(t, id); err != nil {
				t.Fatal(err)
			}
		}
		f.touch(t, "w", 60_000, s["c"], s["plain"])
		r := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 4, MinIdleMS: 30_000, KeepMS: keep})
		if len(r.Started) != 0 || len(r.Absorbed) != 2 {
			t.Fatalf("keep %d: reclaim started %+v absorbed %+v; want both absorbed", keep, r.Started, r.Absorbed)
		}
		for _, k := range []string{f.q.Task("c"), f.q.Task("plain"), f.q.Unique("once")} {
			ttl := f.rdb.PTTL(f.ctx, k).Val()
			if keep == 0 && ttl != -1 {
				t.Errorf("keep 0: %s has a lifetime of %v; want none", k, ttl)
			}
			if keep > 0 && (ttl <= 0 || ttl > time.Duration(keep)*time.Millisecond) {
				t.Errorf("keep %d ms: %s lives %v; want the retention", keep, k, ttl)
			}
		}
		if st := f.field(t, "c", "status"); st != "cancelled" {
			t.Errorf("keep %d: status %q; want cancelled", keep, st)
		}
	}
}
