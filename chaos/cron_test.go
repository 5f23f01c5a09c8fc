package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/dtq/dtq/chaos"
)

// The CI-sized cron run: a 1 s entry over 12 s with three worker processes and two
// kills of the scheduler leader fires every tick of the window exactly once (the long
// one, 60 s: go run ./chaos/cmd/chaos -cron).
func TestCronLeaderKillsCI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := chaos.RunCron(ctx, chaos.CronOptions{Workers: 3, Window: 12 * time.Second, LeaderKills: 2, Log: logWriter{t}})
	t.Log(rep.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Ticks != 12 || rep.Fired != 12 || rep.Started != 12 || rep.LeaderKills != 2 {
		t.Fatalf("%+v: want 12 ticks fired and started once each, after 2 leader kills", rep)
	}
}
