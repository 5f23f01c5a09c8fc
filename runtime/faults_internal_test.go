package runtime

import (
	"context"
	"testing"
	"time"
)

// The idle read fails as a whole on a band of another type that no claim has named yet
// (it broke between the claim and the read): the read finds it, leaves it out from then
// on, and does not fail the loop.
func TestIdleReadLeavesOutAWrongTypeBand(t *testing.T) {
	t.Parallel()
	w := unstartedWorker(t, nil, nil, "DTQ_QUEUES", "qa")
	rdb := w.rdb
	q := w.queues[0]
	ctx := context.Background()
	if err := w.ensureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, q.Stream(7), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.poller.block(ctx, 8); err != nil {
		t.Fatalf("idle read over a wrong-type band: %v, want it left out", err)
	}
	if !w.poller.faults.skip(q.Stream(7)) {
		t.Fatal("the wrong-type band is not left out of the next read")
	}
	// the next read leaves it out and blocks as usual (a short block: nothing arrives)
	w.cfg.PollBlock = 10 * time.Millisecond
	start := time.Now()
	if err := w.poller.block(ctx, 8); err != nil {
		t.Fatalf("the next idle read: %v", err)
	}
	if time.Since(start) < 10*time.Millisecond {
		t.Fatal("the next idle read did not block: it failed again")
	}
}

// A reaper whose sleep overran by more than half the visibility timeout (its process,
// or the machine, stalled) holds its reclaims as after an outage; a small overrun does
// not.
func TestReaperHoldsAfterItsOwnStall(t *testing.T) {
	t.Parallel()
	w := unstartedWorker(t, nil, nil, "DTQ_VISIBILITY_TIMEOUT_S", "2", "DTQ_HEARTBEAT_INTERVAL_S", "0.5")
	w.reaper.noteStall(100 * time.Millisecond)
	if h := w.reaper.reclaimHold(); h > 0 {
		t.Fatalf("hold %v after a 100 ms overrun, want none", h)
	}
	w.reaper.noteStall(1500 * time.Millisecond)
	if h := w.reaper.reclaimHold(); h <= 0 {
		t.Fatal("no hold after a 1.5 s overrun of a 2 s visibility timeout")
	}
}
