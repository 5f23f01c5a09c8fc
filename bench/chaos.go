package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/dtq/dtq/chaos"
)

// runChaos is the long chaos run: worker processes killed, terminated, frozen and their
// scheduler leader killed while thousands of tasks flow, checked against a ledger the
// functions write outside the runtime (see chaos/). --duration spreads the enqueues
// and the faults; the run uses a redis-server of its own (AOF on).
func runChaos(ctx context.Context, e *benchEnv, o options) (result, error) {
	n := o.n
	if n == 0 {
		n = 20000
	}
	faults := max(4, int(o.duration.Seconds()/6))
	opts := chaos.Options{
		Workers: max(4, o.workers), Concurrency: min(o.concurrency, 16), Tasks: n,
		EnqueueFor: o.duration, Kills: faults, Terms: faults / 2, Freezes: max(2, faults/4),
		LeaderKills: max(1, faults/4), Log: os.Stderr,
	}
	if !o.verbose {
		opts.Log = discard{}
	}
	rep, err := chaos.Run(ctx, opts)
	if err != nil && !errors.Is(err, chaos.ErrInvariant) {
		return nil, err
	}
	if !o.json {
		fmt.Fprint(os.Stderr, rep.String())
	}
	r := result{
		"tasks": rep.Tasks, "kills": rep.Kills + rep.LeaderKills, "stops": rep.Terms, "freezes": rep.Freezes,
		"lost": rep.Lost, "duplicate_starts": rep.DuplicateStarts, "reexecutions": rep.Reexecutions,
		"unexplained_reexecutions": rep.Unexplained, "quiesce_s": round(rep.Quiesce.Seconds(), 2),
		"seed": rep.Seed,
	}
	if err != nil {
		return r, err
	}
	return r, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
