package lua_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// The fuzz targets below run claim.lua on a real redis-server: stream entries and task
// records written by someone else, whatever their bytes. The properties: the claim
// answers (no script error), every entry it took is accounted for exactly once, nothing
// is left pending that no worker runs, and a started task completes.

var fuzzSeq atomic.Int64

type fuzzQueue struct {
	*fixture
	t *testing.T
}

func newFuzzQueue(t *testing.T, prefix string) fuzzQueue {
	f := setup(t)
	f.q = keys.New(prefix).Queue(fmt.Sprintf("q%d", fuzzSeq.Add(1)))
	return fuzzQueue{f, t}
}

// cleanup deletes every key of the queue (the server is shared by the whole binary).
func (f fuzzQueue) cleanup() {
	iter := f.rdb.Scan(f.ctx, 0, strings.ReplaceAll(f.q.TaskPrefix(), "t:", "*"), 1000).Iterator()
	var ks []string
	for iter.Next(f.ctx) {
		ks = append(ks, iter.Val())
	}
	if len(ks) > 0 {
		f.rdb.Del(f.ctx, ks...)
	}
}

// check claims everything of band 5 and verifies the properties; want is how many
// entries the band holds. An entry may be left pending only when its task's record says
// it is running from that very entry (its owner, or a reaper, finishes it).
func (f fuzzQueue) check(want int) lua.ClaimResult {
	t := f.t
	t.Helper()
	r, err := lua.Claim.Run(f.ctx, f.rdb, lua.ClaimArgs{Queue: f.q, Consumer: "w", NowMS: f.now, Want: 100, MaxPayload: 1 << 20})
	if err != nil {
		t.Fatalf("claim failed: %v", err)
	}
	left := want - (len(r.Started) + len(r.Absorbed) + len(r.Invalid))
	if left < 0 || left > 1 {
		t.Fatalf("claim accounted for %d entries of %d: %+v", want-left, want, r)
	}
	if left == 1 {
		if st := f.field(t, "x", "status"); st != "running" {
			t.Fatalf("an entry was left pending for a task %q, not running from it: %+v", st, r)
		}
	}
	if p := f.pending(t, 5); p != int64(len(r.Started)+left) {
		t.Fatalf("pending = %d, started %d: an entry is pending that nobody runs", p, len(r.Started))
	}
	if left == 1 {
		return r
	}
	for _, in := range r.Invalid {
		if st := f.field(t, in.DeadID, "status"); st != "dead" {
			t.Fatalf("invalid entry %s: record %s has status %q, want dead", in.Entry, in.DeadID, st)
		}
		if sc, err := f.rdb.ZScore(f.ctx, f.q.Dead(), in.DeadID).Result(); err != nil || sc == 0 {
			t.Fatalf("invalid entry %s: %s not in the dead set", in.Entry, in.DeadID)
		}
	}
	var done []lua.Completion
	for _, s := range r.Started {
		done = append(done, lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Outcome: lua.Succeeded, Text: "ok"})
	}
	if len(done) > 0 {
		applied, err := lua.Complete.Run(f.ctx, f.rdb, lua.CompleteArgs{Queue: f.q, NowMS: f.now, KeepMS: 0, Items: done})
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		for i, code := range applied {
			if code != lua.CompleteApplied {
				t.Fatalf("completion of %+v fenced off right after its claim", r.Started[i])
			}
		}
	}
	if p := f.pending(t, 5); p != 0 {
		t.Fatalf("pending = %d after completing every started task", p)
	}
	return r
}

// FuzzClaimEntry: an entry with arbitrary fields lands next to a good task.
func FuzzClaimEntry(f *testing.F) {
	f.Add("task", "ghost", "attempt", "0")
	f.Add("task", "good", "attempt", "7")
	f.Add("task", "good", "attempt", "1e300")
	f.Add("task", "a{b}", "attempt", "0")
	f.Add("task", "", "attempt", "-1")
	f.Add("foo", "bar", "attempt", "0")
	f.Add("task", "good\x00x", "attempt", "0x10")
	f.Add("attempt", "2", "task", "good")
	f.Add("task", strings.Repeat("z", 300), "attempt", "nan")
	prefix := "fuzzentry"
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		if k1 == "" || k2 == "" || k1 == k2 {
			return // XADD needs field names; a repeated field is covered by the hostile tests
		}
		q := newFuzzQueue(t, prefix)
		defer q.cleanup()
		q.enqueue(t, lua.NewTask{ID: "good", Priority: 5})
		if err := q.rdb.XAdd(q.ctx, &redis.XAddArgs{Stream: q.q.Stream(5), Values: []any{k1, v1, k2, v2}}).Err(); err != nil {
			t.Fatal(err)
		}
		r := q.check(2)
		good := 0
		for _, s := range r.Started {
			if s.ID == "good" {
				good++
			}
		}
		if good != 1 {
			t.Fatalf("the good task started %d times: %+v", good, r)
		}
	})
	_ = redistest.Prefix
}

// FuzzClaimTaskRecord: a queued task's record with arbitrary control and descriptive
// fields.
func FuzzClaimTaskRecord(f *testing.F) {
	f.Add("queued", "0", "0", "3", "5", "1000", "noop", "")
	f.Add("zzz", "0", "0", "3", "5", "1000", "noop", "")
	f.Add("queued", "abc", "x", "y", "99", "soon", "", "")
	f.Add("queued", "1e30", "0", "3", "5", "0", "noop", "p")
	f.Add("running", "1", "0", "3", "5", "0", "noop", "p")
	f.Add("queued", "-1", "-5", "-1", "-3", "-1", "fn", "")
	f.Add("succeeded", "9", "0", "0", "0", "0", "noop", "")
	f.Fuzz(func(t *testing.T, status, attempt, failures, maxRetries, priority, timeout, function, payload string) {
		q := newFuzzQueue(t, "fuzzrecord")
		defer q.cleanup()
		q.enqueue(t, lua.NewTask{ID: "x", Priority: 5})
		if err := q.rdb.HSet(q.ctx, q.q.Task("x"), "status", status, "attempt", attempt, "failures", failures,
			"max_retries", maxRetries, "priority", priority, "timeout_ms", timeout, "function", function, "payload", payload).Err(); err != nil {
			t.Fatal(err)
		}
		r := q.check(1)
		for _, in := range r.Invalid {
			if in.DeadID != "x" || !strings.HasPrefix(in.Reason, "corrupt task record") {
				t.Fatalf("invalid %+v, want the task itself killed as corrupt", in)
			}
			if p := q.field(t, "x", "payload"); p != payload {
				t.Fatalf("payload changed to %q: the record must be kept", p)
			}
		}
	})
}
