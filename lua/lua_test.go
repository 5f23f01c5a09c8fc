package lua_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type fixture struct {
	ctx context.Context
	rdb *redis.Client
	q   keys.Queue
	now int64
}

func setup(t *testing.T) *fixture {
	t.Helper()
	srv := redistest.Shared(t)
	return &fixture{
		ctx: context.Background(),
		rdb: srv.Client(t),
		q:   keys.New(redistest.Prefix(t)).Queue("default"),
		now: time.Now().UnixMilli(),
	}
}

func (f *fixture) enqueue(t *testing.T, a lua.NewTask) string {
	t.Helper()
	if a.Function == "" {
		a.Function = "noop"
	}
	id, created, err := f.enqueueOne(a)
	if err != nil || !created {
		t.Fatalf("enqueue %s: created=%v err=%v", a.ID, created, err)
	}
	return id
}

// enqueueOne runs one enqueue call of the single task a at f.now.
func (f *fixture) enqueueOne(a lua.NewTask) (id string, created bool, err error) {
	rs, err := lua.Enqueue.Run(f.ctx, f.rdb, lua.EnqueueArgs{Queue: f.q, NowMS: f.now, Tasks: []lua.NewTask{a}})
	if err != nil {
		return "", false, err
	}
	return rs[0].ID, rs[0].Created, rs[0].Err
}

func (f *fixture) claim(t *testing.T, a lua.ClaimArgs) lua.ClaimResult {
	t.Helper()
	if a.NowMS == 0 {
		a.NowMS = f.now
	}
	if a.MaxPayload == 0 {
		a.MaxPayload = 1 << 20
	}
	a.Queue = f.q
	r, err := lua.Claim.Run(f.ctx, f.rdb, a)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return r
}

func (f *fixture) field(t *testing.T, id, name string) string {
	t.Helper()
	v, err := f.rdb.HGet(f.ctx, f.q.Task(id), name).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("hget %s %s: %v", id, name, err)
	}
	return v
}

func (f *fixture) pending(t *testing.T, band int) int64 {
	t.Helper()
	p, err := f.rdb.XPending(f.ctx, f.q.Stream(band), keys.Group).Result()
	if err != nil {
		t.Fatalf("xpending: %v", err)
	}
	return p.Count
}

func TestEnqueueCreatesGroupAndEntry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "a", Priority: 7, Payload: []byte(`{"x":1}`)})
	groups, err := f.rdb.XInfoGroups(f.ctx, f.q.Stream(7)).Result()
	if err != nil || len(groups) != 1 || groups[0].Name != keys.Group {
		t.Fatalf("groups = %v, %v; want one group %q", groups, err, keys.Group)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(7)).Val(); n != 1 {
		t.Fatalf("xlen = %d, want 1", n)
	}
	if st := f.field(t, "a", "status"); st != "queued" {
		t.Fatalf("status = %q, want queued", st)
	}
}

func TestEnqueueUniqueAndDuplicateID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first := f.enqueue(t, lua.NewTask{ID: "one", Unique: "order-42"})
	id, created, err := f.enqueueOne(lua.NewTask{ID: "two", Function: "noop", Unique: "order-42"})
	if err != nil || created || id != first {
		t.Fatalf("second unique enqueue = %q created=%v err=%v; want %q, not created", id, created, err, first)
	}
	if n := f.rdb.Exists(f.ctx, f.q.Task("two")).Val(); n != 0 {
		t.Fatalf("second unique enqueue created a task hash")
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(0)).Val(); n != 1 {
		t.Fatalf("xlen = %d, want 1", n)
	}
	_, _, err = f.enqueueOne(lua.NewTask{ID: "one", Function: "noop"})
	if !errors.Is(err, lua.ErrTaskExists) {
		t.Fatalf("enqueue with a taken id: err = %v, want ErrTaskExists", err)
	}
}

func TestClaimReadsBandsInPriorityOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i, p := range []int{0, 5, 9, 5, 0} {
		f.enqueue(t, lua.NewTask{ID: string(rune('a' + i)), Priority: p})
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 3})
	var got []int
	for _, s := range r.Started {
		got = append(got, s.Band)
		if s.Attempt != 1 {
			t.Errorf("task %s attempt = %d, want 1", s.ID, s.Attempt)
		}
	}
	if len(got) != 3 || got[0] != 9 || got[1] != 5 || got[2] != 5 {
		t.Fatalf("bands started = %v, want [9 5 5]", got)
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 32})
	if len(r.Started) != 2 {
		t.Fatalf("second claim started %d, want the 2 left", len(r.Started))
	}
}

// A claim creates the stream and group of a band that has none only when it ends
// wanting more (its caller blocks next on every band); one that found what it wanted
// leaves the empty bands alone. A band deleted under a busy claim is created again by
// the first claim that comes up short, and its new entries are then read.
func TestClaimCreatesMissingBandsWhenItEndsWanting(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "a", Priority: 0})
	f.enqueue(t, lua.NewTask{ID: "b", Priority: 0})
	exists := func(band int) bool {
		t.Helper()
		n, err := f.rdb.Exists(f.ctx, f.q.Stream(band)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if exists(4) {
		t.Fatal("band 4 exists before any claim")
	}
	if r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1}); len(r.Started) != 1 {
		t.Fatalf("started %d, want 1", len(r.Started))
	}
	if exists(4) {
		t.Fatal("a claim that found all it wanted created the empty band 4")
	}
	if r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 2}); len(r.Started) != 1 {
		t.Fatalf("started %d, want 1", len(r.Started))
	}
	for band := range keys.Bands {
		groups, err := f.rdb.XInfoGroups(f.ctx, f.q.Stream(band)).Result()
		if err != nil || len(groups) != 1 || groups[0].Name != keys.Group {
			t.Fatalf("band %d after a claim that came up short: groups %v, %v", band, groups, err)
		}
	}
	// deleted while a busy claim passes it, written again without a group
	f.rdb.Del(f.ctx, f.q.Stream(6))
	f.enqueue(t, lua.NewTask{ID: "c", Priority: 0})
	if r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1}); len(r.Started) != 1 || r.Started[0].ID != "c" {
		t.Fatalf("started %+v, want c", r.Started)
	}
	if exists(6) {
		t.Fatal("a claim that found all it wanted created the deleted band 6")
	}
	if r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1}); len(r.Started) != 0 {
		t.Fatalf("started %+v from an empty queue", r.Started)
	}
	if !exists(6) {
		t.Fatal("a claim that came up short left band 6 without its stream")
	}
	f.enqueue(t, lua.NewTask{ID: "d", Priority: 6})
	if r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 1}); len(r.Started) != 1 || r.Started[0].ID != "d" {
		t.Fatalf("started %+v, want d", r.Started)
	}
}

// Seed race 1: two workers claim the same queued task through two entries (a duplicate
// XADD). Exactly one starts it; the other absorbs its entry: ACK, no run.
func TestRaceClaimSameQueuedTask(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "dup"})
	if err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.q.Stream(0), Values: []any{"task", "dup", "attempt", 0}}).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]lua.ClaimResult, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := lua.Claim.Run(f.ctx, f.rdb, lua.ClaimArgs{Queue: f.q, Consumer: []string{"w1", "w2"}[i], NowMS: f.now, Want: 1, MaxPayload: 1 << 20})
			if err != nil {
				t.Errorf("claim: %v", err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	started, absorbed := 0, 0
	for _, r := range results {
		started += len(r.Started)
		absorbed += len(r.Absorbed)
	}
	if started != 1 || absorbed != 1 {
		t.Fatalf("started %d absorbed %d, want 1 and 1", started, absorbed)
	}
	if p := f.pending(t, 0); p != 1 {
		t.Fatalf("pending = %d, want 1 (the absorbed entry is ACKed)", p)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(0)).Val(); n != 1 {
		t.Fatalf("xlen = %d, want 1 (the absorbed entry is deleted)", n)
	}
}

// An entry older than the task's attempt (left over from an earlier attempt) is absorbed.
func TestClaimAbsorbsStaleEntry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "t"})
	f.rdb.HSet(f.ctx, f.q.Task("t"), "attempt", 3)
	r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 5})
	if len(r.Started) != 0 || len(r.Absorbed) != 1 || r.Absorbed[0].Status != "queued" {
		t.Fatalf("claim = %+v, want the stale entry absorbed", r)
	}
}

// pendingEntries lists band's pending entries (at most 100).
func (f *fixture) pendingEntries(t *testing.T, band int) []redis.XPendingExt {
	t.Helper()
	ps, err := f.rdb.XPendingExt(f.ctx, &redis.XPendingExtArgs{Stream: f.q.Stream(band), Group: keys.Group, Start: "-", End: "+", Count: 100}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func idleAll(t *testing.T, f *fixture, band int, consumer string, idleMS int64) {
	t.Helper()
	for _, p := range f.pendingEntries(t, band) {
		if err := f.rdb.Do(f.ctx, "XCLAIM", f.q.Stream(band), keys.Group, consumer, 0, p.ID, "IDLE", idleMS, "JUSTID").Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// Seed race 2: several reclaimers adopt the same running entry at once. XAUTOCLAIM and
// the attempt increment are one script, so exactly one gets the new attempt.
func TestRaceReclaimSameEntry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "r", MaxRetries: 3})
	first := f.claim(t, lua.ClaimArgs{Consumer: "dead-worker", Want: 1})
	if len(first.Started) != 1 {
		t.Fatalf("first claim started %d", len(first.Started))
	}
	idleAll(t, f, 0, "dead-worker", 60_000)

	const reclaimers = 8
	var wg sync.WaitGroup
	results := make([]lua.ClaimResult, reclaimers)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := lua.Claim.Run(f.ctx, f.rdb, lua.ClaimArgs{Queue: f.q, Consumer: "reaper", NowMS: f.now, Reclaim: true, Want: 4, MinIdleMS: 30_000, MaxPayload: 1 << 20})
			if err != nil {
				t.Errorf("reclaim: %v", err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	var won []lua.Started
	for _, r := range results {
		won = append(won, r.Started...)
	}
	if len(won) != 1 || won[0].Attempt != 2 || !won[0].Reclaimed {
		t.Fatalf("reclaims = %+v, want exactly one with attempt 2", won)
	}
	if got := f.field(t, "r", "failures"); got != "1" {
		t.Fatalf("failures = %q, want 1 (a silent death counts)", got)
	}
	// The silent worker wakes up and completes: fenced, nothing changes, no ACK.
	ok, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: []lua.Completion{{ID: "r", Entry: first.Started[0].Entry, Band: 0, Attempt: 1, Outcome: lua.Succeeded, Text: "late"}}})
	if err != nil || ok[0] == lua.CompleteApplied {
		t.Fatalf("late completion applied=%v err=%v; want fenced", ok, err)
	}
	if st := f.field(t, "r", "status"); st != "running" {
		t.Fatalf("status after fenced completion = %q, want running", st)
	}
	if p := f.pending(t, 0); p != 1 {
		t.Fatalf("pending = %d after fenced completion, want 1", p)
	}
	// Its heartbeat cannot take the entry back either.
	touched, err := lua.Touch.Run(f.ctx, f.rdb, lua.TouchArgs{Queue: f.q, Consumer: "dead-worker", IdleMS: 0, Handback: false, Items: []lua.Held{{ID: "r", Entry: first.Started[0].Entry, Attempt: 1}}})
	if err != nil || touched[0].Held() {
		t.Fatalf("stale touch = %v, %v; want refused", touched, err)
	}
	// The reclaimer's completion applies.
	ok, err = lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: []lua.Completion{{ID: "r", Entry: won[0].Entry, Band: 0, Attempt: 2, Outcome: lua.Succeeded, Text: "done"}}})
	if err != nil || ok[0] != lua.CompleteApplied {
		t.Fatalf("current completion applied=%v err=%v", ok, err)
	}
	if st, res := f.field(t, "r", "status"), f.field(t, "r", "result"); st != "succeeded" || res != "done" {
		t.Fatalf("status %q result %q, want succeeded/done", st, res)
	}
	if p := f.pending(t, 0); p != 0 {
		t.Fatalf("pending = %d, want 0", p)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(0)).Val(); n != 0 {
		t.Fatalf("xlen = %d, want 0", n)
	}
}

func TestReclaimHandbackDoesNotCountAsFailure(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "h", MaxRetries: 0})
	c := f.claim(t, lua.ClaimArgs{Consumer: "draining", Want: 1})
	touched, err := lua.Touch.Run(f.ctx, f.rdb, lua.TouchArgs{Queue: f.q, Consumer: "draining", IdleMS: 60_000, Handback: true, Items: []lua.Held{{ID: "h", Entry: c.Started[0].Entry, Attempt: 1}}})
	if err != nil || !touched[0].Held() {
		t.Fatalf("handback = %v, %v", touched, err)
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 4, MinIdleMS: 30_000})
	if len(r.Started) != 1 || r.Started[0].Attempt != 2 || r.Started[0].Failures != 0 {
		t.Fatalf("reclaim after handback = %+v, want attempt 2 with no failure counted", r)
	}
}

func TestReclaimCountsSilentDeathAsFailure(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "k", MaxRetries: 0})
	f.claim(t, lua.ClaimArgs{Consumer: "gone", Want: 1})
	idleAll(t, f, 0, "gone", 60_000)
	r := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 4, MinIdleMS: 30_000})
	if len(r.Started) != 1 || r.Started[0].Failures != 1 || r.Started[0].MaxRetries != 0 || !r.Started[0].Reclaimed {
		t.Fatalf("reclaim = %+v, want one start reporting 1 failure of 0 allowed", r)
	}
}

// Seed race 3: schedulers overlapping during a leader failover claim a due task once,
// and a claim that was already enqueued is dropped without a second XADD.
func TestRaceSchedulerClaim(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "later", RunAtMS: f.now + 1000, Priority: 4})
	if st := f.field(t, "later", "status"); st != "scheduled" {
		t.Fatalf("status = %q, want scheduled", st)
	}
	const schedulers = 8
	var wg sync.WaitGroup
	dues := make([][]string, schedulers)
	for i := range dues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc, err := lua.SchedClaim.Run(f.ctx, f.rdb, lua.SchedClaimArgs{Queue: f.q, NowMS: f.now + 2000, Limit: 100, StaleMS: 0})
			due := sc.Due
			if err != nil {
				t.Errorf("sched claim: %v", err)
			}
			dues[i] = due
		}()
	}
	wg.Wait()
	total := 0
	for _, d := range dues {
		total += len(d)
	}
	if total != 1 {
		t.Fatalf("due task claimed %d times, want once: %v", total, dues)
	}
	se, err := lua.SchedEnqueue.Run(f.ctx, f.rdb, lua.SchedEnqueueArgs{Queue: f.q, NowMS: f.now + 2000, IDs: []string{"later"}})
	enq := se.Enqueued
	if err != nil || len(enq) != 1 {
		t.Fatalf("enqueue claimed = %v, %v", enq, err)
	}
	// A second leader holding the same (stale) claim: dropped, no second XADD.
	f.rdb.ZAdd(f.ctx, f.q.Claimed(), redis.Z{Score: float64(f.now), Member: "later"})
	se, err = lua.SchedEnqueue.Run(f.ctx, f.rdb, lua.SchedEnqueueArgs{Queue: f.q, NowMS: f.now + 2000, IDs: []string{"later"}})
	enq, dropped := se.Enqueued, se.Dropped
	if err != nil || len(enq) != 0 || len(dropped) != 1 {
		t.Fatalf("second enqueue = %v dropped %v err %v; want dropped", enq, dropped, err)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(4)).Val(); n != 1 {
		t.Fatalf("xlen p4 = %d, want exactly 1", n)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Claimed()).Val(); n != 0 {
		t.Fatalf("claimed set holds %d, want 0", n)
	}
}

func TestSchedClaimReturnsStaleClaims(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.rdb.ZAdd(f.ctx, f.q.Claimed(), redis.Z{Score: float64(f.now - 60_000), Member: "old"})
	f.rdb.ZAdd(f.ctx, f.q.Claimed(), redis.Z{Score: float64(f.now), Member: "fresh"})
	sc, err := lua.SchedClaim.Run(f.ctx, f.rdb, lua.SchedClaimArgs{Queue: f.q, NowMS: f.now, Limit: 100, StaleMS: f.now - 10_000})
	stale, next := sc.Stale, sc.NextMS
	if err != nil || len(stale) != 1 || stale[0] != "old" || next != -1 {
		t.Fatalf("stale = %v next %d err %v; want [old], -1", stale, next, err)
	}
}

func TestCompleteRetryThenDead(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "f", MaxRetries: 1, Priority: 2})
	c := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1}).Started[0]
	ok, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: []lua.Completion{{ID: "f", Entry: c.Entry, Band: 2, Attempt: c.Attempt, Outcome: lua.Retry, Text: "boom", RetryMS: f.now + 10}}})
	if err != nil || ok[0] != lua.CompleteApplied {
		t.Fatalf("retry: %v %v", ok, err)
	}
	if st := f.field(t, "f", "status"); st != "retrying" {
		t.Fatalf("status = %q, want retrying", st)
	}
	sc, _ := lua.SchedClaim.Run(f.ctx, f.rdb, lua.SchedClaimArgs{Queue: f.q, NowMS: f.now + 10, Limit: 10, StaleMS: 0})
	due := sc.Due
	if _, err := lua.SchedEnqueue.Run(f.ctx, f.rdb, lua.SchedEnqueueArgs{Queue: f.q, NowMS: f.now + 10, IDs: due}); err != nil || len(due) != 1 {
		t.Fatalf("requeue due %v: %v", due, err)
	}
	c2 := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1}).Started
	if len(c2) != 1 || c2[0].Attempt != 2 || c2[0].Failures != 1 {
		t.Fatalf("second claim = %+v, want attempt 2 after 1 failure", c2)
	}
	ok, err = lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: []lua.Completion{{ID: "f", Entry: c2[0].Entry, Band: 2, Attempt: 2, Outcome: lua.Dead, Text: "boom again"}}})
	if err != nil || ok[0] != lua.CompleteApplied {
		t.Fatalf("dead: %v %v", ok, err)
	}
	if st, e := f.field(t, "f", "status"), f.field(t, "f", "error"); st != "dead" || e != "boom again" {
		t.Fatalf("status %q error %q", st, e)
	}
	if _, err := lua.Requeue.Run(f.ctx, f.rdb, lua.RequeueArgs{Queue: f.q, ID: "f", NowMS: f.now}); err != nil {
		t.Fatalf("requeue: %v", err)
	}
	c3 := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1}).Started
	if len(c3) != 1 || c3[0].Attempt != 3 || c3[0].Failures != 0 {
		t.Fatalf("claim after requeue = %+v, want attempt 3, budget reset", c3)
	}
}

func TestMalformedEntriesBecomeDeadRecords(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "good", Priority: 3})
	for _, vals := range [][]any{
		{"foo", "bar"},
		{"task", "nosuch", "attempt", 0},
		{"task", "good", "attempt", "x"},
	} {
		if err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.q.Stream(3), Values: vals}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if len(r.Started) != 1 || r.Started[0].ID != "good" {
		t.Fatalf("started = %+v, want the good task", r.Started)
	}
	if len(r.Invalid) != 3 {
		t.Fatalf("invalid = %+v, want 3", r.Invalid)
	}
	raw := f.field(t, r.Invalid[0].DeadID, "raw")
	if !strings.Contains(raw, `"foo":"bar"`) {
		t.Fatalf("dead record raw = %q, want the entry's fields", raw)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Dead()).Val(); n != 3 {
		t.Fatalf("dead = %d, want 3", n)
	}
	if _, err := lua.Requeue.Run(f.ctx, f.rdb, lua.RequeueArgs{Queue: f.q, ID: r.Invalid[0].DeadID, NowMS: f.now}); err == nil {
		t.Fatalf("requeue of an invalid record succeeded")
	}
	if p := f.pending(t, 3); p != 1 {
		t.Fatalf("pending = %d, want 1 (only the good task)", p)
	}
}

func TestOversizedPayloadIsDeadNotRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "big", Payload: []byte(strings.Repeat("x", 2048))})
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, MaxPayload: 1024})
	if len(r.Started) != 0 || len(r.Absorbed) != 1 || r.Absorbed[0].Status != "dead" {
		t.Fatalf("claim = %+v, want the task killed", r)
	}
	if e := f.field(t, "big", "error"); !strings.Contains(e, "over the limit") {
		t.Fatalf("error = %q", e)
	}
}

func TestPausedQueueReadsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "p"})
	f.rdb.Set(f.ctx, f.q.Paused(), "1", 0)
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1})
	if !r.Paused || len(r.Started) != 0 {
		t.Fatalf("claim on paused queue = %+v", r)
	}
	f.rdb.Del(f.ctx, f.q.Paused())
	if r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1}); len(r.Started) != 1 {
		t.Fatalf("claim after resume = %+v", r)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "q"})
	f.enqueue(t, lua.NewTask{ID: "s", RunAtMS: f.now + 60_000})
	f.enqueue(t, lua.NewTask{ID: "d"}) // delivered, not yet started
	if _, err := lua.Cancel.Run(f.ctx, f.rdb, lua.CancelArgs{Queue: f.q, ID: "q", Unique: "", NowMS: f.now, KeepMS: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := lua.Cancel.Run(f.ctx, f.rdb, lua.CancelArgs{Queue: f.q, ID: "s", Unique: "", NowMS: f.now, KeepMS: 0}); err != nil {
		t.Fatal(err)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Schedule()).Val(); n != 0 {
		t.Fatalf("schedule holds %d after cancel", n)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(0)).Val(); n != 1 {
		t.Fatalf("xlen = %d, want 1 (the cancelled entry deleted)", n)
	}
	// "d" is delivered to a blocking reader, then cancelled, then claimed: absorbed.
	xs, err := f.rdb.XReadGroup(f.ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w", Streams: []string{f.q.Stream(0), ">"}, Count: 1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lua.Cancel.Run(f.ctx, f.rdb, lua.CancelArgs{Queue: f.q, ID: "d", Unique: "", NowMS: f.now, KeepMS: 0}); err != nil {
		t.Fatal(err)
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Delivered: []lua.Delivered{{Band: 0, Entry: xs[0].Messages[0].ID}}})
	if len(r.Started) != 0 || len(r.Absorbed) != 1 || r.Absorbed[0].Status != "cancelled" {
		t.Fatalf("claim of a cancelled delivery = %+v", r)
	}
	if _, err := lua.Cancel.Run(f.ctx, f.rdb, lua.CancelArgs{Queue: f.q, ID: "d", Unique: "", NowMS: f.now, KeepMS: 0}); err == nil {
		t.Fatalf("cancelling a cancelled task succeeded")
	}
	if _, err := lua.Cancel.Run(f.ctx, f.rdb, lua.CancelArgs{Queue: f.q, ID: "none", Unique: "", NowMS: f.now, KeepMS: 0}); err == nil {
		t.Fatalf("cancelling a missing task succeeded")
	}
}

func TestLock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lock := keys.New(redistest.Prefix(t)).SchedulerLock()
	if !f.rdb.SetNX(f.ctx, lock, "a", 10*time.Second).Val() {
		t.Fatal("acquire failed")
	}
	if ok, _ := lua.LockRenew.Run(f.ctx, f.rdb, lua.LockArgs{Lock: lock, Token: "b", TTLMS: 10_000}); ok {
		t.Fatal("b renewed a's lock")
	}
	if ok, _ := lua.LockRelease.Run(f.ctx, f.rdb, lua.LockArgs{Lock: lock, Token: "b"}); ok {
		t.Fatal("b released a's lock")
	}
	if ok, _ := lua.LockRenew.Run(f.ctx, f.rdb, lua.LockArgs{Lock: lock, Token: "a", TTLMS: 10_000}); !ok {
		t.Fatal("a could not renew")
	}
	if ok, _ := lua.LockRelease.Run(f.ctx, f.rdb, lua.LockArgs{Lock: lock, Token: "a"}); !ok {
		t.Fatal("a could not release")
	}
}

// Completions in any order keep XLEN equal to undelivered + pending, and never remove a
// pending or undelivered entry (XTRIM MINID below the oldest pending one, XDEL above it).
func TestCompleteKeepsXLenExact(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := 0; i < 8; i++ {
		f.enqueue(t, lua.NewTask{ID: fmt.Sprintf("t%d", i)})
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 6}) // t0..t5 delivered, t6 t7 not
	if len(r.Started) != 6 {
		t.Fatalf("started %d", len(r.Started))
	}
	done := map[int]bool{}
	for _, step := range [][]int{{3, 5}, {0}, {1, 4}, {2}} {
		var items []lua.Completion
		for _, i := range step {
			s := r.Started[i]
			items = append(items, lua.Completion{ID: s.ID, Entry: s.Entry, Band: 0, Attempt: s.Attempt, Outcome: lua.Succeeded})
			done[i] = true
		}
		if _, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: items}); err != nil {
			t.Fatal(err)
		}
		want := int64(8 - len(done))
		if n := f.rdb.XLen(f.ctx, f.q.Stream(0)).Val(); n != want {
			t.Fatalf("after completing %v: xlen %d, want %d", step, n, want)
		}
		for i, s := range r.Started {
			got := f.rdb.XRange(f.ctx, f.q.Stream(0), s.Entry, s.Entry).Val()
			if !done[i] && len(got) != 1 {
				t.Fatalf("pending entry of task %d removed", i)
			}
		}
	}
	// The undelivered entries are still there to be read.
	if r2 := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10}); len(r2.Started) != 2 {
		t.Fatalf("undelivered entries lost: started %d of 2", len(r2.Started))
	}
}

// A claim call resent after its reply was lost (go-redis resends on a dropped
// connection) gets the same reply from its receipt: nothing it claimed is stranded.
func TestResentClaimGetsTheSameReply(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := 0; i < 3; i++ {
		f.enqueue(t, lua.NewTask{ID: fmt.Sprintf("r%d", i)})
	}
	first := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2, Call: "w.1"})
	again := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2, Call: "w.1"})
	if len(first.Started) != 2 || fmt.Sprint(first.Started) != fmt.Sprint(again.Started) {
		t.Fatalf("resent call = %+v, want the first reply %+v", again.Started, first.Started)
	}
	if a := f.field(t, "r0", "attempt"); a != "1" {
		t.Fatalf("attempt %s after a resent claim, want 1", a)
	}
	// The next call deletes the previous receipt and reads on.
	next := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2, Call: "w.2", Previous: "w.1"})
	if len(next.Started) != 1 || next.Started[0].ID != "r2" {
		t.Fatalf("next call = %+v", next.Started)
	}
	if n := f.rdb.Exists(f.ctx, f.q.Receipt("w.1")).Val(); n != 0 {
		t.Fatal("the previous call's receipt was not deleted")
	}
	if ttl := f.rdb.PTTL(f.ctx, f.q.Receipt("w.2")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("receipt ttl %v, want at most a minute", ttl)
	}
}

// A claim whose reply was lost and that is resent only after its task was reclaimed (its
// entry idle past the visibility timeout) does not replay that start: the stale attempt
// would run a second time beside the reclaimer's. A start still current is replayed,
// and its entry's idle clock restarts so that no reaper takes it before a heartbeat.
func TestLateResentClaimDropsReclaimedStarts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "gone", MaxRetries: 3})
	f.enqueue(t, lua.NewTask{ID: "kept", MaxRetries: 3})
	first := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2, Call: "w.1"})
	if len(first.Started) != 2 {
		t.Fatalf("claim = %+v", first)
	}
	idleAll(t, f, 0, "w", 60_000)
	// a peer's reaper takes one of them (the other is still within its reach, but the
	// peer asks for one entry only)
	r := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 1, MinIdleMS: 30_000, Call: "peer.1"})
	if len(r.Started) != 1 || r.Started[0].Attempt != 2 {
		t.Fatalf("reclaim = %+v", r)
	}
	taken := r.Started[0].ID
	again := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 2, Call: "w.1"})
	if len(again.Started) != 1 || again.Started[0].ID == taken || again.Started[0].Attempt != 1 {
		t.Fatalf("late resend = %+v, want only the start %s did not lose", again.Started, taken)
	}
	ps, err := f.rdb.XPendingExt(f.ctx, &redis.XPendingExtArgs{Stream: f.q.Stream(0), Group: keys.Group,
		Start: again.Started[0].Entry, End: again.Started[0].Entry, Count: 1}).Result()
	if err != nil || len(ps) != 1 || ps[0].Consumer != "w" || ps[0].Idle >= 30*time.Second {
		t.Fatalf("replayed entry pending = %+v, %v; want it w's with its idle clock restarted", ps, err)
	}
}

// complete.lua orders stream ids as numbers, not text: "7-11" comes after "7-8" and
// "30-0" after "7-9". Entries are added with explicit ids across those boundaries; a
// text comparison would leave finished entries behind or trim undelivered ones, and
// XLEN would no longer be undelivered plus pending. "10-12", finished while "9-123" is
// the oldest pending entry, is as long as it: ids of one length compare as text only
// when their dashes line up.
func TestCompleteOrdersStreamIDsAsNumbers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	stream := f.q.Stream(0)
	if err := f.rdb.XGroupCreateMkStream(f.ctx, stream, keys.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	ids := []string{"7-8", "7-9", "7-10", "7-11", "9-123", "10-12", "30-0", "300-0", "300-9", "300-10"}
	for i, eid := range ids {
		id := fmt.Sprintf("n%d", i)
		if err := f.rdb.HSet(f.ctx, f.q.Task(id), "status", "queued", "attempt", "0", "entry", eid,
			"function", "noop", "payload", "", "id", id).Err(); err != nil {
			t.Fatal(err)
		}
		if err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: stream, ID: eid, Values: []any{"task", id, "attempt", "0"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 8}) // up to 300-0; 300-9 and 300-10 undelivered
	if len(r.Started) != 8 {
		t.Fatalf("started %d", len(r.Started))
	}
	byEntry := map[string]lua.Started{}
	for _, s := range r.Started {
		byEntry[s.Entry] = s
	}
	done := map[string]bool{}
	for _, step := range [][]string{{"7-11", "300-0"}, {"7-8"}, {"7-9", "7-10"}, {"10-12"}, {"9-123", "30-0"}} {
		var items []lua.Completion
		for _, eid := range step {
			s, ok := byEntry[eid]
			if !ok {
				t.Fatalf("entry %s was not started", eid)
			}
			items = append(items, lua.Completion{ID: s.ID, Entry: s.Entry, Band: 0, Attempt: s.Attempt, Outcome: lua.Succeeded})
			done[eid] = true
		}
		if _, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: items}); err != nil {
			t.Fatal(err)
		}
		if n, want := f.rdb.XLen(f.ctx, stream).Val(), int64(len(ids)-len(done)); n != want {
			t.Fatalf("after completing %v: xlen %d, want %d", step, n, want)
		}
		for _, eid := range ids {
			if !done[eid] && len(f.rdb.XRange(f.ctx, stream, eid, eid).Val()) != 1 {
				t.Fatalf("after completing %v: entry %s, not finished, was removed", step, eid)
			}
		}
	}
	if r2 := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10}); len(r2.Started) != 2 {
		t.Fatalf("undelivered entries lost: started %d of 2", len(r2.Started))
	}
}

// One complete call over tasks of several bands, given out of band order, one of them
// fenced: each item's code is the item's own, and each outcome lands on its own task,
// its stream and its unique key.
func TestCompleteMixesBands(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "a", Priority: 5})
	f.enqueue(t, lua.NewTask{ID: "b", Priority: 0})
	f.enqueue(t, lua.NewTask{ID: "c", Priority: 5, Unique: "uc"})
	f.enqueue(t, lua.NewTask{ID: "d", Priority: 3, MaxRetries: 2})
	f.enqueue(t, lua.NewTask{ID: "e", Priority: 3, MaxRetries: 2, Unique: "ue"})
	// plain successes (no result, no unique key), sent in three values each, among them
	f.enqueue(t, lua.NewTask{ID: "g", Priority: 5})
	f.enqueue(t, lua.NewTask{ID: "h", Priority: 3})
	f.enqueue(t, lua.NewTask{ID: "i", Priority: 0})
	got := map[string]lua.Started{}
	for _, s := range f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10}).Started {
		got[s.ID] = s
	}
	if len(got) != 8 {
		t.Fatalf("claimed %d of 8", len(got))
	}
	if err := f.rdb.HSet(f.ctx, f.q.Task("e"), "cancel", "1").Err(); err != nil {
		t.Fatal(err)
	}
	item := func(id string, o lua.Outcome) lua.Completion {
		s := got[id]
		return lua.Completion{ID: id, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Unique: s.HasUnique, Outcome: o,
			Text: "t-" + id, RetryMS: f.now + 5000}
	}
	plain := func(id string) lua.Completion {
		s := got[id]
		return lua.Completion{ID: id, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Outcome: lua.Succeeded}
	}
	fenced := item("a", lua.Succeeded)
	fenced.Attempt = 7
	fencedPlain := plain("i")
	fencedPlain.Entry = got["b"].Entry
	items := []lua.Completion{item("b", lua.Succeeded), fenced, plain("h"), item("d", lua.Retry), item("c", lua.Succeeded),
		fencedPlain, plain("g"), item("e", lua.Retry)}
	codes, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60_000, Items: items})
	want := []lua.CompleteCode{lua.CompleteApplied, lua.CompleteFenced, lua.CompleteApplied, lua.CompleteApplied, lua.CompleteApplied,
		lua.CompleteFenced, lua.CompleteApplied, lua.CompleteApplied}
	if err != nil || fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Fatalf("codes = %v, %v; want %v", codes, err, want)
	}
	for id, st := range map[string]string{"a": "running", "b": "succeeded", "c": "succeeded", "d": "retrying", "e": "cancelled",
		"g": "succeeded", "h": "succeeded", "i": "running"} {
		if got := f.field(t, id, "status"); got != st {
			t.Errorf("%s: status %q, want %q", id, got, st)
		}
	}
	if r := f.field(t, "c", "result"); r != "t-c" {
		t.Errorf("c: result %q", r)
	}
	if at := f.field(t, "d", "run_at"); at != fmt.Sprint(f.now+5000) {
		t.Errorf("d: run_at %q, want %d", at, f.now+5000)
	}
	if s, err := f.rdb.ZScore(f.ctx, f.q.Schedule(), "d").Result(); err != nil || int64(s) != f.now+5000 {
		t.Errorf("d: schedule score %v, %v", s, err)
	}
	for _, id := range []string{"g", "h"} {
		if r, err := f.rdb.HExists(f.ctx, f.q.Task(id), "result").Result(); err != nil || r {
			t.Errorf("%s: a result field (%v, %v) after a success without one", id, r, err)
		}
	}
	for _, k := range []string{f.q.Unique("uc"), f.q.Unique("ue"), f.q.Task("b"), f.q.Task("e"), f.q.Task("g"), f.q.Task("h")} {
		if ttl := f.rdb.PTTL(f.ctx, k).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("%s: ttl %v, want the retention", k, ttl)
		}
	}
	for band, n := range map[int]int64{0: 1, 3: 0, 5: 1} {
		if l := f.rdb.XLen(f.ctx, f.q.Stream(band)).Val(); l != n {
			t.Errorf("band %d: xlen %d, want %d (only the fenced execution's entry stays)", band, l, n)
		}
		if p := f.pending(t, band); p != n {
			t.Errorf("band %d: pending %d, want %d", band, p, n)
		}
	}
}

// A call whose items all apply gets their count back, not a code each; one whose first
// unapplied item comes after applied ones, in the plain successes or in the others,
// still gets every item's own code.
func TestCompleteCodesAroundAFencedItem(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, id := range []string{"p1", "p2", "p3", "p4", "m1", "m2", "m3", "m4", "x1", "x2"} {
		f.enqueue(t, lua.NewTask{ID: id, Priority: 2})
	}
	got := map[string]lua.Started{}
	for _, s := range f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 20}).Started {
		got[s.ID] = s
	}
	if len(got) != 10 {
		t.Fatalf("claimed %d of 10", len(got))
	}
	res := func(id string) lua.Completion {
		c := done(got[id], lua.Succeeded, 0)
		c.Text = "r-" + id
		return c
	}
	fence := func(c lua.Completion) lua.Completion {
		c.Attempt += 5
		return c
	}
	applied, fenced := lua.CompleteApplied, lua.CompleteFenced
	for _, tc := range []struct {
		name  string
		items []lua.Completion
		want  []lua.CompleteCode
	}{
		{"plain, the third fenced", []lua.Completion{done(got["p1"], lua.Succeeded, 0), done(got["p2"], lua.Succeeded, 0),
			fence(done(got["p3"], lua.Succeeded, 0)), done(got["p4"], lua.Succeeded, 0)}, []lua.CompleteCode{applied, applied, fenced, applied}},
		{"others, the third fenced", []lua.Completion{res("m1"), res("m2"), fence(res("m3")), res("m4")},
			[]lua.CompleteCode{applied, applied, fenced, applied}},
		{"all applied", []lua.Completion{done(got["x1"], lua.Succeeded, 0), res("x2")}, []lua.CompleteCode{applied, applied}},
		{"all fenced (finished already)", []lua.Completion{done(got["x1"], lua.Succeeded, 0), res("x2")}, []lua.CompleteCode{fenced, fenced}},
	} {
		codes, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60_000, Items: tc.items})
		if err != nil || fmt.Sprint(codes) != fmt.Sprint(tc.want) {
			t.Fatalf("%s: codes = %v, %v; want %v", tc.name, codes, err, tc.want)
		}
	}
	for id, st := range map[string]string{"p1": "succeeded", "p2": "succeeded", "p3": "running", "p4": "succeeded",
		"m1": "succeeded", "m2": "succeeded", "m3": "running", "m4": "succeeded", "x1": "succeeded", "x2": "succeeded"} {
		if got := f.field(t, id, "status"); got != st {
			t.Errorf("%s: status %q, want %q", id, got, st)
		}
	}
	// the reply itself: the count alone when every item applies (p3, fenced above, with
	// its own attempt)
	c := done(got["p3"], lua.Succeeded, 0)
	if v, err := lua.RawReply(f.ctx, f.rdb, lua.Complete, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60_000, Items: []lua.Completion{c}}); err != nil || v != int64(1) {
		t.Fatalf("reply of a call whose one item applies: %#v, %v; want the integer 1", v, err)
	}
}

// A receipt written before receipts were made compact (whole started rows) still
// replays: the resent call gets its rows back, the current ones only.
func TestResentClaimReadsWholeRowReceipt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "o1", Payload: []byte("p1")})
	first := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.1"})
	if len(first.Started) != 1 {
		t.Fatalf("claim = %+v", first)
	}
	s := first.Started[0]
	old := `redis.call("SET", KEYS[1], cmsgpack.pack({{{ARGV[1], 0, "o1", 1, "noop", "p1", "0", "0", 0, "", ARGV[2], 0}},
		{}, {}, 0, {}, {}, 0, 0}), "PX", 60000)`
	if err := f.rdb.Eval(f.ctx, old, []string{f.q.Receipt("w.1")}, s.Entry, s.CreatedMS).Err(); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	again := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.1"})
	if fmt.Sprint(again.Started) != fmt.Sprint(first.Started) {
		t.Fatalf("replay of a whole-row receipt = %+v, want %+v", again.Started, first.Started)
	}
}

// The claim reads an entry without an attempt field as attempt 0: it starts a queued task
// at attempt 1, and is stale (absorbed, the task left waiting on its own entry) for a task
// already at a later attempt. An entry that carries its attempt is read as before.
func TestEntryWithoutAttempt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.rdb.XGroupCreateMkStream(f.ctx, f.q.Stream(3), keys.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	short, err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.q.Stream(3), Values: []any{"task", "fresh"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.HSet(f.ctx, f.q.Task("fresh"), "status", "queued", "attempt", "0", "entry", short,
		"spec", "0 5 1 0 noop", "payload", "", "failures", "0").Err(); err != nil {
		t.Fatal(err)
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if len(r.Started) != 1 || r.Started[0].ID != "fresh" || r.Started[0].Attempt != 1 || len(r.Invalid) != 0 {
		t.Fatalf("started %+v invalid %+v, want fresh at attempt 1", r.Started, r.Invalid)
	}
	if a := f.field(t, "fresh", "attempt"); a != "1" {
		t.Fatalf("record attempt = %q, want 1", a)
	}

	// a task queued for its third attempt, its own entry saying so, and a stray entry
	// without an attempt (a hand-written one) ahead of it on the band
	if err := f.rdb.HSet(f.ctx, f.q.Task("retry"), "status", "queued", "attempt", "2", "failures", "2",
		"spec", "0 5 1 0 noop", "payload", "").Err(); err != nil {
		t.Fatal(err)
	}
	stray, err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.q.Stream(3), Values: []any{"task", "retry"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	own, err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.q.Stream(3), Values: []any{"task", "retry", "attempt", "2"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.HSet(f.ctx, f.q.Task("retry"), "entry", own).Err(); err != nil {
		t.Fatal(err)
	}
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if len(r.Absorbed) != 1 || r.Absorbed[0].Entry != stray || r.Absorbed[0].Status != "queued" {
		t.Fatalf("absorbed %+v, want the stray entry %s of the queued task", r.Absorbed, stray)
	}
	if len(r.Started) != 1 || r.Started[0].Entry != own || r.Started[0].Attempt != 3 || r.Started[0].Failures != 2 {
		t.Fatalf("started %+v, want retry from its own entry %s at attempt 3", r.Started, own)
	}
	if len(r.Invalid) != 0 {
		t.Fatalf("invalid %+v, want none", r.Invalid)
	}
}
