package chaos

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/dtq/dtq/client"
)

// ConcScope is one fleet-wide concurrency limit a run sets (Options.ConcLimit): on a
// whole queue (Function "") or on one function of a queue.
type ConcScope struct {
	Queue       string `json:"queue"`
	Function    string `json:"function,omitempty"`
	Concurrency int    `json:"concurrency"`
}

func (s ConcScope) String() string {
	if s.Function == "" {
		return fmt.Sprintf("queue %s ≤ %d", s.Queue, s.Concurrency)
	}
	return fmt.Sprintf("%s on %s ≤ %d", s.Function, s.Queue, s.Concurrency)
}

// LimitFindings are what the ledger says of the concurrency limits.
//
// An execution counts against its scope from its start until its finish, the SIGKILL of
// its process, or the start of its task's next attempt, whichever comes first: the
// task's current attempt, which is what holds the slot in Redis (a slot per task, from
// the claim to the applied outcome; a reclaim keeps it). Peak must reach the limit (or
// the run proved nothing) and never pass it. A fenced execution still running on a
// worker that resumed (a freeze, a worker cut off from Redis) is not the task's current
// attempt: the limit cannot stop a process it cannot reach. ZombiePeak counts those too,
// until their real finish, so the overlap they add is measured, not hidden. So does an
// execution that began after a later attempt of its task had started (claimed, then its
// worker frozen before the function began, and the task taken over meanwhile).
type LimitFindings struct {
	Scope      ConcScope `json:"scope"`
	Executions int       `json:"executions"`
	Peak       int       `json:"peak"`
	Exceeded   int       `json:"exceeded"` // starts that took the count past the limit
	ZombiePeak int       `json:"zombie_peak"`
	// ZombieFor is the longest a fenced execution ran on after its task's next attempt
	// started (the worker stops it at its first heartbeat once it runs again).
	ZombieFor time.Duration `json:"zombie_for_ns"`
	Killed    int           `json:"killed"` // executions whose process was SIGKILLed
	// SlotReturn is, over the killed executions of the scope, the longest time from the
	// SIGKILL to the next attempt of the same task starting (its slot back in use).
	SlotReturn time.Duration `json:"slot_return_ns"`
	Leaked     int64         `json:"leaked"` // members left in the scope's running set at the end
}

// concScopes are the limits a run with ConcLimit sets: the whole of the first queue, and
// the "sleep" function of the second (most of its tasks; the others run unlimited).
func (o Options) concScopes() []ConcScope {
	if o.ConcLimit <= 0 {
		return nil
	}
	s := []ConcScope{{Queue: o.Queues[0], Concurrency: o.ConcLimit}}
	if len(o.Queues) > 1 {
		s = append(s, ConcScope{Queue: o.Queues[1], Function: "sleep", Concurrency: o.ConcLimit})
	}
	return s
}

// setLimits sets the run's concurrency limits before any worker starts.
func (h *harness) setLimits(ctx context.Context) error {
	for _, s := range h.o.concScopes() {
		if err := h.c.SetLimit(ctx, s.Queue, client.Limit{Function: s.Function, Concurrency: s.Concurrency}); err != nil {
			return fmt.Errorf("chaos: set limit %s: %w", s, err)
		}
	}
	return nil
}

// checkLimits measures each scope's concurrency from the ledger and reads what its
// running set holds once every task has ended.
func (h *harness) checkLimits(ctx context.Context, specs []Spec, execs []*Exec, faults []Fault) ([]LimitFindings, error) {
	var out []LimitFindings
	for _, s := range h.o.concScopes() {
		lf := CheckLimit(s, specs, execs, faults)
		n, err := h.rdb.SCard(ctx, h.ks.Queue(s.Queue).LimitRun(s.Function)).Result()
		if err != nil {
			return nil, fmt.Errorf("chaos: read the running set of %s: %w", s, err)
		}
		lf.Leaked = n
		out = append(out, lf)
	}
	return out, nil
}

// CheckLimit measures the concurrency of one scope from the ledger (see LimitFindings).
func CheckLimit(s ConcScope, specs []Spec, execs []*Exec, faults []Fault) LimitFindings {
	lf := LimitFindings{Scope: s}
	fn := map[string]string{}
	for _, sp := range specs {
		if sp.Queue == s.Queue {
			fn[sp.ID] = sp.Function
		}
	}
	killed := map[int]time.Time{}
	for _, ft := range faults {
		if (ft.Kind == FaultKill || ft.Kind == FaultLeaderKill) && ft.PID != 0 {
			killed[ft.PID] = ft.At
		}
	}
	byTask := map[string][]*Exec{}
	for _, e := range execs {
		if e.Queue != s.Queue {
			continue
		}
		f, ok := fn[e.Task]
		if !ok || (s.Function != "" && f != s.Function) {
			continue
		}
		byTask[e.Task] = append(byTask[e.Task], e)
	}
	type edge struct {
		at    time.Time
		delta int
	}
	var cur, zombie []edge
	forever := time.Unix(1<<40, 0)
	for _, list := range byTask {
		sort.SliceStable(list, func(i, j int) bool { return list[i].Start.Before(list[j].Start) })
		for i, e := range list {
			lf.Executions++
			real := forever // when the function stopped running
			if e.Outcome != "" {
				real = e.Finish
			}
			k, wasKilled := killed[e.PID]
			if wasKilled && k.After(e.Start) && k.Before(real) {
				real = k
			}
			if wasKilled && real == k {
				lf.Killed++
			}
			end := real
			for _, nx := range list[i+1:] {
				if nx.Attempt > e.Attempt {
					if nx.Start.Before(end) {
						end = nx.Start
					}
					if wasKilled && real == k && !nx.Start.Before(k) {
						lf.SlotReturn = max(lf.SlotReturn, nx.Start.Sub(k))
					}
					break
				}
			}
			// A later attempt that started first: this execution was claimed, its worker
			// froze before the function began, a peer took the task over, and the worker
			// resumed and started it — fenced from its first instant, a zombie only.
			for _, pr := range list[:i] {
				if pr.Attempt > e.Attempt {
					end = e.Start
					break
				}
			}
			if end.Before(real) && real != forever {
				lf.ZombieFor = max(lf.ZombieFor, real.Sub(end))
			}
			if end.After(e.Start) {
				cur = append(cur, edge{e.Start, 1}, edge{end, -1})
			}
			zombie = append(zombie, edge{e.Start, 1}, edge{real, -1})
		}
	}
	sweep := func(es []edge, over func()) int {
		// ends before starts at one instant: an outcome is written before the next claim
		sort.Slice(es, func(i, j int) bool {
			if !es[i].at.Equal(es[j].at) {
				return es[i].at.Before(es[j].at)
			}
			return es[i].delta < es[j].delta
		})
		n, peak := 0, 0
		for _, x := range es {
			n += x.delta
			if x.delta > 0 && n > s.Concurrency && over != nil {
				over()
			}
			peak = max(peak, n)
		}
		return peak
	}
	lf.Peak = sweep(cur, func() { lf.Exceeded++ })
	lf.ZombiePeak = sweep(zombie, nil)
	return lf
}
