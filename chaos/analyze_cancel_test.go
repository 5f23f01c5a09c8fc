package chaos_test

import (
	"testing"

	"github.com/dtq/dtq/chaos"
)

// Cancels racing completions: the analysis accepts every honest ending and catches a
// start after a cancel, a cancel nobody made, and an answer the record contradicts.
func TestAnalyzeCancels(t *testing.T) {
	t.Parallel()
	specs := []chaos.Spec{
		{Queue: "q", ID: "waiting", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "stopped", Function: "sleep", MaxRetries: 3},
		{Queue: "q", ID: "finished", Function: "sleep", MaxRetries: 3},
		{Queue: "q", ID: "late", Function: "noop", MaxRetries: 3},
	}
	cancel := func(id, said string, attempt int64) chaos.Fault {
		return chaos.Fault{Kind: chaos.FaultCancel, Queue: "q", Key: id, At: at(20), End: at(20), Said: said, Attempt: attempt}
	}
	faults := []chaos.Fault{cancel("waiting", "cancelled", 0), cancel("stopped", "requested", 1), cancel("finished", "requested", 1), cancel("late", "ended succeeded", 1)}
	finals := map[string]chaos.Final{
		"q\x00waiting":  {Status: "cancelled"},
		"q\x00stopped":  {Status: "cancelled", Attempt: 1},
		"q\x00finished": ok("w1", "1"),
		"q\x00late":     ok("w1", "1"),
	}
	execs := []*chaos.Exec{
		ex("stopped", 1, "w1", 10, 0, 30, chaos.OutcomeCancel),
		ex("finished", 1, "w1", 10, 0, 21, chaos.OutcomeOK),
		ex("late", 1, "w1", 10, 0, 5, chaos.OutcomeOK),
	}
	f := chaos.Analyze(specs, finals, execs, faults)
	if v := f.Violations(); len(v) != 0 {
		t.Fatalf("violations in an honest run: %v %v", v, f.Problems)
	}
	if f.CancelsDone != 1 || f.CancelsRequested != 2 || f.CancelledRunning != 1 || f.CancelsTooLate != 1 {
		t.Fatalf("findings %+v", f)
	}

	// a reclaim that ran the cancelled task again, a cancel out of nowhere, a waiting
	// task that ran anyway, an ended task whose record changed after
	execs = append(execs, ex("stopped", 2, "w2", 20, 40, 50, chaos.OutcomeOK), ex("waiting", 1, "w2", 20, 30, 35, chaos.OutcomeOK))
	finals["q\x00stopped"] = ok("w2", "2")
	finals["q\x00waiting"] = ok("w2", "1")
	specs = append(specs, chaos.Spec{Queue: "q", ID: "ghost", Function: "noop", MaxRetries: 3})
	finals["q\x00ghost"] = chaos.Final{Status: "cancelled"}
	finals["q\x00late"] = chaos.Final{Status: "dead", Attempt: 2, Error: "x"}
	f = chaos.Analyze(specs, finals, execs, faults)
	if f.CancelStarts != 2 || f.CancelUnasked != 1 || f.CancelBroken != 2 {
		t.Fatalf("planted cancel violations: starts %d unasked %d broken %d; want 2 1 2: %v", f.CancelStarts, f.CancelUnasked, f.CancelBroken, f.Problems)
	}
}
