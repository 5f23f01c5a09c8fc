package lua_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// kill makes a dead task the way a worker does (enqueue, claim, complete dead) that
// died at diedMS.
func (f *fixture) kill(t *testing.T, id, unique string, diedMS int64) {
	t.Helper()
	f.enqueue(t, lua.NewTask{ID: id, Unique: unique})
	s := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1}).Started
	if len(s) != 1 || s[0].ID != id {
		t.Fatalf("claim of %s = %+v", id, s)
	}
	ok, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: diedMS, KeepMS: 0, Items: []lua.Completion{{ID: id, Entry: s[0].Entry, Band: s[0].Band,
		Attempt: s[0].Attempt, Outcome: lua.Dead, Text: "boom"}}})

	if err != nil || ok[0] != lua.CompleteApplied {
		t.Fatalf("complete %s dead: %v %v", id, ok, err)
	}
}

func (f *fixture) trim(t *testing.T, a lua.TrimDeadArgs) lua.TrimDeadResult {
	t.Helper()
	if a.NowMS == 0 {
		a.NowMS = f.now
	}
	a.Queue = f.q
	r, err := lua.TrimDead.Run(f.ctx, f.rdb, a)
	if err != nil {
		t.Fatalf("trim dead: %v", err)
	}
	return r
}

func (f *fixture) deadIDs(t *testing.T) []string {
	t.Helper()
	ids, err := f.rdb.ZRange(f.ctx, f.q.Dead(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (f *fixture) trimmedCount(t *testing.T) string {
	t.Helper()
	v, err := f.rdb.HGet(f.ctx, f.q.Stats(), keys.StatDeadTrimmed).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

// Beyond the count bound the oldest go, records and dead-set members both; the newest
// stay, and the stats hash counts what went.
func TestTrimDeadByCount(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 8 {
		f.kill(t, fmt.Sprintf("t%d", i), "", f.now+int64(i))
	}
	r := f.trim(t, lua.TrimDeadArgs{Max: 3, Limit: 100})
	if r != (lua.TrimDeadResult{Trimmed: 5, Kept: 3}) {
		t.Fatalf("trim = %+v, want 5 trimmed, 3 kept, no more", r)
	}
	if got := strings.Join(f.deadIDs(t), ","); got != "t5,t6,t7" {
		t.Fatalf("dead set %s, want the three newest", got)
	}
	for i := range 8 {
		want := int64(0)
		if i >= 5 {
			want = 1
		}
		if n := f.rdb.Exists(f.ctx, f.q.Task(fmt.Sprintf("t%d", i))).Val(); n != want {
			t.Errorf("record t%d exists %d, want %d", i, n, want)
		}
	}
	if c := f.trimmedCount(t); c != "5" {
		t.Fatalf("dead_trimmed = %q, want 5", c)
	}
	// within the bound: nothing to do, and the count stays
	if r := f.trim(t, lua.TrimDeadArgs{Max: 3, Limit: 100}); r != (lua.TrimDeadResult{Kept: 3}) {
		t.Fatalf("second trim = %+v, want nothing trimmed", r)
	}
	if c := f.trimmedCount(t); c != "5" {
		t.Fatalf("dead_trimmed = %q after a trim of nothing, want 5", c)
	}
}

// Past the age bound they go, the one that died exactly TTL ago included; younger ones
// stay. No count bound (0) keeps any number.
func TestTrimDeadByAge(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const ttl = 10_000
	f.kill(t, "old", "", f.now-ttl-1)
	f.kill(t, "edge", "", f.now-ttl)
	f.kill(t, "young", "", f.now-ttl+1)
	f.kill(t, "new", "", f.now)
	r := f.trim(t, lua.TrimDeadArgs{TTLMS: ttl, Limit: 100})
	if r != (lua.TrimDeadResult{Trimmed: 2, Kept: 2}) {
		t.Fatalf("trim = %+v, want 2 trimmed, 2 kept", r)
	}
	if got := strings.Join(f.deadIDs(t), ","); got != "young,new" {
		t.Fatalf("dead set %s, want young,new", got)
	}
	if n := f.rdb.Exists(f.ctx, f.q.Task("old"), f.q.Task("edge")).Val(); n != 0 {
		t.Fatalf("%d trimmed records left", n)
	}
	// both bounds: the stricter one decides
	if r := f.trim(t, lua.TrimDeadArgs{TTLMS: ttl, Max: 1, Limit: 100}); r.Trimmed != 1 || r.Kept != 1 {
		t.Fatalf("trim with both bounds = %+v, want the count bound to take one more", r)
	}
}

// One call deletes at most its limit, oldest first, and says more is left; calls after
// it work the rest off.
func TestTrimDeadIsBoundedPerCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 7 {
		f.kill(t, fmt.Sprintf("t%d", i), "", f.now+int64(i))
	}
	r := f.trim(t, lua.TrimDeadArgs{Max: 1, Limit: 4})
	if r != (lua.TrimDeadResult{Trimmed: 4, Kept: 3, More: true}) {
		t.Fatalf("first trim = %+v, want 4 trimmed and more to do", r)
	}
	if got := strings.Join(f.deadIDs(t), ","); got != "t4,t5,t6" {
		t.Fatalf("dead set %s after the first call, want the oldest gone", got)
	}
	r = f.trim(t, lua.TrimDeadArgs{Max: 1, Limit: 4})
	if r != (lua.TrimDeadResult{Trimmed: 2, Kept: 1}) {
		t.Fatalf("second trim = %+v, want the last 2 and no more", r)
	}
	if c := f.trimmedCount(t); c != "6" {
		t.Fatalf("dead_trimmed = %q, want 6", c)
	}
	for _, bad := range []lua.TrimDeadArgs{{Queue: f.q, Limit: 0}, {Queue: f.q, Limit: lua.TrimDeadMaxLimit + 1}, {Queue: f.q, Limit: 1, Max: -1}, {Queue: f.q, Limit: 1, TTLMS: -1}} {
		if _, err := lua.TrimDead.Run(f.ctx, f.rdb, bad); err == nil {
			t.Errorf("trim with %+v: no error", bad)
		}
	}
}

// A trimmed task's unique key goes only while it names that task: a key passed on to
// a new task (reuse), or naming another one, stays with its holder.
func TestTrimDeadUniqueKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.kill(t, "own", "k-own", f.now-3)       // holds its key: the key goes with it
	f.kill(t, "passed", "k-passed", f.now-2) // its key passes on to "heir"
	f.kill(t, "other", "k-other", f.now-1)   // its key was made to name "x"
	f.enqueue(t, lua.NewTask{ID: "heir", Unique: "k-passed", ReuseUnique: true})
	f.rdb.Set(f.ctx, f.q.Unique("k-other"), "x", 0)
	if r := f.trim(t, lua.TrimDeadArgs{Max: 0, TTLMS: 1, Limit: 100}); r.Trimmed != 3 {
		t.Fatalf("trim = %+v, want all 3 dead tasks", r)
	}
	if n := f.rdb.Exists(f.ctx, f.q.Unique("k-own")).Val(); n != 0 {
		t.Fatal("the unique key of the trimmed task that held it is left")
	}
	if got := f.rdb.Get(f.ctx, f.q.Unique("k-passed")).Val(); got != "heir" {
		t.Fatalf("the passed-on key names %q, want heir", got)
	}
	if got := f.rdb.Get(f.ctx, f.q.Unique("k-other")).Val(); got != "x" {
		t.Fatalf("the key naming another task names %q, want x", got)
	}
	// the freed key takes a new task; the passed one is still taken
	if _, created, err := f.enqueueOne(lua.NewTask{ID: "n1", Function: "noop", Unique: "k-own"}); err != nil || !created {
		t.Fatalf("enqueue under the freed key: created=%v err=%v", created, err)
	}
	if id, created, _ := f.enqueueOne(lua.NewTask{ID: "n2", Function: "noop", Unique: "k-passed"}); created || id != "heir" {
		t.Fatalf("enqueue under the heir's key: created=%v holder %q, want heir's", created, id)
	}
}

// Invalid-entry records are dead records: trimmed like the others.
func TestTrimDeadInvalidRecords(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "seed"}) // creates the band and its group
	for _, vals := range [][]any{{"foo", "bar"}, {"task", "nosuch", "attempt", 0}} {
		if err := f.rdb.XAdd(f.ctx, &redis.XAddArgs{Stream: f.q.Stream(0), Values: vals}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if len(r.Invalid) != 2 {
		t.Fatalf("invalid = %+v, want 2", r.Invalid)
	}
	if tr := f.trim(t, lua.TrimDeadArgs{NowMS: f.now + 1, TTLMS: 1, Limit: 100}); tr.Trimmed != 2 || tr.Kept != 0 {
		t.Fatalf("trim = %+v, want both invalid records", tr)
	}
	for _, in := range r.Invalid {
		if !strings.HasPrefix(in.DeadID, "invalid-") || f.rdb.Exists(f.ctx, f.q.Task(in.DeadID)).Val() != 0 {
			t.Fatalf("invalid record %s left", in.DeadID)
		}
	}
}

// A dead-set member whose task lives again, or whose key holds another type, loses its
// member only: the record or the foreign key stays.
func TestTrimDeadLeavesWhatIsNotADeadRecord(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.kill(t, "alive", "k", f.now-2)
	f.rdb.HSet(f.ctx, f.q.Task("alive"), "status", "queued")
	f.rdb.Set(f.ctx, f.q.Task("str"), "not a hash", 0)
	f.rdb.ZAdd(f.ctx, f.q.Dead(), redis.Z{Score: float64(f.now - 1), Member: "str"}, redis.Z{Score: float64(f.now - 1), Member: "gone"})
	if r := f.trim(t, lua.TrimDeadArgs{NowMS: f.now + 1, TTLMS: 1, Limit: 100}); r.Trimmed != 3 || r.Kept != 0 {
		t.Fatalf("trim = %+v, want all 3 members", r)
	}
	if st := f.field(t, "alive", "status"); st != "queued" {
		t.Fatalf("the live task's record: status %q, want it kept", st)
	}
	if f.rdb.Get(f.ctx, f.q.Unique("k")).Val() != "alive" {
		t.Fatal("the live task's unique key was deleted")
	}
	if f.rdb.Get(f.ctx, f.q.Task("str")).Val() != "not a hash" {
		t.Fatal("the key of another type was deleted")
	}
}

// A dead set or stats hash of another type fails the call with a key error and nothing
// changed; Diagnose names the key.
func TestTrimDeadWrongTypeKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		key  func(keys.Queue) string
		want string
	}{
		{"dead set", keys.Queue.Dead, "zset"},
		{"stats hash", keys.Queue.Stats, "hash"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.kill(t, "a", "", f.now-5)
			key := c.key(f.q)
			f.rdb.Del(f.ctx, key)
			f.rdb.Set(f.ctx, key, "x", 0)
			_, err := lua.TrimDead.Run(f.ctx, f.rdb, lua.TrimDeadArgs{Queue: f.q, NowMS: f.now, TTLMS: 1, Limit: 10})
			if !lua.IsKeyError(err) {
				t.Fatalf("trim over a string %s: %v, want a key error", c.name, err)
			}
			var qe *lua.QueueError
			if d := lua.Diagnose(f.ctx, f.rdb, f.q, "", "trim", err); !errors.As(d, &qe) || len(qe.Wrong) != 1 ||
				qe.Wrong[0].Key != key || qe.Wrong[0].Want != c.want {
				t.Fatalf("diagnosis = %v, want %s named", d, key)
			}
			if f.rdb.Exists(f.ctx, f.q.Task("a")).Val() != 1 {
				t.Fatal("the failed call deleted the record")
			}
		})
	}
}

// A dead task the trim keeps is requeued as before; one it trimmed is reported missing.
func TestRequeueAfterTrim(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.kill(t, "old", "", f.now-2)
	f.kill(t, "kept", "", f.now-1)
	if r := f.trim(t, lua.TrimDeadArgs{Max: 1, Limit: 10}); r.Trimmed != 1 {
		t.Fatalf("trim = %+v, want one", r)
	}
	if _, err := lua.Requeue.Run(f.ctx, f.rdb, lua.RequeueArgs{Queue: f.q, ID: "kept", NowMS: f.now}); err != nil {
		t.Fatalf("requeue of a kept dead task: %v", err)
	}
	if s := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1}).Started; len(s) != 1 || s[0].ID != "kept" {
		t.Fatalf("claim after requeue = %+v, want kept", s)
	}
	if _, err := lua.Requeue.Run(f.ctx, f.rdb, lua.RequeueArgs{Queue: f.q, ID: "old", NowMS: f.now}); !errors.Is(err, lua.ErrNotFound) {
		t.Fatalf("requeue of a trimmed task: %v, want ErrNotFound", err)
	}
	if n := f.rdb.ZCard(f.ctx, f.q.Dead()).Val(); n != 0 {
		t.Fatalf("dead set holds %d after the requeue, want 0", n)
	}
}

// At maxmemory Redis refuses every write, the enqueue's included, and the dead tasks
// filling it are what the trim deletes: it runs there (allow-oom) and frees the memory,
// and the enqueue works again.
func TestTrimDeadRunsOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Args: []string{"--maxmemory-policy", "noeviction"}})
	f := setup(t)
	f.rdb = srv.Client(t)
	payload := []byte(strings.Repeat("x", 64<<10))
	for i := range 40 {
		id := fmt.Sprintf("t%d", i)
		f.enqueue(t, lua.NewTask{ID: id, Payload: payload})
		s := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1}).Started
		if _, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now + int64(i), KeepMS: 0, Items: []lua.Completion{{ID: id, Entry: s[0].Entry,
			Attempt: s[0].Attempt, Outcome: lua.Dead, Text: "boom"}}}); err != nil {
			t.Fatal(err)
		}
	}
	info := f.rdb.Info(f.ctx, "memory").Val()
	var mem int64
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			_, _ = fmt.Sscan(v, &mem)
		}
	}
	if err := f.rdb.ConfigSet(f.ctx, "maxmemory", fmt.Sprint(mem-(256<<10))).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.enqueueOne(lua.NewTask{ID: "new", Function: "noop"}); !redis.HasErrorPrefix(err, "OOM") {
		t.Fatalf("enqueue at maxmemory: %v, want OOM", err)
	}
	if r := f.trim(t, lua.TrimDeadArgs{Max: 10, Limit: 100}); r.Trimmed != 30 {
		t.Fatalf("trim at maxmemory = %+v, want 30 trimmed", r)
	}
	if _, _, err := f.enqueueOne(lua.NewTask{ID: "new", Function: "noop"}); err != nil {
		t.Fatalf("enqueue after the trim: %v", err)
	}
}

// On Redis Cluster the script's keys (declared and built) are in one slot: it runs.
func TestTrimDeadOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 1)
	f := setup(t)
	rdb := cl.Client(t)
	f.kill(t, "a", "k", f.now-1) // on the shared server: copy the keys over
	for _, k := range []string{f.q.Dead(), f.q.Task("a"), f.q.Unique("k")} {
		dump := f.rdb.Dump(f.ctx, k).Val()
		if err := rdb.Restore(f.ctx, k, 0, dump).Err(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := lua.TrimDead.Run(f.ctx, rdb, lua.TrimDeadArgs{Queue: f.q, NowMS: f.now, TTLMS: 1, Limit: 10})
	if err != nil || r.Trimmed != 1 {
		t.Fatalf("trim on a cluster = %+v, %v", r, err)
	}
	if n := rdb.Exists(f.ctx, f.q.Task("a")).Val() + rdb.Exists(f.ctx, f.q.Unique("k")).Val(); n != 0 {
		t.Fatalf("%d keys left on the cluster", n)
	}
}
