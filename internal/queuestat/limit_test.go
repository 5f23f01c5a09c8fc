package queuestat_test

import (
	"context"
	"testing"
	"time"

	"github.com/dtq/dtq/internal/queuestat"
)

// A queue's own limit is read with its stats (a function's limit is not the queue's);
// a limits key of another type caps nothing and fails nothing.
func TestReadsQueueLimit(t *testing.T) {
	t.Parallel()
	f := setup(t, 2)
	ctx := context.Background()
	f.c.HSet(ctx, f.ks.Queue("a").Limits(), "", "rate=5000;per=3600000;burst=1;conc=5", "f", "conc=1")
	f.c.HSet(ctx, f.ks.Queue("b").Limits(), "f", "conc=1")
	f.c.Set(ctx, f.ks.Queue("c").Limits(), "x", 0)
	st, err := queuestat.Read(ctx, f.c, f.ks, []queuestat.Spec{{Queue: "a", Bands: queuestat.AllBands},
		{Queue: "b", Bands: queuestat.AllBands}, {Queue: "c", Bands: queuestat.AllBands}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if l := st[0].Limit; l.Concurrency != 5 || l.RatePerSecond < 1.38 || l.RatePerSecond > 1.39 {
		t.Fatalf("queue a limit %+v", l)
	}
	if run, ok := st[0].Limit.Runnable(); !ok || run != 2 {
		t.Fatalf("queue a runnable %d %v, want 2 (5000/h rounds up to 2 a second, under 5)", run, ok)
	}
	for _, s := range st[1:] {
		if _, ok := s.Limit.Runnable(); ok || s.Err != nil {
			t.Fatalf("queue %s: limit %+v err %v, want none", s.Queue, s.Limit, s.Err)
		}
	}
}
