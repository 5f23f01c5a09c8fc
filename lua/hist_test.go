package lua_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// start enqueues and claims the tasks ids (band 0) and returns their starts by id.
func (f *fixture) start(t *testing.T, ids ...string) map[string]lua.Started {
	t.Helper()
	for _, id := range ids {
		f.enqueue(t, lua.NewTask{ID: id})
	}
	out := map[string]lua.Started{}
	for len(out) < len(ids) {
		r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 32})
		if len(r.Started) == 0 {
			t.Fatalf("claim started nothing; have %d of %d", len(out), len(ids))
		}
		for _, s := range r.Started {
			out[s.ID] = s
		}
	}
	return out
}

func done(s lua.Started, o lua.Outcome, retryMS int64) lua.Completion {
	return lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Outcome: o, Text: "x", RetryMS: retryMS}
}

func (f *fixture) complete(t *testing.T, now int64, items ...lua.Completion) []lua.CompleteCode {
	t.Helper()
	r, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: now, Items: items})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	return r
}

func (f *fixture) zset(t *testing.T, key string) []redis.Z {
	t.Helper()
	z, err := f.rdb.ZRangeWithScores(f.ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatalf("zrange %s: %v", key, err)
	}
	return z
}

// One completion call counts its applied outcomes in the minute's throughput hash (the
// failed ones, retry or dead, twice: processed and failed), files its successes in the
// succeeded zset and its retries in the retrying zset; a fenced completion counts
// nowhere.
func TestCompleteCountsThroughputAndIndexes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.start(t, "a", "b", "c", "d", "e")
	now := int64(1_800_000_123_456) // minute 30 000 002 → hour 500 000, minute 2 of it
	stale := done(s["e"], lua.Succeeded, 0)
	stale.Attempt = 9
	codes := f.complete(t, now, done(s["a"], lua.Succeeded, 0), done(s["b"], lua.Succeeded, 0),
		done(s["c"], lua.Retry, now+5000), done(s["d"], lua.Dead, 0), stale)
	if want := []lua.CompleteCode{1, 1, 1, 1, 0}; !slices.Equal(codes, want) {
		t.Fatalf("codes = %v, want %v", codes, want)
	}
	hour, pf, ff := keys.ThroughputFields(now)
	if hour != 500000 || pf != "p2" || ff != "f2" {
		t.Fatalf("ThroughputFields = %d %s %s, want 500000 p2 f2", hour, pf, ff)
	}
	h := f.rdb.HGetAll(f.ctx, f.q.Throughput(hour)).Val()
	if h[pf] != "4" || h[ff] != "2" || len(h) != 2 {
		t.Fatalf("throughput hash = %v, want p2=4 f2=2", h)
	}
	ttl := f.rdb.PTTL(f.ctx, f.q.Throughput(hour)).Val()
	if ttl <= 0 || ttl > lua.ThroughputTTL {
		t.Fatalf("throughput hash ttl = %v, want within (0, %v]", ttl, lua.ThroughputTTL)
	}
	// a second call in the same minute adds to the fields
	s2 := f.start(t, "g")
	f.complete(t, now+1000, done(s2["g"], lua.Dead, 0))
	h = f.rdb.HGetAll(f.ctx, f.q.Throughput(hour)).Val()
	if h[pf] != "5" || h[ff] != "3" {
		t.Fatalf("throughput hash after a second call = %v, want p2=5 f2=3", h)
	}
	succ := f.rdb.LRange(f.ctx, f.q.Succeeded(), 0, -1).Val()
	if want := []string{fmt.Sprint(now, " a b")}; !slices.Equal(succ, want) {
		t.Fatalf("succeeded list = %q, want %q (one entry for the call's successes)", succ, want)
	}
	retry := f.zset(t, f.q.Retrying())
	if len(retry) != 1 || retry[0].Member != "c" || retry[0].Score != float64(now+5000) {
		t.Fatalf("retrying zset = %v, want c at its retry time", retry)
	}
}

// The succeeded list keeps about the newest lua.SucceededKept: a call of n successes
// cuts it to ceil(SucceededKept / n) entries, its own first.
func TestCompleteCapsSucceeded(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			old := make([]any, lua.SucceededKept)
			for i := range old {
				old[i] = fmt.Sprintf("%d old-%04d", f.now-100_000+int64(i), i) // LPUSH: the last is the newest
			}
			if err := f.rdb.LPush(f.ctx, f.q.Succeeded(), old...).Err(); err != nil {
				t.Fatal(err)
			}
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprint("n", i)
			}
			s := f.start(t, ids...)
			var items []lua.Completion
			for _, id := range ids {
				items = append(items, done(s[id], lua.Succeeded, 0))
			}
			f.complete(t, f.now, items...)
			l := f.rdb.LRange(f.ctx, f.q.Succeeded(), 0, -1).Val()
			kept := (lua.SucceededKept + n - 1) / n
			if len(l) != kept {
				t.Fatalf("succeeded list holds %d entries, want %d", len(l), kept)
			}
			// the oldest kept: old entries kept-1 back from the newest (old-0999)
			last := lua.SucceededKept - kept + 1
			want := fmt.Sprintf("%d old-%04d", f.now-100_000+int64(last), last)
			if l[0] != fmt.Sprint(f.now, " ", strings.Join(ids, " ")) || l[len(l)-1] != want {
				t.Fatalf("succeeded list runs %q … %q, want the call's entry first and %q last", l[0], l[len(l)-1], want)
			}
		})
	}
}

// A throughput hash, succeeded zset or retrying zset of another type is skipped: the
// outcomes are written all the same.
func TestCompleteBookkeepingKeysOfWrongType(t *testing.T) {
	t.Parallel()
	f := setup(t)
	hour, _, _ := keys.ThroughputFields(f.now)
	for _, k := range []string{f.q.Throughput(hour), f.q.Succeeded(), f.q.Retrying()} {
		if err := f.rdb.Set(f.ctx, k, "not mine", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	s := f.start(t, "a", "b")
	codes := f.complete(t, f.now, done(s["a"], lua.Succeeded, 0), done(s["b"], lua.Retry, f.now+10))
	if !slices.Equal(codes, []lua.CompleteCode{1, 1}) {
		t.Fatalf("codes = %v, want both applied", codes)
	}
	if st := f.field(t, "a", "status"); st != "succeeded" {
		t.Fatalf("a: status %q, want succeeded", st)
	}
	if st := f.field(t, "b", "status"); st != "retrying" {
		t.Fatalf("b: status %q, want retrying", st)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Schedule()).Val(); n != 1 {
		t.Fatalf("schedule holds %d, want the retry", n)
	}
	for _, k := range []string{f.q.Throughput(hour), f.q.Succeeded(), f.q.Retrying()} {
		if v := f.rdb.Get(f.ctx, k).Val(); v != "not mine" {
			t.Fatalf("%s = %q, want it untouched", k, v)
		}
	}
}

// retried files task id as a retry due at due.
func (f *fixture) retried(t *testing.T, id string, due int64) {
	t.Helper()
	s := f.start(t, id)
	if c := f.complete(t, f.now, done(s[id], lua.Retry, due)); c[0] != lua.CompleteApplied {
		t.Fatalf("retry %s: %v", id, c)
	}
}

func (f *fixture) retrying(t *testing.T) []string {
	t.Helper()
	return f.rdb.ZRange(f.ctx, f.q.Retrying(), 0, -1).Val()
}

// A retry leaves the retrying zset when the scheduler queues it, when it is cancelled
// and when it is run now; a delayed task is never in it.
func TestRetryingSetFollowsTheRetries(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.retried(t, "sched", f.now+10)
	f.retried(t, "cancel", f.now+1_000_000)
	f.retried(t, "run", f.now+1_000_000)
	f.enqueue(t, lua.NewTask{ID: "later", RunAtMS: f.now + 1_000_000})
	if got := f.retrying(t); !slices.Equal(got, []string{"sched", "cancel", "run"}) {
		t.Fatalf("retrying = %v, want the three retries", got)
	}
	sc, err := lua.SchedClaim.Run(f.ctx, f.rdb, lua.SchedClaimArgs{Queue: f.q, NowMS: f.now + 10, Limit: 10})
	if err != nil || !slices.Equal(sc.Due, []string{"sched"}) {
		t.Fatalf("sched claim = %+v, %v", sc, err)
	}
	if _, err := lua.SchedEnqueue.Run(f.ctx, f.rdb, lua.SchedEnqueueArgs{Queue: f.q, NowMS: f.now + 10, IDs: sc.Due}); err != nil {
		t.Fatal(err)
	}
	if got := f.retrying(t); slices.Contains(got, "sched") || len(got) != 2 {
		t.Fatalf("retrying after the scheduler queued one = %v", got)
	}
	if _, err := lua.Cancel.Run(f.ctx, f.rdb, lua.CancelArgs{Queue: f.q, ID: "cancel", NowMS: f.now}); err != nil {
		t.Fatal(err)
	}
	if _, err := lua.RunNow.Run(f.ctx, f.rdb, lua.RunNowArgs{Queue: f.q, ID: "run", NowMS: f.now}); err != nil {
		t.Fatal(err)
	}
	if got := f.retrying(t); len(got) != 0 {
		t.Fatalf("retrying at the end = %v, want none", got)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Schedule()).Val(); n != 1 {
		t.Fatalf("schedule holds %d, want the delayed task alone", n)
	}
}

// Run now queues a scheduled or a retrying task at once, and a scheduler pass that
// claimed it before does not queue it a second time: it starts once.
func TestRunNow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "later", Priority: 4, RunAtMS: f.now + 1_000_000})
	f.enqueue(t, lua.NewTask{ID: "due", RunAtMS: f.now + 5})
	// the scheduler claims "due", then run-now overtakes its enqueue
	sc, err := lua.SchedClaim.Run(f.ctx, f.rdb, lua.SchedClaimArgs{Queue: f.q, NowMS: f.now + 5, Limit: 10})
	if err != nil || !slices.Equal(sc.Due, []string{"due"}) {
		t.Fatalf("sched claim = %+v, %v", sc, err)
	}
	for _, id := range []string{"later", "due"} {
		if _, err := lua.RunNow.Run(f.ctx, f.rdb, lua.RunNowArgs{Queue: f.q, ID: id, NowMS: f.now}); err != nil {
			t.Fatalf("run now %s: %v", id, err)
		}
		if st := f.field(t, id, "status"); st != "queued" {
			t.Fatalf("%s: status %q, want queued", id, st)
		}
	}
	r, err := lua.SchedEnqueue.Run(f.ctx, f.rdb, lua.SchedEnqueueArgs{Queue: f.q, NowMS: f.now + 5, IDs: sc.Due})
	if err != nil || len(r.Enqueued) != 0 || !slices.Equal(r.Dropped, []string{"due"}) {
		t.Fatalf("sched enqueue after run now = %+v, %v; want the claim dropped", r, err)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Schedule()).Val() + f.rdb.ZCard(f.ctx, f.q.Claimed()).Val(); n != 0 {
		t.Fatalf("schedule and claimed hold %d, want none", n)
	}
	var started []string
	for range 3 {
		for _, s := range f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 32}).Started {
			started = append(started, s.ID)
			if s.ID == "later" && s.Band != 4 {
				t.Fatalf("later ran from band %d, want its priority 4", s.Band)
			}
		}
	}
	slices.Sort(started)
	if !slices.Equal(started, []string{"due", "later"}) {
		t.Fatalf("started %v, want due and later once each", started)
	}
	// now they run: a second run-now is refused
	_, err = lua.RunNow.Run(f.ctx, f.rdb, lua.RunNowArgs{Queue: f.q, ID: "due", NowMS: f.now})
	if !errors.Is(err, lua.ErrWrongStatus) {
		t.Fatalf("run now of a running task: %v, want ErrWrongStatus", err)
	}
	_, err = lua.RunNow.Run(f.ctx, f.rdb, lua.RunNowArgs{Queue: f.q, ID: "nope", NowMS: f.now})
	if !errors.Is(err, lua.ErrNotFound) {
		t.Fatalf("run now of no task: %v, want ErrNotFound", err)
	}
}

// A stream of another type refuses run-now's XADD: nothing is written, the task stays
// scheduled on the schedule. A task key of another type is an error too.
func TestRunNowWrongTypeKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "later", Priority: 3, RunAtMS: f.now + 1_000_000})
	f.rdb.Set(f.ctx, f.q.Stream(3), "not a stream", 0)
	_, err := lua.RunNow.Run(f.ctx, f.rdb, lua.RunNowArgs{Queue: f.q, ID: "later", NowMS: f.now})
	if err == nil || !redis.HasErrorPrefix(errors.Unwrap(err), "WRONGTYPE") {
		t.Fatalf("run now into a string: %v, want WRONGTYPE", err)
	}
	if st := f.field(t, "later", "status"); st != "scheduled" {
		t.Fatalf("status %q, want scheduled", st)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Schedule()).Val(); n != 1 {
		t.Fatalf("schedule holds %d, want the task", n)
	}
	f.rdb.Set(f.ctx, f.q.Task("str"), "x", 0)
	if _, err := lua.RunNow.Run(f.ctx, f.rdb, lua.RunNowArgs{Queue: f.q, ID: "str", NowMS: f.now}); err == nil {
		t.Fatal("run now of a string key: no error")
	}
}

// deadRecord writes a dead task as complete.lua leaves one, without running it: fields
// are the record's (no payload field at all: a payload-less record).
func (f *fixture) deadRecord(t *testing.T, id string, diedMS int64, fields ...any) {
	t.Helper()
	base := []any{"status", "dead", "attempt", 1, "entry", "1-1", "function", "noop", "priority", 0,
		"failures", 4, "max_retries", 3, "id", id, "queue", f.q.Name, "finished_at", diedMS}
	if _, err := f.rdb.TxPipelined(f.ctx, func(p redis.Pipeliner) error {
		p.HSet(f.ctx, f.q.Task(id), append(base, fields...)...)
		p.ZAdd(f.ctx, f.q.Dead(), redis.Z{Score: float64(diedMS), Member: id})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestDeadRequeueByID(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.deadRecord(t, "d1", f.now-10, "priority", 6)
	f.deadRecord(t, "d2", f.now-9)
	f.deadRecord(t, "invalid-1-1", f.now-8, "function", "")
	f.rdb.Set(f.ctx, f.q.Task("str"), "x", 0)
	f.rdb.ZAdd(f.ctx, f.q.Dead(), redis.Z{Score: 1, Member: "str"}, redis.Z{Score: 2, Member: "gone"})
	f.start(t, "running")
	r, err := lua.DeadRequeue.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, NowMS: f.now,
		IDs: []string{"d1", "d2", "invalid-1-1", "str", "gone", "running", "never"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Done != 2 || !slices.Equal(r.NotFound, []string{"str", "gone", "never"}) || !slices.Equal(r.WrongState, []string{"invalid-1-1", "running"}) || r.Examined != 7 || r.Kept != 0 {
		t.Fatalf("requeue = %+v", r)
	}
	if got := f.deadIDs(t); !slices.Equal(got, []string{"invalid-1-1"}) {
		t.Fatalf("dead set = %v, want the invalid-entry record alone", got)
	}
	if v := f.rdb.Get(f.ctx, f.q.Task("str")).Val(); v != "x" {
		t.Fatalf("string under a task's name = %q, want it untouched", v)
	}
	for _, id := range []string{"d1", "d2"} {
		if st, fl, fin := f.field(t, id, "status"), f.field(t, id, "failures"), f.field(t, id, "finished_at"); st != "queued" || fl != "0" || fin != "" {
			t.Fatalf("%s: status %q failures %q finished_at %q; want queued, 0, none", id, st, fl, fin)
		}
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(6)).Val(); n != 1 {
		t.Fatalf("band 6 holds %d entries, want d1's", n)
	}
	// the payload-less records run, with an empty payload
	got := map[string]lua.Started{}
	for _, s := range f.claim(t, lua.ClaimArgs{Consumer: "w2", Want: 32}).Started {
		got[s.ID] = s
	}
	if len(got) != 2 || got["d1"].Attempt != 2 || got["d2"].Payload != "" || got["d2"].Failures != 0 {
		t.Fatalf("claim after requeue = %+v", got)
	}
}

// A requeue racing the worker that runs the task: while it runs, the requeue is refused
// and the worker's outcome applies; once it is dead, the requeue starts a new attempt and
// the old execution's late completion is fenced. Never two runs of one attempt.
func TestDeadRequeueRacesARunningTask(t *testing.T) {
	t.Parallel()
	f := setup(t)
	s := f.start(t, "t")["t"]
	r, err := lua.DeadRequeue.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, NowMS: f.now, IDs: []string{"t"}})
	if err != nil || r.Done != 0 || !slices.Equal(r.WrongState, []string{"t"}) {
		t.Fatalf("requeue of a running task = %+v, %v", r, err)
	}
	if c := f.complete(t, f.now, done(s, lua.Dead, 0)); c[0] != lua.CompleteApplied {
		t.Fatalf("the worker's outcome: %v", c)
	}
	// two requeue-all calls race: the task is requeued once
	var wg sync.WaitGroup
	res := make([]lua.DeadResult, 2)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			res[i], err = lua.DeadRequeue.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, NowMS: f.now, All: true, Limit: 10, BeforeMS: f.now})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if res[0].Done+res[1].Done != 1 || f.rdb.XLen(f.ctx, f.q.Stream(0)).Val() != 1 {
		t.Fatalf("racing requeues = %+v; xlen %d; want one requeue, one entry", res, f.rdb.XLen(f.ctx, f.q.Stream(0)).Val())
	}
	again := f.claim(t, lua.ClaimArgs{Consumer: "w2", Want: 32}).Started
	if len(again) != 1 || again[0].Attempt != s.Attempt+1 {
		t.Fatalf("claim after requeue = %+v", again)
	}
	if c := f.complete(t, f.now, done(s, lua.Succeeded, 0)); c[0] != lua.CompleteFenced {
		t.Fatalf("the old execution's late completion: %v, want fenced", c)
	}
	if st := f.field(t, "t", "status"); st != "running" {
		t.Fatalf("status %q, want running (the new attempt)", st)
	}
}

// All proceeds in bounded calls from an offset past the records it must keep, and only
// over the tasks dead at or before BeforeMS.
func TestDeadRequeueAllInBatches(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 7 {
		f.deadRecord(t, fmt.Sprintf("d%d", i), f.now-100+int64(i))
	}
	f.deadRecord(t, "invalid-1-1", f.now-97, "function", "") // among them, kept
	f.deadRecord(t, "after", f.now+1)                        // died after the call began
	var offset int64
	var total int64
	calls := 0
	for {
		r, err := lua.DeadRequeue.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, NowMS: f.now, All: true, Limit: 3, Offset: offset, BeforeMS: f.now})
		if err != nil {
			t.Fatal(err)
		}
		calls++
		total += r.Done
		offset += r.Kept
		if r.Examined < 3 {
			break
		}
		if calls > 10 {
			t.Fatal("requeue all does not end")
		}
	}
	if total != 7 || calls != 3 {
		t.Fatalf("requeued %d in %d calls, want 7 in 3", total, calls)
	}
	if got := f.deadIDs(t); !slices.Equal(got, []string{"invalid-1-1", "after"}) {
		t.Fatalf("dead set = %v", got)
	}
}

// A stream of another type stops the call at the task that needs it; what was requeued
// before is counted, and the task stays dead.
func TestDeadRequeueStopsAtAStreamOfWrongType(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.deadRecord(t, "ok", f.now-2)
	f.deadRecord(t, "blocked", f.now-1, "priority", 5)
	f.rdb.Set(f.ctx, f.q.Stream(5), "x", 0)
	r, err := lua.DeadRequeue.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, NowMS: f.now, IDs: []string{"ok", "blocked"}})
	if err == nil || r.Done != 1 || r.Examined != 1 {
		t.Fatalf("requeue = %+v, %v; want one done and an error", r, err)
	}
	if !redis.HasErrorPrefix(errors.Unwrap(err), "WRONGTYPE") {
		t.Fatalf("error %v does not carry the WRONGTYPE reply", err)
	}
	if st := f.field(t, "blocked", "status"); st != "dead" {
		t.Fatalf("blocked: %q, want dead", st)
	}
	// a dead set of another type fails before anything
	f.rdb.Del(f.ctx, f.q.Dead())
	f.rdb.Set(f.ctx, f.q.Dead(), "x", 0)
	if _, err := lua.DeadRequeue.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, NowMS: f.now, IDs: []string{"blocked"}}); err == nil {
		t.Fatal("requeue with a string dead set: no error")
	}
	if _, err := lua.DeadDelete.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, IDs: []string{"blocked"}}); err == nil {
		t.Fatal("delete with a string dead set: no error")
	}
	if n := f.rdb.Exists(f.ctx, f.q.Task("blocked")).Val(); n != 1 {
		t.Fatal("the record went")
	}
}

func TestDeadBatchBound(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ids := make([]string, lua.DeadBatch+1)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	for _, a := range []lua.DeadArgs{{IDs: ids}, {All: true, Limit: lua.DeadBatch + 1}, {All: true, Limit: 0}, {All: true, Limit: 1, IDs: ids[:1]}} {
		a.Queue = f.q
		if _, err := lua.DeadRequeue.Run(f.ctx, f.rdb, a); !errors.Is(err, lua.ErrDeadBatch) {
			t.Errorf("requeue %d ids, all %v limit %d: %v, want ErrDeadBatch", len(a.IDs), a.All, a.Limit, err)
		}
		if _, err := lua.DeadDelete.Run(f.ctx, f.rdb, a); !errors.Is(err, lua.ErrDeadBatch) {
			t.Errorf("delete %d ids, all %v limit %d: %v, want ErrDeadBatch", len(a.IDs), a.All, a.Limit, err)
		}
	}
}

// Delete takes a dead task whole (record, member, the unique key that names it) and
// nothing else: a live task is not found, and a unique key that passed on stays.
func TestDeadDelete(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.deadRecord(t, "u1", f.now-5, "unique", "k1")
	f.rdb.Set(f.ctx, f.q.Unique("k1"), "u1", 0)
	f.deadRecord(t, "u2", f.now-4, "unique", "k2")
	f.rdb.Set(f.ctx, f.q.Unique("k2"), "someone-else", 0)
	f.deadRecord(t, "plain", f.now-3)
	f.rdb.ZAdd(f.ctx, f.q.Dead(), redis.Z{Score: 1, Member: "gone"})
	f.rdb.Set(f.ctx, f.q.Task("str"), "x", 0)
	f.start(t, "running")
	r, err := lua.DeadDelete.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, IDs: []string{"u1", "u2", "gone", "str", "running", "never"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Done != 2 || !slices.Equal(r.NotFound, []string{"gone", "str", "running", "never"}) {
		t.Fatalf("delete = %+v", r)
	}
	if n := f.rdb.Exists(f.ctx, f.q.Task("u1"), f.q.Task("u2"), f.q.Unique("k1")).Val(); n != 0 {
		t.Fatalf("%d of the deleted keys remain", n)
	}
	if v := f.rdb.Get(f.ctx, f.q.Unique("k2")).Val(); v != "someone-else" {
		t.Fatalf("a unique key naming another task: %q, want it kept", v)
	}
	if st := f.field(t, "running", "status"); st != "running" {
		t.Fatalf("running task: %q", st)
	}
	if v := f.rdb.Get(f.ctx, f.q.Task("str")).Val(); v != "x" {
		t.Fatal("a string under a task's name was touched")
	}
	if got := f.deadIDs(t); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("dead set = %v, want plain alone", got)
	}
	f.deadRecord(t, "after", f.now+1)
	r, err = lua.DeadDelete.Run(f.ctx, f.rdb, lua.DeadArgs{Queue: f.q, All: true, Limit: 10, BeforeMS: f.now})
	if err != nil || r.Done != 1 || r.Examined != 1 {
		t.Fatalf("delete all = %+v, %v", r, err)
	}
	if got := f.deadIDs(t); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("dead set = %v, want the task that died after the call began", got)
	}
}
