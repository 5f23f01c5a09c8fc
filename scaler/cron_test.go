package scaler

import (
	"context"
	"testing"

	"github.com/dtq/dtq/client"
)

// With no worker running, a queue whose only key is a periodic entry's zset is watched,
// and the entry's next tick within scheduledLead counts as due: KEDA gets a worker up
// for the tick. A tick beyond the lead counts as nothing.
func TestCronTickWithinLeadActivates(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	c := client.New(f.c, client.Options{Prefix: f.cfg.KeyPrefix})
	ctx := context.Background()
	if _, err := c.AddCron(ctx, client.CronEntry{Name: "soon", Spec: "@every 30s", Queue: "crsoon", Function: "f"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddCron(ctx, client.CronEntry{Name: "yearly", Spec: "@yearly", Queue: "cryear", Function: "f"}); err != nil {
		t.Fatal(err)
	}
	if got := metricValues(t, f, ref("queues", "crsoon", "scheduledLead", "1m")); got["dtq-crsoon"] != 1 {
		t.Fatalf("metrics %v: want the tick within the lead counted (1)", got)
	}
	if got := metricValues(t, f, ref("queues", "cryear", "scheduledLead", "1m")); got["dtq-cryear"] != 0 {
		t.Fatalf("metrics %v: want the tick beyond the lead not counted (0)", got)
	}
	act, err := f.cli.IsActive(ctxT(t), ref("queues", "crsoon", "scheduledLead", "1m"))
	if err != nil || !act.Result {
		t.Fatalf("IsActive = %v, %v; want true for a tick within the lead", act, err)
	}
	act, err = f.cli.IsActive(ctxT(t), ref("queues", "cryear", "scheduledLead", "1m"))
	if err != nil || act.Result {
		t.Fatalf("IsActive = %v, %v; want false for a tick beyond the lead", act, err)
	}
}
