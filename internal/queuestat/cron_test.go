package queuestat_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/queuestat"
)

// With no worker running, a periodic entry's next tick within the lead counts as due,
// so the scaler has a worker up before it; a tick already due counts as due now.
func TestCronTicksCountAsDue(t *testing.T) {
	t.Parallel()
	f := setup(t, 3)
	ctx := context.Background()
	now := time.Date(2027, 3, 1, 11, 59, 50, 0, time.UTC) // ten seconds before noon
	c := client.New(f.c, client.Options{Prefix: f.ks.Prefix(), Now: func() time.Time { return now }})
	if _, err := c.AddCron(ctx, client.CronEntry{Name: "noon", Spec: "0 12 * * *", Queue: "crq", Function: "f"}); err != nil {
		t.Fatal(err)
	}
	noon := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	spec := []queuestat.Spec{{Queue: "crq", Leads: []time.Duration{5 * time.Second, 30 * time.Second}, NextDue: true}}
	st := read(t, f, spec, now)[0]
	if st.DueNow != 0 || st.DueWithin[0] != 0 || st.DueWithin[1] != 1 {
		t.Errorf("DueNow %d DueWithin %v, want 0 and [0 1] (noon is 10 s away)", st.DueNow, st.DueWithin)
	}
	if !st.NextDue[0].Equal(noon) || !st.NextDue[1].IsZero() {
		t.Errorf("NextDue = %v, want [%v, none]", st.NextDue, noon)
	}
	// a scheduled task later than the tick leaves the tick first; an earlier one wins
	q := f.ks.Queue("crq")
	f.c.ZAdd(ctx, q.Schedule(), redis.Z{Score: float64(noon.Add(time.Minute).UnixMilli()), Member: "later"})
	if st := read(t, f, spec, now)[0]; !st.NextDue[0].Equal(noon) {
		t.Errorf("NextDue[0] = %v, want the tick %v before the later task", st.NextDue[0], noon)
	}
	f.c.ZAdd(ctx, q.Schedule(), redis.Z{Score: float64(now.Add(7 * time.Second).UnixMilli()), Member: "sooner"})
	if st := read(t, f, spec, now)[0]; !st.NextDue[0].Equal(now.Add(7 * time.Second)) {
		t.Errorf("NextDue[0] = %v, want the task due before the tick", st.NextDue[0])
	}
	// past the tick, with still no worker: due now
	st = read(t, f, spec, noon.Add(time.Second))[0]
	if st.DueNow != 2 { // the tick and the task "sooner"
		t.Errorf("after noon DueNow = %d, want 2 (the tick and one task)", st.DueNow)
	}
	// a paused entry is not counted
	if err := c.PauseCron(ctx, "noon"); err != nil {
		t.Fatal(err)
	}
	if st := read(t, f, spec, noon.Add(time.Second))[0]; st.DueNow != 1 {
		t.Errorf("paused: DueNow = %d, want 1", st.DueNow)
	}
}
