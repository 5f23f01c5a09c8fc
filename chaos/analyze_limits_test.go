package chaos_test

import (
	"testing"
	"time"

	"github.com/dtq/dtq/chaos"
)

// The limit check counts current attempts: a killed execution stops counting at the
// kill, a frozen one at its task's next attempt (its later finish counts only in the
// zombie peak), and a start past the limit is caught.
func TestCheckLimit(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	specs := []chaos.Spec{{Queue: "q", ID: "a", Function: "sleep"}, {Queue: "q", ID: "b", Function: "sleep"},
		{Queue: "q", ID: "c", Function: "sleep"}, {Queue: "q", ID: "n", Function: "noop"}}
	ex := func(id string, attempt int64, pid, start, finish int) *chaos.Exec {
		e := &chaos.Exec{Queue: "q", Task: id, Attempt: attempt, PID: pid, Start: at(start)}
		if finish >= 0 {
			e.Finish, e.Outcome = at(finish), chaos.OutcomeOK
		}
		return e
	}
	scope := chaos.ConcScope{Queue: "q", Function: "sleep", Concurrency: 2}
	faults := []chaos.Fault{{Kind: chaos.FaultKill, PID: 1, At: at(100)}}
	execs := []*chaos.Exec{
		ex("a", 1, 1, 0, -1),    // killed at 100
		ex("a", 2, 2, 3100, -1), // reclaimed: the slot back 3 s after the kill... and never finished
		ex("b", 1, 3, 50, 5000), // frozen from 200: its finish is late
		ex("b", 2, 2, 3000, 3500),
		ex("c", 1, 2, 150, 3050),
		ex("n", 1, 2, 10, 4000), // another function: not counted
	}
	execs[1].Finish, execs[1].Outcome = at(3600), chaos.OutcomeOK
	lf := chaos.CheckLimit(scope, specs, execs, faults)
	if lf.Executions != 5 || lf.Peak != 2 || lf.Exceeded != 0 || lf.ZombiePeak != 3 || lf.Killed != 1 || lf.SlotReturn != 3*time.Second || lf.ZombieFor != 2*time.Second {
		t.Fatalf("findings %+v", lf)
	}
	// c's second attempt overlapping a and b: past the limit
	execs = append(execs, ex("c", 2, 3, 3090, 3200))
	if lf := chaos.CheckLimit(scope, specs, execs, faults); lf.Exceeded != 1 || lf.Peak != 3 {
		t.Fatalf("a start past the limit not caught: %+v", lf)
	}
}

// An execution whose function began after a later attempt of its task had started (its
// worker claimed it, froze before the function began, and resumed after a peer took the
// task over) is a zombie from its first instant: it counts in the zombie peak, never as
// a current attempt.
func TestCheckLimitZombieThatStartsLate(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	specs := []chaos.Spec{{Queue: "q", ID: "a", Function: "sleep"}, {Queue: "q", ID: "b", Function: "sleep"}}
	ex := func(id string, attempt int64, pid, start, finish int) *chaos.Exec {
		return &chaos.Exec{Queue: "q", Task: id, Attempt: attempt, PID: pid, Start: at(start), Finish: at(finish), Outcome: chaos.OutcomeOK}
	}
	scope := chaos.ConcScope{Queue: "q", Function: "sleep", Concurrency: 2}
	execs := []*chaos.Exec{
		ex("a", 2, 2, 1000, 2000), // the peer's attempt
		ex("a", 1, 1, 1005, 1010), // the resumed worker's stale one, begun 5 ms later
		ex("b", 1, 2, 500, 3000),
	}
	lf := chaos.CheckLimit(scope, specs, execs, nil)
	if lf.Peak != 2 || lf.Exceeded != 0 || lf.ZombiePeak != 3 || lf.ZombieFor != 5*time.Millisecond {
		t.Fatalf("findings %+v", lf)
	}
}
