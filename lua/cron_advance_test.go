package lua_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/lua"
)

// The advance is a compare-and-set on the tick handled: it moves the entry on only
// while the entry still waits for that tick.
func TestCronAdvanceIsACompareAndSet(t *testing.T) {
	t.Parallel()
	f := setup(t)
	z := f.q.Cron()
	f.rdb.ZAdd(f.ctx, z, redis.Z{Score: 1000, Member: "e"})
	adv := func(a lua.CronAdvanceArgs) bool {
		t.Helper()
		a.Queue = f.q
		ok, err := lua.CronAdvance.Run(f.ctx, f.rdb, a)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if adv(lua.CronAdvanceArgs{Name: "e", TickMS: 999, NextMS: 2000}) {
		t.Error("moved on from a tick the entry does not wait for")
	}
	if !adv(lua.CronAdvanceArgs{Name: "e", TickMS: 1000, NextMS: 2000}) {
		t.Fatal("did not move on from the tick the entry waits for")
	}
	if s, _ := f.rdb.ZScore(f.ctx, z, "e").Result(); s != 2000 {
		t.Fatalf("score %v, want 2000", s)
	}
	// a second leader that handled the same tick does nothing
	if adv(lua.CronAdvanceArgs{Name: "e", TickMS: 1000, NextMS: 2000}) {
		t.Error("the same tick moved the entry twice")
	}
	// a removed (or paused) entry is not brought back
	if adv(lua.CronAdvanceArgs{Name: "gone", TickMS: 1000, NextMS: 2000}) {
		t.Error("an entry missing from the zset was added")
	}
	if n, _ := f.rdb.ZCard(f.ctx, z).Result(); n != 1 {
		t.Errorf("zset holds %d, want 1", n)
	}
	if !adv(lua.CronAdvanceArgs{Name: "e", TickMS: 2000, Remove: true}) {
		t.Fatal("remove did not act on the awaited tick")
	}
	if n, _ := f.rdb.ZCard(f.ctx, z).Result(); n != 0 {
		t.Errorf("zset holds %d after remove, want 0", n)
	}
	for _, bad := range []lua.CronAdvanceArgs{{Name: "a b", TickMS: 1, NextMS: 2}, {Name: "e", TickMS: 5, NextMS: 5}} {
		bad.Queue = f.q
		if _, err := lua.CronAdvance.Run(f.ctx, f.rdb, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
