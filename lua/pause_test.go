package lua_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// An entry a blocking read delivered after the queue was paused goes back to its stream
// unstarted, as a new undelivered entry the task now names; nothing is lost, and after
// the resume it runs from the new entry.
func TestPausedClaimReturnsDeliveredEntries(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "a", Priority: 3})
	xs, err := f.rdb.XReadGroup(f.ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w",
		Streams: []string{f.q.Stream(3), ">"}, Count: 1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	old := xs[0].Messages[0].ID
	f.rdb.Set(f.ctx, f.q.Paused(), "1", 0)
	r := f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5, Delivered: []lua.Delivered{{Band: 3, Entry: old}}})
	if !r.Paused || len(r.Started) != 0 || len(r.Returned) != 1 || r.Returned[0].Entry != old || r.Returned[0].ID != "a" {
		t.Fatalf("claim while paused = %+v, want the delivery returned unstarted", r)
	}
	nu := r.Returned[0].New
	if st, e := f.field(t, "a", "status"), f.field(t, "a", "entry"); st != "queued" || e != nu || nu == old {
		t.Fatalf("task a: status %q entry %q, want queued from the new entry %q", st, e, nu)
	}
	if n := f.rdb.XLen(f.ctx, f.q.Stream(3)).Val(); n != 1 {
		t.Fatalf("band 3 holds %d entries, want 1 (the old one deleted, the new one there)", n)
	}
	if p := f.pending(t, 3); p != 0 {
		t.Fatalf("%d entries pending, want 0 (the new entry is undelivered)", p)
	}
	// A reader that does not know of the pause yet gets the new entry; its claim returns
	// it again: still nothing starts.
	r = f.claim(t, lua.ClaimArgs{Consumer: "w2", Want: 5, Delivered: []lua.Delivered{{Band: 3, Entry: nu}}})
	if len(r.Started) != 0 || len(r.Returned) != 1 {
		t.Fatalf("second claim while paused = %+v", r)
	}
	f.rdb.Del(f.ctx, f.q.Paused())
	r = f.claim(t, lua.ClaimArgs{Consumer: "w", Want: 5})
	if len(r.Started) != 1 || r.Started[0].ID != "a" || r.Started[0].Attempt != 1 {
		t.Fatalf("claim after the resume = %+v, want a started at attempt 1", r)
	}
}

// A "d" hand-off row read by the claim itself while the queue is paused: its entry goes
// back unstarted too.
func TestPausedClaimReturnsDeliveredInboxRows(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "old"})
	f.register(t, "w1")
	f.enqueue(t, lua.NewTask{ID: "new"}) // the read delivers "old": a "d" row on w1's inbox
	f.rdb.Set(f.ctx, f.q.Paused(), "1", 0)
	r := f.claim(t, lua.ClaimArgs{Consumer: "w1", Want: 5})
	if len(r.Started) != 0 || len(r.Returned) != 1 || r.Returned[0].ID != "old" {
		t.Fatalf("claim while paused = %+v, want old returned unstarted", r)
	}
	if st := f.field(t, "old", "status"); st != "queued" {
		t.Fatalf("old is %q, want queued", st)
	}
}

// The reaper starts nothing on a paused queue: entries of a silent worker stay pending
// (nothing lost) until the resume.
func TestPausedQueueReclaimsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "r", MaxRetries: 3})
	f.enqueue(t, lua.NewTask{ID: "q"})
	if r := f.claim(t, lua.ClaimArgs{Consumer: "dead-worker", Want: 1}); len(r.Started) != 1 {
		t.Fatalf("first claim = %+v", r)
	}
	// "q" delivered to the silent worker, never started
	if _, err := f.rdb.XReadGroup(f.ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: "dead-worker",
		Streams: []string{f.q.Stream(0), ">"}, Count: 1}).Result(); err != nil {
		t.Fatal(err)
	}
	idleAll(t, f, 0, "dead-worker", 60_000)
	f.rdb.Set(f.ctx, f.q.Paused(), "1", 0)
	r := f.claim(t, lua.ClaimArgs{Consumer: "reaper", Reclaim: true, Want: 10, MinIdleMS: 1000})
	if len(r.Started)+len(r.Absorbed)+len(r.Invalid) != 0 || !r.Paused {
		t.Fatalf("reclaim while paused = %+v, want nothing taken", r)
	}
	if p := f.pending(t, 0); p != 2 {
		t.Fatalf("%d pending, want both entries still pending", p)
	}
	f.rdb.Del(f.ctx, f.q.Paused())
	r = f.claim(t, lua.ClaimArgs{Consumer: "reaper", Reclaim: true, Want: 10, MinIdleMS: 1000})
	if len(r.Started) != 2 {
		t.Fatalf("reclaim after the resume = %+v, want both started", r)
	}
}
