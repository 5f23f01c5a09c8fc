package lua_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// plainDone is the plain success of started executions, carrying their claim's epoch
// as the worker's completer sends it.
func plainDone(ss ...lua.Started) []lua.Completion {
	out := make([]lua.Completion, len(ss))
	for i, s := range ss {
		out[i] = lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt,
			Outcome: lua.Succeeded, Epoch: s.Epoch}
	}
	return out
}

// setupOwnServer is setup on a redis-server of the test's own, for counts the server
// keeps for all its clients (INFO commandstats) or its ACL.
func setupOwnServer(t *testing.T) (*fixture, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	f := setup(t)
	f.rdb = srv.Client(t)
	return f, srv
}

func (f *fixture) completeAs(t *testing.T, consumer string, items []lua.Completion) []lua.CompleteCode {
	t.Helper()
	codes, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60_000,
		Items: items, Consumer: consumer})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	return codes
}

// commandCalls is how many times the server ran cmd (INFO commandstats, lowercase).
func commandCalls(t *testing.T, rdb *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// The claim replies the queue's fence epoch with every start ("0" before any reclaim),
// and a completion carrying it records plain successes without reading their records:
// no HMGET at all, on a server of this test's own so the count is exact. The records
// say succeeded, expire, and the stream keeps nothing.
func TestCompleteShortPathReadsNoRecord(t *testing.T) {
	t.Parallel()
	f, _ := setupOwnServer(t)
	for i := range 6 {
		f.enqueue(t, lua.NewTask{ID: "s" + strconv.Itoa(i), Priority: i % 2 * 5})
	}
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 10})
	if len(r.Started) != 6 || r.Epoch != "0" {
		t.Fatalf("claim = %d started, epoch %q; want 6 at epoch \"0\"", len(r.Started), r.Epoch)
	}
	for _, s := range r.Started {
		if s.Epoch != "0" {
			t.Fatalf("start %s carries epoch %q", s.ID, s.Epoch)
		}
	}
	before := commandCalls(t, f.rdb, "hmget")
	codes := f.completeAs(t, "w", plainDone(r.Started...))
	if after := commandCalls(t, f.rdb, "hmget"); after != before {
		t.Fatalf("the completion read records: %d HMGETs", after-before)
	}
	for i, c := range codes {
		if c != lua.CompleteApplied {
			t.Fatalf("item %d: %v", i, c)
		}
	}
	for _, s := range r.Started {
		if st := f.field(t, s.ID, "status"); st != "succeeded" {
			t.Errorf("%s: status %q", s.ID, st)
		}
		if ttl := f.rdb.PTTL(f.ctx, f.q.Task(s.ID)).Val(); ttl <= 0 {
			t.Errorf("%s: no retention (pttl %v)", s.ID, ttl)
		}
	}
	for _, band := range []int{0, 5} {
		if n := f.rdb.XLen(f.ctx, f.q.Stream(band)).Val(); n != 0 || f.pending(t, band) != 0 {
			t.Errorf("band %d: xlen %d pending %d, want 0 and 0", band, n, f.pending(t, band))
		}
	}
	// the same batch sent again (its first reply lost): every entry acked already, the
	// long path reads each record and fences them all; nothing changes
	before = commandCalls(t, f.rdb, "hmget")
	for i, c := range f.completeAs(t, "w", plainDone(r.Started...)) {
		if c != lua.CompleteFenced {
			t.Fatalf("resent item %d: %v, want fenced", i, c)
		}
	}
	if n := commandCalls(t, f.rdb, "hmget") - before; n != 6 {
		t.Fatalf("resent batch: %d HMGETs, want 6 (the long path)", n)
	}
}

// A reclaim raises the epoch: the silent worker's completion, whose entry is still
// pending (now for the reclaimer), takes the long path and is fenced; the reclaimer's
// execution keeps its record and its pending entry, and its own completion, at the new
// epoch, applies. Without the raise the old worker's XACK would ack the reclaimer's
// entry and its success overwrite the running record.
func TestReclaimRaisesEpochAndFencesTheOldExecution(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "r1", Priority: 3})
	f.enqueue(t, lua.NewTask{ID: "r2", Priority: 3})
	old := f.claim(t, lua.ClaimArgs{Consumer: "silent", Want: 2})
	if len(old.Started) != 2 || old.Epoch != "0" {
		t.Fatalf("claim = %+v", old)
	}
	idleAll(t, f, 3, "silent", 60_000)
	rec := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 1, MinIdleMS: 30_000})
	if len(rec.Started) != 1 || !rec.Started[0].Reclaimed {
		t.Fatalf("reclaim = %+v; want one start", rec)
	}
	taken := rec.Started[0].ID
	codes := f.completeAs(t, "silent", plainDone(old.Started...))
	for i, s := range old.Started {
		want := lua.CompleteApplied
		if s.ID == taken {
			want = lua.CompleteFenced
		}
		if codes[i] != want {
			t.Fatalf("silent worker's %s: %v, want %v", s.ID, codes[i], want)
		}
	}
	if st, w := f.field(t, taken, "status"), f.field(t, taken, "worker"); st != "running" || w != "peer" {
		t.Fatalf("reclaimed %s: status %q worker %q, want running for peer", taken, st, w)
	}
	ps := f.pendingEntries(t, 3)
	if len(ps) != 1 || ps[0].ID != rec.Started[0].Entry || ps[0].Consumer != "peer" {
		t.Fatalf("pending = %+v; want the reclaimed entry, for peer", ps)
	}
	if rec.Epoch != "1" || rec.Started[0].Epoch != "1" {
		t.Fatalf("reclaim replied epoch %q, want \"1\"", rec.Epoch)
	}
	if c := f.completeAs(t, "peer", plainDone(rec.Started...)); c[0] != lua.CompleteApplied {
		t.Fatalf("reclaimer's completion: %v", c[0])
	}
	if st := f.field(t, taken, "status"); st != "succeeded" || f.pending(t, 3) != 0 {
		t.Fatalf("%s: %q, pending %d", taken, st, f.pending(t, 3))
	}
	// a later claim replies the raised epoch, and a receipt replay the current one
	f.enqueue(t, lua.NewTask{ID: "r3", Priority: 3})
	first := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.9"})
	again := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 1, Call: "w.9"})
	if first.Epoch != "1" || again.Epoch != "1" || len(again.Started) != 1 || again.Started[0].Epoch != "1" {
		t.Fatalf("claim epoch %q, replayed %q (%+v)", first.Epoch, again.Epoch, again.Started)
	}
}

// Items that carry no epoch, or not one epoch, or an epoch the queue no longer holds,
// all take the long path: each record read, each fence checked.
func TestCompleteLongPathWhenEpochsDiffer(t *testing.T) {
	t.Parallel()
	f, _ := setupOwnServer(t)
	for i := range 8 {
		f.enqueue(t, lua.NewTask{ID: "e" + strconv.Itoa(i)})
	}
	ss := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 8}).Started
	mixed := plainDone(ss[0:2]...)
	mixed[1].Epoch = "7"
	none := plainDone(ss[2:4]...)
	none[0].Epoch, none[1].Epoch = "", ""
	stale := plainDone(ss[4:6]...)
	stale[0].Epoch, stale[1].Epoch = "3", "3"
	for _, items := range [][]lua.Completion{mixed, none, stale, plainDone(ss[6:8]...)} {
		before := commandCalls(t, f.rdb, "hmget")
		for i, c := range f.completeAs(t, "w", items) {
			if c != lua.CompleteApplied {
				t.Fatalf("%s: %v", items[i].ID, c)
			}
		}
		want := int64(2)
		if items[0].Epoch == "0" && items[1].Epoch == "0" {
			want = 0
		}
		if n := commandCalls(t, f.rdb, "hmget") - before; n != want {
			t.Fatalf("epochs %q, %q: %d HMGETs, want %d", items[0].Epoch, items[1].Epoch, n, want)
		}
	}
}

// A record deleted, or replaced by another type, under a running execution: the short
// path acks the batch's entries first, then finds it out from the HSET's reply. The item
// is answered fenced, no record is made up, and its entry is pending again for the
// worker, so that a reclaim turns it into a dead record as before; the other items
// apply.
func TestCompleteShortPathRecordGoneOrClobbered(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, id := range []string{"ok", "deleted", "clobbered"} {
		f.enqueue(t, lua.NewTask{ID: id})
	}
	ss := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 3}).Started
	f.rdb.Del(f.ctx, f.q.Task("deleted"))
	f.rdb.Set(f.ctx, f.q.Task("clobbered"), "x", 0)
	codes := f.completeAs(t, "w", plainDone(ss...))
	for i, s := range ss {
		want := lua.CompleteFenced
		if s.ID == "ok" {
			want = lua.CompleteApplied
		}
		if codes[i] != want {
			t.Fatalf("%s: %v, want %v", s.ID, codes[i], want)
		}
	}
	if n := f.rdb.Exists(f.ctx, f.q.Task("deleted")).Val(); n != 0 {
		t.Fatal("the deleted record was made again")
	}
	if v := f.rdb.Get(f.ctx, f.q.Task("clobbered")).Val(); v != "x" {
		t.Fatalf("clobbered key = %q", v)
	}
	ps := f.pendingEntries(t, 0)
	if len(ps) != 2 || ps[0].Consumer != "w" || ps[1].Consumer != "w" {
		t.Fatalf("pending = %+v; want the two entries, for w", ps)
	}
	idleAll(t, f, 0, "w", 60_000)
	r, err := f.claimErr(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 10, MinIdleMS: 30_000})
	if err != nil || len(r.Invalid) != 2 || len(r.Started) != 0 {
		t.Fatalf("reclaim = %+v, %v; want two dead records", r, err)
	}
	if f.pending(t, 0) != 0 || f.rdb.XLen(f.ctx, f.q.Stream(0)).Val() != 0 {
		t.Fatalf("pending %d, xlen %d; want 0, 0", f.pending(t, 0), f.rdb.XLen(f.ctx, f.q.Stream(0)).Val())
	}
}

// An epoch key of another type, or holding no count: claims reply "" and raise nothing
// (a reclaim still runs), completions take the long path and apply.
func TestEpochKeyOfAnotherType(t *testing.T) {
	t.Parallel()
	for _, clobber := range []func(f *fixture){
		func(f *fixture) { f.rdb.HSet(f.ctx, f.q.Epoch(), "a", "b") },
		func(f *fixture) { f.rdb.Set(f.ctx, f.q.Epoch(), "not a count", 0) },
	} {
		f := setup(t)
		clobber(f)
		f.enqueue(t, lua.NewTask{ID: "a"})
		f.enqueue(t, lua.NewTask{ID: "b"})
		r := f.claim(t, lua.ClaimArgs{Consumer: "silent", Want: 2})
		if len(r.Started) != 2 || r.Epoch != "" || r.Started[0].Epoch != "" {
			t.Fatalf("claim = %+v", r)
		}
		idleAll(t, f, 0, "silent", 60_000)
		rec := f.claim(t, lua.ClaimArgs{Consumer: "peer", Reclaim: true, Want: 1, MinIdleMS: 30_000})
		if len(rec.Started) != 1 || rec.Epoch != "" {
			t.Fatalf("reclaim = %+v", rec)
		}
		codes := f.completeAs(t, "silent", plainDone(r.Started...))
		applied := 0
		for _, c := range codes {
			if c == lua.CompleteApplied {
				applied++
			}
		}
		if applied != 1 {
			t.Fatalf("silent worker: %v, want one applied, the reclaimed one fenced", codes)
		}
		if c := f.completeAs(t, "peer", plainDone(rec.Started...)); c[0] != lua.CompleteApplied {
			t.Fatalf("peer: %v", c)
		}
	}
}

// A refusal other than a record of another type on the short path (here an ACL that
// denies HSET; out of memory would read the same) fails the call as the long path's
// HSET would, after giving every entry it acked and did not record back to the worker as
// pending: nothing is lost if the worker dies then, and the call sent again, by a client
// allowed to write, takes the long path and records every item.
func TestCompleteShortPathRefusedWriteFailsTheCall(t *testing.T) {
	t.Parallel()
	f, srv := setupOwnServer(t)
	if err := f.rdb.Do(f.ctx, "ACL", "SETUSER", "nohset", "on", "nopass", "~*", "&*", "+@all", "-hset").Err(); err != nil {
		t.Fatal(err)
	}
	denied := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "nohset", Password: "any"})
	t.Cleanup(func() { _ = denied.Close() })
	for _, id := range []string{"a", "b", "c"} {
		f.enqueue(t, lua.NewTask{ID: id})
	}
	ss := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 3}).Started
	_, err := lua.Complete.Run(f.ctx, denied, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 60_000,
		Items: plainDone(ss...), Consumer: "w"})
	if err == nil || !strings.Contains(err.Error(), "can't run this command") {
		t.Fatalf("complete without HSET: %v, want the refusal", err)
	}
	ps := f.pendingEntries(t, 0)
	if len(ps) != 3 {
		t.Fatalf("pending = %+v; want the three entries again", ps)
	}
	for _, p := range ps {
		if p.Consumer != "w" {
			t.Fatalf("pending %s for %q, want w", p.ID, p.Consumer)
		}
	}
	for i, c := range f.completeAs(t, "w", plainDone(ss...)) {
		if c != lua.CompleteApplied || f.field(t, ss[i].ID, "status") != "succeeded" {
			t.Fatalf("%s sent again: %v, status %q", ss[i].ID, c, f.field(t, ss[i].ID, "status"))
		}
	}
	if f.pending(t, 0) != 0 || f.rdb.XLen(f.ctx, f.q.Stream(0)).Val() != 0 {
		t.Fatalf("pending %d, xlen %d; want 0, 0", f.pending(t, 0), f.rdb.XLen(f.ctx, f.q.Stream(0)).Val())
	}
}
