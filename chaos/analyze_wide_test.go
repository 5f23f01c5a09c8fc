package chaos_test

import (
	"testing"

	"github.com/dtq/dtq/chaos"
)

// A pause window: starts the record says Redis made before the pause are held over, one
// claimed while Pause was on its way straddles it, and any other start is a violation.
func TestAnalyzePause(t *testing.T) {
	t.Parallel()
	specs := []chaos.Spec{
		{Queue: "q", ID: "held", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "straddle", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "broke", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "retry", Function: "fail", Times: 1, MaxRetries: 3},
		{Queue: "q", ID: "after", Function: "noop", MaxRetries: 3},
		{Queue: "other", ID: "other", Function: "noop", MaxRetries: 3},
	}
	finals := map[string]chaos.Final{
		"q\x00held": ok("w1", "1"), "q\x00straddle": ok("w1", "1"), "q\x00broke": ok("w1", "1"),
		"q\x00retry": ok("w1", "2"), "q\x00after": ok("w1", "1"), "other\x00other": ok("w1", "1"),
	}
	otherEx := ex("other", 1, "w1", 10, 150, 160, chaos.OutcomeOK)
	otherEx.Queue = "other"
	execs := []*chaos.Exec{
		ex("held", 1, "w1", 10, 120, 130, chaos.OutcomeOK),     // handed off before the pause
		ex("straddle", 1, "w1", 10, 110, 130, chaos.OutcomeOK), // claimed while Pause was sent
		ex("broke", 1, "w1", 10, 500, 510, chaos.OutcomeOK),    // claimed after the pause
		ex("retry", 1, "w1", 10, 50, 60, chaos.OutcomeErr),
		ex("retry", 2, "w1", 10, 600, 610, chaos.OutcomeOK), // a retry that ran while paused
		ex("after", 1, "w1", 10, 1200, 1210, chaos.OutcomeOK),
		otherEx, // another queue runs on
	}
	faults := []chaos.Fault{{Kind: chaos.FaultPause, Queue: "q", At: at(100), End: at(1000),
		Before: map[string]int64{"held": 1, "straddle": 0, "broke": 0, "retry": 1, "after": 0},
		After:  map[string]int64{"held": 1, "straddle": 1, "broke": 0, "retry": 1, "after": 0}}}
	f := chaos.Analyze(specs, finals, execs, faults)
	if f.PauseHeld != 1 || f.PauseStraddle != 1 || f.PauseStarts != 2 {
		t.Fatalf("held %d, straddle %d, starts %d; want 1, 1, 2 (%v)", f.PauseHeld, f.PauseStraddle, f.PauseStarts, f.Problems)
	}
	if len(f.Violations()) != 1 {
		t.Fatalf("violations %v", f.Violations())
	}
}

// A broken key: each other queue must start tasks before the key is mended (here b's
// backlog runs ahead of its probe, c starts nothing until after the mend).
func TestAnalyzeBrokenKeyStall(t *testing.T) {
	t.Parallel()
	specs := []chaos.Spec{
		{Queue: "b", ID: "backlog", Function: "noop", MaxRetries: 3},
		{Queue: "c", ID: "probe", Function: "noop", MaxRetries: 3},
	}
	finals := map[string]chaos.Final{"b\x00backlog": ok("w1", "1"), "c\x00probe": ok("w1", "1")}
	pb := ex("backlog", 1, "w1", 10, 200, 210, chaos.OutcomeOK)
	pb.Queue = "b"
	pc := ex("probe", 1, "w1", 10, 1500, 1510, chaos.OutcomeOK) // only after the mend
	pc.Queue = "c"
	faults := []chaos.Fault{{Kind: chaos.FaultBroken, Queue: "a", Key: "x:{a}:p3", At: at(100), End: at(1100),
		Probes: []string{"b\x00probe", "c\x00probe"}}}
	f := chaos.Analyze(specs, finals, []*chaos.Exec{pb, pc}, faults)
	if f.BrokenStalls != 1 || len(f.Violations()) != 1 {
		t.Fatalf("stalls %d, violations %v; want 1 (queue c)", f.BrokenStalls, f.Violations())
	}

	// The same late start, when the enqueue had handed queue c's probe to a waiting
	// worker that was gone: the leader's rescue ran it, no stall.
	faults[0].HandedDead = map[string]bool{"c\x00probe": true}
	f = chaos.Analyze(specs, finals, []*chaos.Exec{pb, pc}, faults)
	if f.BrokenStalls != 0 || f.BrokenProbesHandedDead != 1 || len(f.Violations()) != 0 {
		t.Fatalf("stalls %d, handed to a gone worker %d, violations %v; want 0, 1, none",
			f.BrokenStalls, f.BrokenProbesHandedDead, f.Violations())
	}
}

// Re-executions after an outage longer than the visibility timeout are counted apart
// from the other Redis faults, and a strict run fails on them.
func TestAnalyzeLongOutage(t *testing.T) {
	t.Parallel()
	specs := []chaos.Spec{
		{Queue: "q", ID: "long", Function: "sleep", MaxRetries: 3, Long: true},
		{Queue: "q", ID: "short", Function: "sleep", MaxRetries: 3},
		{Queue: "q", ID: "unexplained", Function: "sleep", MaxRetries: 3, Long: true},
		{Queue: "q", ID: "replied", Function: "noop", MaxRetries: 3},
	}
	finals := map[string]chaos.Final{"q\x00long": ok("w2", "2"), "q\x00short": ok("w2", "2"), "q\x00unexplained": ok("w2", "2"),
		"q\x00replied": ok("w2", "2")}
	execs := []*chaos.Exec{
		ex("long", 1, "w1", 10, 0, 9000, chaos.OutcomeOK),
		ex("long", 2, "w2", 20, 7000, 16000, chaos.OutcomeOK),
		ex("short", 1, "w1", 10, 20000, 20500, chaos.OutcomeOK),
		ex("short", 2, "w2", 20, 22000, 22500, chaos.OutcomeOK),
		ex("unexplained", 1, "w1", 10, 40000, 49000, chaos.OutcomeOK),
		ex("unexplained", 2, "w2", 20, 44000, 53000, chaos.OutcomeOK),
		// claimed as the outage began, its reply back 113 ms after it, reclaimed meanwhile
		ex("replied", 1, "w1", 10, 6613, 6700, chaos.OutcomeOK),
		ex("replied", 2, "w2", 20, 6680, 6800, chaos.OutcomeOK),
	}
	faults := []chaos.Fault{
		{Kind: chaos.FaultLongOutage, At: at(500), End: at(6500), Silences: 6000 * 1e6},
		{Kind: chaos.FaultCut, At: at(20100), End: at(20100), Silences: 6000 * 1e6},
	}
	f := chaos.Analyze(specs, finals, execs, faults)
	if f.ReexecOutage != 2 || f.ReexecRedis != 1 || f.Unexplained != 1 || f.LongReexec != 2 || f.LongUnexplained != 1 {
		t.Fatalf("outage %d, redis %d, unexplained %d, long %d (%d unexplained); want 2, 1, 1, 2 (1)",
			f.ReexecOutage, f.ReexecRedis, f.Unexplained, f.LongReexec, f.LongUnexplained)
	}
	r := chaos.Report{Findings: f, Quiesced: true}
	if len(r.Violations()) != 1 {
		t.Fatalf("violations %v; want the unexplained one only", r.Violations())
	}
	r.StrictOutages = true
	if len(r.Violations()) != 2 {
		t.Fatalf("strict violations %v; want the outage one too", r.Violations())
	}
}

// A retry whose failure was recorded while its queue's schedule was a string is lost and
// said to be; one lost otherwise is not.
func TestAnalyzeLostToBrokenSchedule(t *testing.T) {
	t.Parallel()
	specs := []chaos.Spec{
		{Queue: "q", ID: "inwindow", Function: "fail", Times: 1, MaxRetries: 3},
		{Queue: "q", ID: "outside", Function: "fail", Times: 1, MaxRetries: 3},
	}
	finals := map[string]chaos.Final{
		"q\x00inwindow": {Status: "retrying", Attempt: 1}, "q\x00outside": {Status: "retrying", Attempt: 1},
	}
	execs := []*chaos.Exec{
		ex("inwindow", 1, "w1", 10, 150, 200, chaos.OutcomeErr),
		ex("outside", 1, "w1", 10, 1500, 1600, chaos.OutcomeErr),
	}
	faults := []chaos.Fault{{Kind: chaos.FaultBrokenSchedule, Queue: "q", Key: "x:{q}:schedule", At: at(100), End: at(1100)}}
	f := chaos.Analyze(specs, finals, execs, faults)
	if f.Lost != 2 || f.LostBrokenSchedule != 1 {
		t.Fatalf("lost %d, to the broken schedule %d; want 2, 1 (%v)", f.Lost, f.LostBrokenSchedule, f.Problems)
	}
}
