package lua_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/lua"
)

// An enqueue that fails creates nothing, its unique key included: the key stays free
// for the enqueue that comes once the key is mended (it used to name a task that never
// existed, and every later enqueue with the key was told "taken").
func TestFailedEnqueueLeavesNoUniqueKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		args   lua.NewTask
		break_ func(f *fixture) string // breaks a key and returns it
	}{
		{"a band stream of another type", lua.NewTask{ID: "a", Priority: 4, Unique: "u"}, func(f *fixture) string {
			f.rdb.Set(f.ctx, f.q.Stream(4), "not a stream", 0)
			return f.q.Stream(4)
		}},
		{"a schedule of another type", lua.NewTask{ID: "a", RunAtMS: 1 << 50, Unique: "u"}, func(f *fixture) string {
			f.rdb.Set(f.ctx, f.q.Schedule(), "not a zset", 0)
			return f.q.Schedule()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			key := c.break_(f)
			c.args.Function = "noop"
			if _, _, err := f.enqueueOne(c.args); err == nil {
				t.Fatal("enqueue over a wrong-type key succeeded")
			}
			if n := f.rdb.Exists(f.ctx, f.q.Unique("u"), f.q.Task("a")).Val(); n != 0 {
				t.Fatalf("the failed enqueue left %d of its unique key and task record", n)
			}
			f.rdb.Del(f.ctx, key)
			c.args.ID = "b"
			id, created, err := f.enqueueOne(c.args)
			if err != nil || !created || id != "b" {
				t.Fatalf("enqueue after the mend = %q created=%v err=%v; want b created", id, created, err)
			}
		})
	}
}

// A broken waiting set (another type) costs the hand-off, not the enqueue: the task is
// queued, and nothing else is left behind.
func TestEnqueueSurvivesABrokenWaitingSet(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.rdb.Set(f.ctx, f.q.Waiting(), "not a zset", 0)
	f.enqueue(t, lua.NewTask{ID: "a", Unique: "u"})
	if st := f.field(t, "a", "status"); st != "queued" {
		t.Fatalf("status %q, want queued", st)
	}
	if got := f.rdb.Get(f.ctx, f.q.Unique("u")).Val(); got != "a" {
		t.Fatalf("unique key names %q, want a", got)
	}
}

// The reply names the holder's status; a dead or cancelled holder's key passes on only
// when asked; a key whose holder is gone is free.
func TestUniqueKeyHolders(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.enqueue(t, lua.NewTask{ID: "q", Unique: "queued"})
	f.enqueue(t, lua.NewTask{ID: "d", Unique: "dead"})
	f.enqueue(t, lua.NewTask{ID: "c", Unique: "cancelled"})
	f.enqueue(t, lua.NewTask{ID: "g", Unique: "gone"})
	f.rdb.HSet(f.ctx, f.q.Task("d"), "status", "dead")
	if _, err := lua.Cancel.Run(f.ctx, f.rdb, lua.CancelArgs{Queue: f.q, ID: "c", Unique: f.q.Unique("cancelled"), NowMS: f.now, KeepMS: 0}); err != nil {
		t.Fatal(err)
	}
	f.rdb.Del(f.ctx, f.q.Task("g"))

	rs := f.enqueueBatch(t, []lua.NewTask{
		{ID: "q2", Unique: "queued", ReuseUnique: true},
		{ID: "d2", Unique: "dead"},
		{ID: "c2", Unique: "cancelled"},
		{ID: "g2", Unique: "gone"},
	})
	want := []struct {
		id      string
		created bool
		status  string
	}{{"q", false, "queued"}, {"d", false, "dead"}, {"c", false, "cancelled"}, {"g2", true, ""}}
	for i, w := range want {
		if rs[i].ID != w.id || rs[i].Created != w.created || string(rs[i].HolderStatus) != w.status || rs[i].Err != nil {
			t.Errorf("task %d = %+v, want id %s created %v holder status %q", i, rs[i], w.id, w.created, w.status)
		}
	}
	rs = f.enqueueBatch(t, []lua.NewTask{
		{ID: "d3", Unique: "dead", ReuseUnique: true},
		{ID: "c3", Unique: "cancelled", ReuseUnique: true},
	})
	for i, id := range []string{"d3", "c3"} {
		if !rs[i].Created || rs[i].ID != id {
			t.Fatalf("reuse %d = %+v, want %s created", i, rs[i], id)
		}
	}
	for old, key := range map[string]string{"d": "dead", "c": "cancelled"} {
		if u := f.field(t, old, "unique"); u != "" {
			t.Errorf("old holder %s still names unique key %q", old, u)
		}
		if got, err := f.rdb.Get(f.ctx, f.q.Unique(key)).Result(); err != nil && err != redis.Nil || got != old+"3" {
			t.Errorf("key %s names %q, want %s3", key, got, old)
		}
	}
}
