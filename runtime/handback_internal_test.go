package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// The drain's hand-back leaves each entry's idle clock at the visibility timeout even
// when a heartbeat's touch pass took its snapshot before the hand-back and touches
// after it began: the pass's touch (idle 0) lands first, the hand-back's last. Before,
// the late touch reset the handed-back entries to idle 0 and a peer's reaper left them
// for another visibility timeout.
func TestHandBackWaitsForATouchPassInFlight(t *testing.T) {
	t.Parallel()
	w := unstartedWorker(t, nil, nil, "DTQ_VISIBILITY_TIMEOUT_S", "30")
	rdb, cfg := w.rdb, w.cfg
	q := w.queues[0]
	ctx := context.Background()
	stream := q.Stream(0)
	if err := rdb.XGroupCreateMkStream(ctx, stream, keys.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	var list []*execution
	for _, id := range []string{"a", "b", "c"} {
		entry := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", id}}).Val()
		rdb.HSet(ctx, q.Task(id), "status", "running", "attempt", "1", "entry", entry)
		e := &execution{queue: q.Name, s: lua.Started{ID: id, Entry: entry, Band: 0, Attempt: 1}}
		list = append(list, e)
		w.hold.add(e)
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: keys.Group, Consumer: w.id, Streams: []string{stream, ">"}, Count: 10}).Err(); err != nil {
		t.Fatal(err)
	}

	snapshot, resume := make(chan struct{}), make(chan struct{})
	w.hold.afterSnapshot = func() { close(snapshot); <-resume }
	passDone := make(chan struct{})
	go func() { defer close(passDone); w.touchHeld(ctx) }()
	<-snapshot // the pass holds all three in its snapshot
	handedBack := make(chan struct{})
	go func() { defer close(handedBack); w.handBack(list) }()
	// The hand-back has begun once it released what it hands back (before the fix, it
	// released them after its touch back).
	deadline := time.Now().Add(10 * time.Second)
	for len(w.hold.entries()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the hand-back never released its executions")
		}
		time.Sleep(time.Millisecond)
	}
	close(resume)
	<-passDone
	<-handedBack

	pending, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: keys.Group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != len(list) {
		t.Fatalf("%d entries pending, want %d", len(pending), len(list))
	}
	for _, p := range pending {
		if p.Idle < cfg.VisibilityTimeout {
			t.Errorf("entry %s idle %v after the hand-back, want at least the visibility timeout %v (a late touch reset it)", p.ID, p.Idle, cfg.VisibilityTimeout)
		}
	}
	for _, e := range list {
		if hb := rdb.HGet(ctx, q.Task(e.s.ID), "handback").Val(); hb != "1" {
			t.Errorf("task %s: handback %q, want 1", e.s.ID, hb)
		}
	}
}
