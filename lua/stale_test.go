package lua_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

// staleCall calls stale.lua for worker id of ks at nowMS.
func staleCall(t *testing.T, f *fixture, ks keys.Space, id string, j lua.Judgement, hb string, nowMS int64) lua.StaleOutcome {
	t.Helper()
	out, err := lua.Stale.Run(f.ctx, f.rdb, lua.StaleArgs{Record: ks.Worker(id), Mark: ks.StaleMark(id), Events: ks.Events(),
		Worker: id, Judged: j, Heartbeat: hb, NowMS: nowMS, MaxLen: 1000, Detail: "last heartbeat 1s ago"})
	if err != nil {
		t.Fatalf("stale %s %s: %v", j, id, err)
	}
	return out
}

func staleEvents(t *testing.T, f *fixture, ks keys.Space, id string) int {
	t.Helper()
	es, err := f.rdb.XRange(f.ctx, ks.Events(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.Values["type"] == string(keys.EventWorkerStale) && e.Values["worker"] == id {
			n++
			if e.Values["detail"] != "last heartbeat 1s ago" || e.Values["ts"] == "" {
				t.Errorf("event fields: %v", e.Values)
			}
		}
	}
	return n
}

func TestStalePublishesOncePerStaleHeartbeat(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ks := keys.New(redistest.Prefix(t))
	hb := strconv.FormatInt(f.now-60_000, 10)
	f.rdb.HSet(f.ctx, ks.Worker("w1"), "last_heartbeat", hb, "status", "ready")
	if got := staleCall(t, f, ks, "w1", lua.JudgedStale, hb, f.now); got != lua.StalePublished {
		t.Fatalf("first call = %d, want published", got)
	}
	// a second replica judging the same heartbeat publishes nothing
	if got := staleCall(t, f, ks, "w1", lua.JudgedStale, hb, f.now+10); got != lua.StaleNothing {
		t.Fatalf("second call = %d, want nothing", got)
	}
	// the record expires: still settled
	f.rdb.Del(f.ctx, ks.Worker("w1"))
	if got := staleCall(t, f, ks, "w1", lua.JudgedExpired, "", f.now+20); got != lua.StaleNothing {
		t.Fatalf("expired after published = %d, want nothing", got)
	}
	if n := staleEvents(t, f, ks, "w1"); n != 1 {
		t.Fatalf("%d WORKER_STALE events, want 1", n)
	}
	// the worker heartbeats again: live clears the marker; stale again publishes anew
	hb2 := strconv.FormatInt(f.now+1000, 10)
	f.rdb.HSet(f.ctx, ks.Worker("w1"), "last_heartbeat", hb2, "status", "ready")
	if got := staleCall(t, f, ks, "w1", lua.JudgedLive, hb2, f.now+1000); got != lua.StaleNothing {
		t.Fatalf("live = %d", got)
	}
	if n, _ := f.rdb.Exists(f.ctx, ks.StaleMark("w1")).Result(); n != 0 {
		t.Fatal("live left the marker of the earlier staleness")
	}
	f.rdb.Del(f.ctx, ks.Worker("w1"))
	if got := staleCall(t, f, ks, "w1", lua.JudgedExpired, "", f.now+70_000); got != lua.StalePublished {
		t.Fatalf("stale again = %d, want published", got)
	}
	if n := staleEvents(t, f, ks, "w1"); n != 2 {
		t.Fatalf("%d WORKER_STALE events, want 2", n)
	}
}

func TestStaleHeartbeatMovedOnOrResumedWithoutLiveCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ks := keys.New(redistest.Prefix(t))
	hb := strconv.FormatInt(f.now-60_000, 10)
	f.rdb.HSet(f.ctx, ks.Worker("w"), "last_heartbeat", hb, "status", "busy")
	// the worker beat between the judgement and the call
	newer := strconv.FormatInt(f.now, 10)
	f.rdb.HSet(f.ctx, ks.Worker("w"), "last_heartbeat", newer)
	if got := staleCall(t, f, ks, "w", lua.JudgedStale, hb, f.now); got != lua.StaleMoved {
		t.Fatalf("moved = %d, want -1", got)
	}
	// a record that came back is not expired
	if got := staleCall(t, f, ks, "w", lua.JudgedExpired, "", f.now); got != lua.StaleMoved {
		t.Fatalf("expired with a record = %d, want -1", got)
	}
	// published for the old heartbeat; the worker resumed and went stale again before
	// any watcher saw it live: the marker is older than the heartbeat, so it publishes
	f.rdb.Set(f.ctx, ks.StaleMark("w"), "stale "+strconv.FormatInt(f.now-1, 10), 0)
	if got := staleCall(t, f, ks, "w", lua.JudgedStale, newer, f.now+60_000); got != lua.StalePublished {
		t.Fatalf("stale after resumed = %d, want published", got)
	}
	if n := staleEvents(t, f, ks, "w"); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

func TestStaleNeverForAStoppedWorker(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ks := keys.New(redistest.Prefix(t))
	hb := strconv.FormatInt(f.now, 10)
	f.rdb.HSet(f.ctx, ks.Worker("w"), "last_heartbeat", hb, "status", "stopped")
	if got := staleCall(t, f, ks, "w", lua.JudgedStopped, hb, f.now); got != lua.StaleNothing {
		t.Fatalf("stopped = %d", got)
	}
	// an old stopped record is stale by its age: still nothing
	if got := staleCall(t, f, ks, "w", lua.JudgedStale, hb, f.now+60_000); got != lua.StaleNothing {
		t.Fatalf("stale stopped = %d", got)
	}
	f.rdb.Del(f.ctx, ks.Worker("w"))
	if got := staleCall(t, f, ks, "w", lua.JudgedExpired, "", f.now+60_000); got != lua.StaleNothing {
		t.Fatalf("expired after stopped = %d", got)
	}
	if n := staleEvents(t, f, ks, "w"); n != 0 {
		t.Fatalf("%d WORKER_STALE events for a stopped worker", n)
	}
	// a stopped call on a record that no longer says stopped is not the one judged
	f.rdb.HSet(f.ctx, ks.Worker("w2"), "last_heartbeat", hb, "status", "ready")
	if got := staleCall(t, f, ks, "w2", lua.JudgedStopped, hb, f.now); got != lua.StaleMoved {
		t.Fatalf("stopped on a ready record = %d, want -1", got)
	}
}

func TestStaleExpiredPublishesOnceAndRenewsItsMarker(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ks := keys.New(redistest.Prefix(t))
	if got := staleCall(t, f, ks, "gone", lua.JudgedExpired, "", f.now); got != lua.StalePublished {
		t.Fatalf("expired = %d, want published", got)
	}
	// a marker close to its end (a bare 5000 would be 5 µs: go-redis rounds it up to
	// 1 ms, and the marker could lapse before the second call)
	f.rdb.PExpire(f.ctx, ks.StaleMark("gone"), 5*time.Second)
	if got := staleCall(t, f, ks, "gone", lua.JudgedExpired, "", f.now); got != lua.StaleNothing {
		t.Fatalf("expired again = %d", got)
	}
	if ttl, _ := f.rdb.PTTL(f.ctx, ks.StaleMark("gone")).Result(); ttl <= 5*time.Second {
		t.Fatalf("marker TTL %v not renewed", ttl)
	}
}

func TestStaleRefusesBadArgsAndWrongTypes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ks := keys.New(redistest.Prefix(t))
	a := lua.StaleArgs{Record: ks.Worker("w"), Mark: ks.StaleMark("w"), Events: ks.Events(), Worker: "w", Judged: "nonsense", MaxLen: 10}
	if _, err := lua.Stale.Run(f.ctx, f.rdb, a); err == nil {
		t.Error("an unknown judgement was accepted")
	}
	a.Judged, a.MaxLen = lua.JudgedExpired, 0
	if _, err := lua.Stale.Run(f.ctx, f.rdb, a); err == nil {
		t.Error("MAXLEN 0 was accepted")
	}
	f.rdb.Set(f.ctx, ks.Worker("w"), "x", 0)
	a.MaxLen, a.Judged, a.Heartbeat = 10, lua.JudgedStale, "1"
	if _, err := lua.Stale.Run(f.ctx, f.rdb, a); !lua.IsKeyError(err) {
		t.Errorf("a record of another type: err = %v, want a key error", err)
	}
	if n := staleEvents(t, f, ks, "w"); n != 0 {
		t.Fatalf("%d events after refusals", n)
	}
}
