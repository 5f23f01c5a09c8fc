package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/dtq/dtq/chaos"
)

// chaosResult is one run of the chaos mode: the counts of its report.
type chaosResult struct {
	Tasks                   int     `json:"tasks"`
	Kills                   int     `json:"kills"` // leader kills included
	Stops                   int     `json:"stops"`
	Freezes                 int     `json:"freezes"`
	Lost                    int     `json:"lost"`
	DuplicateStarts         int     `json:"duplicate_starts"`
	Reexecutions            int     `json:"reexecutions"`
	UnexplainedReexecutions int     `json:"unexplained_reexecutions"`
	QuiesceS                float64 `json:"quiesce_s"`
	Seed                    uint64  `json:"seed"`
}

func (r chaosResult) figures() []figure {
	return []figure{
		fig("tasks", float64(r.Tasks)), fig("kills", float64(r.Kills)), fig("stops", float64(r.Stops)),
		fig("freezes", float64(r.Freezes)), fig("lost", float64(r.Lost)), fig("duplicate_starts", float64(r.DuplicateStarts)),
		fig("reexecutions", float64(r.Reexecutions)), fig("unexplained_reexecutions", float64(r.UnexplainedReexecutions)),
		fig("quiesce_s", r.QuiesceS),
	}
}

// runChaos is the long chaos run: worker processes killed, terminated, frozen and their
// scheduler leader killed while thousands of tasks flow, checked against a ledger the
// functions write outside the runtime (see chaos/). --duration spreads the enqueues
// and the faults; the run uses a redis-server of its own (AOF on).
func runChaos(ctx context.Context, e *benchEnv, o options) (chaosResult, error) {
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
		return chaosResult{}, err
	}
	if !o.json {
		fmt.Fprint(os.Stderr, rep.String())
	}
	r := chaosResult{
		Tasks: rep.Tasks, Kills: rep.Kills + rep.LeaderKills, Stops: rep.Terms, Freezes: rep.Freezes,
		Lost: rep.Lost, DuplicateStarts: rep.DuplicateStarts, Reexecutions: rep.Reexecutions,
		UnexplainedReexecutions: rep.Unexplained, QuiesceS: round(rep.Quiesce.Seconds(), 2),
		Seed: rep.Seed,
	}
	if err != nil {
		return r, err
	}
	return r, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
