package lua_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// setLimit writes a definition as client.SetLimit does.
func (f *fixture) setLimit(t *testing.T, fn, def string) {
	t.Helper()
	if err := f.rdb.HSet(f.ctx, f.q.Limits(), fn, def).Err(); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) finish(t *testing.T, s lua.Started, o lua.Outcome) {
	t.Helper()
	codes, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, Items: []lua.Completion{{
		ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Outcome: o, Text: "x", RetryMS: f.now + 1000, Slots: s.Slots}}})
	if err != nil || codes[0] != lua.CompleteApplied {
		t.Fatalf("complete %s %c: %v %v", s.ID, o, codes, err)
	}
}

func (f *fixture) running(t *testing.T, fn string) int64 {
	t.Helper()
	return f.rdb.SCard(f.ctx, f.q.LimitRun(fn)).Val()
}

func ids(ss []lua.Started) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return strings.Join(out, ",")
}

// A queue without limits: no slots reported, no limit keys written.
func TestNoLimitsWritesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "a"})
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5})
	if len(r.Started) != 1 || r.Started[0].Slots != "" || r.ThrottledUntilMS != 0 || r.RecheckMS != 0 {
		t.Fatalf("claim = %+v", r)
	}
	if n := f.rdb.Keys(f.ctx, f.q.LimitPrefix()+"*").Val(); len(n) != 0 {
		t.Fatalf("limit keys written: %v", n)
	}
}

// A rate limit: a read starts at most the burst, later ones as tokens accrue (taking
// several at once), highest band first; an empty budget reads nothing and says when the
// next token comes. A replayed call takes no token.
func TestRateLimitBudgetAndBandOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "", "rate=10;per=1000;burst=2") // one token per 100 ms
	for i, p := range []int{0, 0, 0, 9, 9, 5} {
		f.enqueue(t, lua.NewTask{ID: string(rune('a' + i)), Priority: p})
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10, Call: "c1"})
	if ids(r.Started) != "d,e" || r.ThrottledUntilMS != 0 {
		t.Fatalf("first claim started %q (throttled %d), want d,e (band 9, the burst)", ids(r.Started), r.ThrottledUntilMS)
	}
	tat := f.rdb.Get(f.ctx, f.q.LimitRate("")).Val()
	// the same call resent: the stored reply, no token taken
	r2 := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10, Call: "c1"})
	if ids(r2.Started) != "d,e" || f.rdb.Get(f.ctx, f.q.LimitRate("")).Val() != tat {
		t.Fatalf("replay started %q, tat %s → %s", ids(r2.Started), tat, f.rdb.Get(f.ctx, f.q.LimitRate("")).Val())
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10, NowMS: f.now + 50})
	if len(r.Started) != 0 || r.ThrottledUntilMS != f.now+100 {
		t.Fatalf("claim at +50 ms = %+v, want nothing, throttled until +100", r)
	}
	if p := f.pending(t, 5) + f.pending(t, 0); p != 0 {
		t.Fatalf("%d entries read while throttled", p)
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10, NowMS: f.now + 100})
	if ids(r.Started) != "f" {
		t.Fatalf("claim at +100 ms started %q, want f (band 5, one token)", ids(r.Started))
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10, NowMS: f.now + 500})
	if ids(r.Started) != "a,b" {
		t.Fatalf("claim at +500 ms started %q, want a,b (the burst of 2 caps the accrued 4)", ids(r.Started))
	}
}

// A concurrency limit: slots are taken per started task and given back by every applied
// outcome (success, retry, death); a full scope reads nothing.
func TestConcurrencySlotsReleasedOnEveryOutcome(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "", "conc=2")
	for _, id := range []string{"a", "b", "c", "d"} {
		f.enqueue(t, lua.NewTask{ID: id, MaxRetries: 3})
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if ids(r.Started) != "a,b" || r.Started[0].Slots != "q" || f.running(t, "") != 2 {
		t.Fatalf("claim = %+v, running %d", r, f.running(t, ""))
	}
	full := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if len(full.Started) != 0 || full.ThrottledUntilMS == 0 {
		t.Fatalf("claim while full = %+v, want nothing and throttled", full)
	}
	f.finish(t, r.Started[0], lua.Succeeded)
	f.finish(t, r.Started[1], lua.Retry)
	if n := f.running(t, ""); n != 0 {
		t.Fatalf("%d slots held after success and retry, want 0", n)
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if ids(r.Started) != "c,d" {
		t.Fatalf("claim after release started %q", ids(r.Started))
	}
	f.finish(t, r.Started[0], lua.Dead)
	if n := f.running(t, ""); n != 1 {
		t.Fatalf("%d slots after a death, want 1 (d still runs)", n)
	}
	f.finish(t, r.Started[1], lua.Succeeded)
	if n := f.running(t, ""); n != 0 {
		t.Fatalf("run set holds %d at the end, want empty", n)
	}
}

// A slot whose release was missed (its task no longer runs) comes back at the next
// claim that finds the scope full; a task killed at claim (payload over the limit)
// never takes one.
func TestMissedReleaseIsSwept(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "", "conc=1")
	f.enqueue(t, lua.NewTask{ID: "big", Payload: make([]byte, 100)})
	f.enqueue(t, lua.NewTask{ID: "a"})
	f.enqueue(t, lua.NewTask{ID: "b"})
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, MaxPayload: 10})
	if len(r.Absorbed) != 1 || r.Absorbed[0].Status != "dead" || f.running(t, "") != 0 {
		t.Fatalf("claim = %+v, running %d: want big killed, no slot", r, f.running(t, ""))
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5, MaxPayload: 10})
	if ids(r.Started) != "a" {
		t.Fatalf("started %q, want a", ids(r.Started))
	}
	// a finishes without giving its slot back (a complete that passed no slots)
	f.finish(t, lua.Started{ID: "a", Entry: r.Started[0].Entry, Band: 0, Attempt: 1}, lua.Succeeded)
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5, MaxPayload: 10})
	if ids(r.Started) != "b" || f.running(t, "") != 1 {
		t.Fatalf("started %q (running %d), want b: a's slot swept", ids(r.Started), f.running(t, ""))
	}
}

// A worker that vanished keeps its task's slot until a peer reclaims the task after the
// visibility timeout: the reclaim keeps that slot (same task id, no second one, no
// token) and its completion gives it back.
func TestReclaimKeepsTheSlot(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "", "conc=1;rate=1;per=3600000;burst=1")
	f.enqueue(t, lua.NewTask{ID: "a", MaxRetries: 3})
	r := f.claim(t, lua.ClaimArgs{Consumer: "gone", Want: 1})
	if ids(r.Started) != "a" {
		t.Fatalf("started %q", ids(r.Started))
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 5, MinIdleMS: 0, NowMS: f.now + 10})
	if len(r.Started) != 1 || !r.Started[0].Reclaimed || r.Started[0].Slots != "q" || f.running(t, "") != 1 {
		t.Fatalf("reclaim = %+v, running %d: want a reclaimed holding its one slot", r, f.running(t, ""))
	}
	f.finish(t, r.Started[0], lua.Succeeded)
	if n := f.running(t, ""); n != 0 {
		t.Fatalf("%d slots after the reclaimed task finished", n)
	}
}

// A function's limit sets its entries aside (pending, task queued) without holding up
// other functions of the queue; a set-aside entry starts once its function's slot frees.
func TestFunctionLimitSetsAsideOnlyItsTasks(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "send", "conc=1")
	f.enqueue(t, lua.NewTask{ID: "s1", Function: "send"})
	f.enqueue(t, lua.NewTask{ID: "s2", Function: "send"})
	f.enqueue(t, lua.NewTask{ID: "o1", Function: "other"})
	f.enqueue(t, lua.NewTask{ID: "o2", Function: "other"})
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if ids(r.Started) != "s1,o1,o2" || r.Started[0].Slots != "f:send" || r.Started[1].Slots != "" {
		t.Fatalf("claim = %+v, want s1 (slot f:send), o1, o2", r.Started)
	}
	if st := f.field(t, "s2", "status"); st != "queued" || r.RecheckMS == 0 {
		t.Fatalf("s2 is %q (recheck %d), want queued with a recheck time", st, r.RecheckMS)
	}
	p, err := f.rdb.XPendingExt(f.ctx, &redis.XPendingExtArgs{Stream: f.q.Stream(0), Group: keys.Group,
		Start: "-", End: "+", Count: 10, Consumer: "~limited"}).Result()
	if err != nil || len(p) != 1 || p[0].Consumer != "~limited" {
		t.Fatalf("set-aside entries: %+v %v", p, err)
	}
	f.enqueue(t, lua.NewTask{ID: "s3", Function: "send"})
	if r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10}); len(r.Started) != 0 {
		t.Fatalf("claim while send is full started %q", ids(r.Started))
	}
	f.finish(t, r.Started[0], lua.Succeeded)
	r = f.claim(t, lua.ClaimArgs{Consumer: "w2", Want: 10})
	if ids(r.Started) != "s2" {
		t.Fatalf("claim after s1 finished started %q, want s2 (the oldest set aside)", ids(r.Started))
	}
	f.finish(t, r.Started[0], lua.Succeeded)
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if ids(r.Started) != "s3" {
		t.Fatalf("last claim started %q, want s3", ids(r.Started))
	}
	f.finish(t, r.Started[0], lua.Succeeded)
	if n := f.running(t, "send"); n != 0 || f.pending(t, 0) != 2 {
		t.Fatalf("running %d, pending %d: want 0 slots, o1 o2 pending", n, f.pending(t, 0))
	}
}

// The reaper taking a set-aside entry: its task is queued, so it is a fresh start under
// the limit: set aside again while the limit is full, started (attempt 1) once it is not.
func TestReclaimOfSetAsideEntry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "send", "conc=1")
	f.enqueue(t, lua.NewTask{ID: "s1", Function: "send"})
	f.enqueue(t, lua.NewTask{ID: "s2", Function: "send"})
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if ids(r.Started) != "s1" {
		t.Fatalf("started %q", ids(r.Started))
	}
	s1 := r.Started[0]
	hold := []lua.Delivered{{Band: 0, Entry: s1.Entry}}
	r = f.claim(t, lua.ClaimArgs{Consumer: "reaper", Reclaim: true, Want: 10, Holds: hold})
	if len(r.Started) != 0 || f.field(t, "s2", "status") != "queued" {
		t.Fatalf("reclaim while full = %+v, s2 %q", r, f.field(t, "s2", "status"))
	}
	f.finish(t, s1, lua.Succeeded)
	r = f.claim(t, lua.ClaimArgs{Consumer: "reaper", Reclaim: true, Want: 10})
	if len(r.Started) != 1 || r.Started[0].ID != "s2" || r.Started[0].Reclaimed || r.Started[0].Attempt != 1 || r.Started[0].Slots != "f:send" {
		t.Fatalf("reclaim after the slot freed = %+v, want s2 fresh at attempt 1", r.Started)
	}
}

// A limited queue never registers its worker for a hand-off, and the enqueue hands
// nothing off on it.
func TestLimitedQueueHasNoHandoffs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "", "conc=5")
	f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5, RegisterUntilMS: f.now + 60_000})
	if n := f.rdb.ZCard(f.ctx, f.q.Waiting()).Val(); n != 0 {
		t.Fatalf("%d workers registered on a limited queue", n)
	}
	f.register(t, "w")
	f.enqueue(t, lua.NewTask{ID: "a"})
	if st := f.field(t, "a", "status"); st != "queued" {
		t.Fatalf("a is %q after an enqueue with a waiting worker, want queued (no hand-off)", st)
	}
}

// Keys of the wrong type: a limits key that is not a hash refuses the claim with a key
// error (nothing read, nothing lost); state keys of another type are replaced.
func TestLimitKeysOfWrongType(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "a"})
	f.rdb.Set(f.ctx, f.q.Limits(), "x", 0)
	_, err := lua.Claim.Run(f.ctx, f.rdb, lua.ClaimArgs{Queue: f.q, Consumer: "w", NowMS: f.now, Want: 5, MaxPayload: 1 << 20})
	if err == nil || !lua.IsKeyError(err) || !strings.Contains(err.Error(), "limits") {
		t.Fatalf("claim with a string limits key: %v, want a key error naming it", err)
	}
	if f.pending(t, 0) != 0 || f.field(t, "a", "status") != "queued" {
		t.Fatal("the refused claim read or started something")
	}
	f.rdb.Del(f.ctx, f.q.Limits())
	f.setLimit(t, "", "rate=100;per=1000;burst=1;conc=1")
	f.rdb.LPush(f.ctx, f.q.LimitRate(""), "x")
	f.rdb.HSet(f.ctx, f.q.LimitRun(""), "x", "y")
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5})
	if ids(r.Started) != "a" || f.running(t, "") != 1 {
		t.Fatalf("claim with state keys of another type = %+v", r)
	}
	if f.rdb.Type(f.ctx, f.q.LimitRate("")).Val() != "string" {
		t.Fatal("rate state not rewritten as a string")
	}
}

// A reclaim that finds a cancel requested ends the task cancelled at once: the slots it
// held come back in that call (no sweep needed: the scope never looks full for it) and
// a waiter on the task is woken by the push, as complete.lua would.
func TestReclaimCancelReleasesSlotsAndWakesWaiters(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "", "conc=5")
	f.setLimit(t, "send", "conc=1")
	f.enqueue(t, lua.NewTask{ID: "x", Function: "send"})
	r := f.claim(t, lua.ClaimArgs{Consumer: "gone", Want: 1})
	if ids(r.Started) != "x" || r.Started[0].Slots != "q f:send" {
		t.Fatalf("claim = %+v", r)
	}
	sub := f.rdb.Subscribe(f.ctx, f.q.Waiters()+":x")
	defer sub.Close()
	if _, err := sub.Receive(f.ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if st, err := lua.Wait.Run(f.ctx, f.rdb, lua.WaitArgs{Queue: f.q, ID: "x", NowMS: f.now, UntilMS: f.now + 60_000}); err != nil || st != "running" {
		t.Fatalf("wait = %q %v", st, err)
	}
	if _, err := f.cancel(t, "x"); err != nil {
		t.Fatal(err)
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 5, MinIdleMS: 0, NowMS: f.now + 10})
	if len(r.Absorbed) != 1 || r.Absorbed[0].Status != "cancelled" {
		t.Fatalf("reclaim = %+v; want x absorbed cancelled", r)
	}
	if q, fn := f.running(t, ""), f.running(t, "send"); q != 0 || fn != 0 {
		t.Fatalf("slots held after the cancel: queue %d, send %d", q, fn)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second) // a bound, not a wait
	defer cancel()
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != "cancelled" {
		t.Fatalf("waiter got %v %v", msg, err)
	}
	if f.rdb.ZScore(f.ctx, f.q.Waiters(), "x").Err() != redis.Nil {
		t.Fatal("the waiter's registration outlived the task")
	}
}

// A reclaim that kills the task (its payload is over the reclaimer's limit) gives its
// slot back in that call and wakes its waiter with "dead".
func TestReclaimKillReleasesTheSlotAndWakesWaiters(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "", "conc=1")
	f.enqueue(t, lua.NewTask{ID: "big", Payload: make([]byte, 100)})
	if r := f.claim(t, lua.ClaimArgs{Consumer: "gone", Want: 1, MaxPayload: 1000}); ids(r.Started) != "big" {
		t.Fatalf("claim = %+v", r)
	}
	sub := f.rdb.Subscribe(f.ctx, f.q.Waiters()+":big")
	defer sub.Close()
	if _, err := sub.Receive(f.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lua.Wait.Run(f.ctx, f.rdb, lua.WaitArgs{Queue: f.q, ID: "big", NowMS: f.now, UntilMS: f.now + 60_000}); err != nil {
		t.Fatal(err)
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 5, MaxPayload: 10, NowMS: f.now + 10})
	if len(r.Absorbed) != 1 || r.Absorbed[0].Status != "dead" || f.running(t, "") != 0 {
		t.Fatalf("reclaim = %+v, running %d: want big killed, its slot back", r, f.running(t, ""))
	}
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second) // a bound, not a wait
	defer cancel()
	if msg, err := sub.ReceiveMessage(ctx); err != nil || msg.Payload != "dead" {
		t.Fatalf("waiter got %v %v", msg, err)
	}
}

// At burst 1, a claim that comes for its token late (by less than a period) keeps up to
// half a period of the time it missed (the next token falls a period after the last one
// was due, not after the late claim): workers that wake a little after each token do
// not lose the difference, and the rate holds. Two starts are never closer than half a
// period, and a scope idle for longer starts from now.
func TestRateKeepsALateClaimsMissedTime(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "", "rate=10;per=1000;burst=1") // a token per 100 ms
	for i := 0; i < 6; i++ {
		f.enqueue(t, lua.NewTask{ID: string(rune('a' + i))})
	}
	start := func(at int64) int {
		return len(f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10, NowMS: f.now + at}).Started)
	}
	if n := start(0); n != 1 {
		t.Fatalf("first claim started %d", n)
	}
	if n := start(140); n != 1 { // 40 ms after its token
		t.Fatalf("claim 40 ms late started %d", n)
	}
	if n := start(200); n != 1 { // the next token falls at 200, not 240
		t.Fatalf("claim at the next token (200) started %d: the late claim's 40 ms were lost", n)
	}
	if n := start(370); n != 1 { // 70 ms late: 50 of them kept
		t.Fatalf("claim 70 ms late started %d", n)
	}
	if n := start(419); n != 0 { // the next token falls at 420
		t.Fatalf("claim at 419 started %d: a start 49 ms after the previous one", n)
	}
	if n := start(420); n != 1 {
		t.Fatalf("claim at 420 started %d", n)
	}
	if n := start(1420); n != 1 { // after an idle second: from now, no time kept
		t.Fatalf("claim after an idle second started %d", n)
	}
	if n := start(1519); n != 0 {
		t.Fatalf("claim 99 ms after the one that followed an idle second started %d", n)
	}
}

// Entries set aside by a limit, idle past the visibility timeout, do not use up a
// reclaim's budget: the reaper still reaches a dead worker's running task behind them
// (here on a lower band, after 30 set-aside entries of band 9).
func TestSetAsideEntriesDoNotStarveTheReclaim(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setLimit(t, "send", "conc=1")
	f.enqueue(t, lua.NewTask{ID: "run", Function: "send", MaxRetries: 3})
	r := f.claim(t, lua.ClaimArgs{Consumer: "gone", Want: 1})
	if ids(r.Started) != "run" {
		t.Fatalf("started %q", ids(r.Started))
	}
	for i := 0; i < 30; i++ {
		f.enqueue(t, lua.NewTask{ID: "w" + string(rune('A'+i)), Function: "send", Priority: 9})
	}
	if r := f.claim(t, lua.ClaimArgs{Consumer: "gone", Want: 30}); len(r.Started) != 0 {
		t.Fatalf("started %q past the limit", ids(r.Started))
	}
	if p := f.rdb.XPending(f.ctx, f.q.Stream(9), keys.Group).Val(); p.Count != 30 {
		t.Fatalf("%d entries of band 9 set aside, want 30", p.Count)
	}
	// every pending entry idle a minute, its owner unchanged (the worker's, "~limited")
	for _, band := range []int{0, 9} {
		for _, p := range f.pendingEntries(t, band) {
			if err := f.rdb.Do(f.ctx, "XCLAIM", f.q.Stream(band), keys.Group, p.Consumer, 0, p.ID, "IDLE", 60_000, "JUSTID").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 2, MinIdleMS: 30_000, NowMS: f.now + 60_000})
	if len(r.Started) != 1 || r.Started[0].ID != "run" || !r.Started[0].Reclaimed {
		t.Fatalf("reclaim = %+v; want run reclaimed", r.Started)
	}
}
