package chaos_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dtq/dtq/chaos"
	"github.com/dtq/dtq/runtime"
)

// The analysis is what turns a run into a verdict: each violation it must catch is
// planted here, so a harness that sees nothing cannot pass for one that checks.

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func ex(task string, attempt int64, worker string, pid, start, finish int, outcome string) *chaos.Exec {
	e := &chaos.Exec{Queue: "q", Task: task, Attempt: attempt, Worker: worker, PID: pid, Start: at(start), Outcome: outcome}
	if outcome != "" {
		e.Finish = at(finish)
	}
	return e
}

func ok(worker, attempt string) chaos.Final {
	return chaos.Final{Status: "succeeded", Attempt: int64(attempt[0] - '0'), Result: worker + "/" + attempt}
}

func TestAnalyzeCleanRun(t *testing.T) {
	t.Parallel()
	specs := []chaos.Spec{
		{Queue: "q", ID: "a", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "b", Function: "fail", Times: 1, MaxRetries: 3},
		{Queue: "q", ID: "c", Function: "fail", Times: 4, MaxRetries: 1},
		{Queue: "q", ID: "d", Function: "sleep", MaxRetries: 3, RunAt: at(100)},
	}
	finals := map[string]chaos.Final{
		"q\x00a": ok("w1", "1"),
		"q\x00b": ok("w2", "2"),
		"q\x00c": {Status: "dead", Attempt: 2, Error: "planned failure 2 of 4"},
		"q\x00d": ok("w1", "1"),
	}
	execs := []*chaos.Exec{
		ex("a", 1, "w1", 10, 0, 5, chaos.OutcomeOK),
		ex("b", 1, "w1", 10, 0, 5, chaos.OutcomeErr),
		ex("b", 2, "w2", 20, 50, 60, chaos.OutcomeOK),
		ex("c", 1, "w1", 10, 0, 5, chaos.OutcomeErr),
		ex("c", 2, "w1", 10, 50, 60, chaos.OutcomeErr),
		ex("d", 1, "w1", 10, 100, 110, chaos.OutcomeOK),
	}
	f := chaos.Analyze(specs, finals, execs, nil)
	if v := f.Violations(); len(v) != 0 {
		t.Fatalf("violations in a clean run: %v %v", v, f.Problems)
	}
	if f.Retries != 2 || f.Succeeded != 3 || f.DeadPlanned != 1 || f.Reexecutions != 0 {
		t.Fatalf("findings %+v", f)
	}
}

func TestAnalyzeCatchesEveryViolation(t *testing.T) {
	t.Parallel()
	specs := []chaos.Spec{
		{Queue: "q", ID: "lost", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "missing", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "dup", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "rerun", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "killed", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "termok", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "termcancel", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "frozen", Function: "sleep", MaxRetries: 3},
		{Queue: "q", ID: "overwritten", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "deadbad", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "deadlost", Function: "noop", MaxRetries: 0},
		{Queue: "q", ID: "alive", Function: "fail", Times: 5, MaxRetries: 1},
		{Queue: "q", ID: "early", Function: "noop", MaxRetries: 3, RunAt: at(1000)},
		{Queue: "q", ID: "skipped", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "resumed", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "resumedlate", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "signalled", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "cutoff", Function: "noop", MaxRetries: 3},
		{Queue: "q", ID: "cutofflate", Function: "noop", MaxRetries: 3},
	}
	finals := map[string]chaos.Final{
		"q\x00lost":        {Status: "running", Attempt: 1},
		"q\x00missing":     {Missing: true},
		"q\x00dup":         ok("w2", "1"),
		"q\x00rerun":       ok("w2", "2"),
		"q\x00killed":      ok("w2", "2"),
		"q\x00termok":      ok("w2", "2"),
		"q\x00termcancel":  ok("w2", "2"),
		"q\x00frozen":      ok("w2", "2"),
		"q\x00overwritten": {Status: "succeeded", Attempt: 2, Result: "w1/1"},
		"q\x00deadbad":     {Status: "dead", Attempt: 1, Error: "boom"},
		"q\x00deadlost":    {Status: "dead", Attempt: 2, Error: "worker lost during attempt 1"},
		"q\x00alive":       ok("w1", "1"),
		"q\x00early":       ok("w1", "1"),
		"q\x00skipped":     ok("w1", "3"),
		"q\x00resumed":     ok("w2", "2"),
		"q\x00resumedlate": ok("w2", "2"),
		"q\x00signalled":   ok("w2", "2"),
		"q\x00cutoff":      ok("w2", "2"),
		"q\x00cutofflate":  ok("w2", "2"),
	}
	execs := []*chaos.Exec{
		ex("lost", 1, "w1", 10, 0, 0, ""),
		ex("dup", 1, "w1", 10, 0, 5, chaos.OutcomeOK),
		ex("dup", 1, "w2", 20, 1, 6, chaos.OutcomeOK),
		// ran again though nothing happened to w1
		ex("rerun", 1, "w1", 10, 0, 0, ""),
		ex("rerun", 2, "w2", 20, 100, 110, chaos.OutcomeOK),
		// w1 (pid 11) killed while attempt 1 ran: explained
		ex("killed", 1, "w1", 11, 0, 0, ""),
		ex("killed", 2, "w2", 20, 100, 110, chaos.OutcomeOK),
		// a SIGTERM explains a re-execution only when the drain cancelled the function
		ex("termok", 1, "w1", 12, 0, 20, chaos.OutcomeOK),
		ex("termok", 2, "w2", 20, 100, 110, chaos.OutcomeOK),
		ex("termcancel", 1, "w1", 12, 0, 20, chaos.OutcomeCancel),
		ex("termcancel", 2, "w2", 20, 100, 110, chaos.OutcomeOK),
		// frozen: the late finish comes after attempt 2 started
		ex("frozen", 1, "w1", 13, 0, 500, chaos.OutcomeOK),
		ex("frozen", 2, "w2", 20, 100, 110, chaos.OutcomeOK),
		// attempt 1's late completion overwrote attempt 2's outcome
		ex("overwritten", 1, "w1", 13, 0, 500, chaos.OutcomeOK),
		ex("overwritten", 2, "w2", 20, 100, 110, chaos.OutcomeOK),
		ex("deadbad", 1, "w1", 10, 0, 5, chaos.OutcomeErr),
		ex("alive", 1, "w1", 10, 0, 5, chaos.OutcomeOK),
		ex("early", 1, "w1", 10, 999, 1005, chaos.OutcomeOK),
		ex("skipped", 1, "w1", 11, 0, 0, ""),
		ex("skipped", 3, "w1", 10, 200, 210, chaos.OutcomeOK),
		// claimed by w1 before its freeze, started right after the SIGCONT, after a peer
		// had reclaimed it: explained; started long after the resume: not
		ex("resumed", 1, "w1", 13, 410, 420, chaos.OutcomeOK),
		ex("resumed", 2, "w2", 20, 300, 310, chaos.OutcomeOK),
		ex("resumedlate", 1, "w1", 13, 9000, 9010, chaos.OutcomeOK),
		ex("resumedlate", 2, "w2", 20, 300, 310, chaos.OutcomeOK),
		// started between the harness noting the kill and the signal landing
		ex("signalled", 1, "w1", 14, 51, 0, ""),
		ex("signalled", 2, "w2", 20, 300, 310, chaos.OutcomeOK),
		// running when Redis restarted, taken over soon after: explained; long after: not
		ex("cutoff", 1, "w1", 15, 1000, 1100, chaos.OutcomeOK),
		ex("cutoff", 2, "w2", 20, 3000, 3010, chaos.OutcomeOK),
		ex("cutofflate", 1, "w1", 15, 1000, 1100, chaos.OutcomeOK),
		ex("cutofflate", 2, "w2", 20, 9000, 9010, chaos.OutcomeOK),
		{Queue: "q", Task: "stranger", Attempt: 1, Worker: "w1", PID: 10, Start: at(0)},
	}
	faults := []chaos.Fault{
		{Kind: chaos.FaultKill, Worker: "w1", PID: 11, At: at(50)},
		{Kind: chaos.FaultTerm, Worker: "w1", PID: 12, At: at(10)},
		{Kind: chaos.FaultFreeze, Worker: "w1", PID: 13, At: at(10), End: at(400)},
		{Kind: chaos.FaultKill, Worker: "w1", PID: 14, At: at(50), End: at(52)},
		{Kind: chaos.FaultRedisRestart, At: at(1050), End: at(1500), Silences: 2 * time.Second},
	}
	f := chaos.Analyze(specs, finals, execs, faults)
	want := map[string][2]int{
		"Lost":             {f.Lost, 2},
		"DuplicateStarts":  {f.DuplicateStarts, 1},
		"Unexplained":      {f.Unexplained, 4}, // rerun, termok, resumedlate, cutofflate
		"ReexecRedis":      {f.ReexecRedis, 1},
		"ReexecKill":       {f.ReexecKill, 3}, // killed, skipped (attempt 1 → 3), signalled
		"ReexecTerm":       {f.ReexecTerm, 1},
		"ReexecFreeze":     {f.ReexecFreeze, 3}, // frozen, overwritten, resumed
		"LateFinishes":     {f.LateFinishes, 4},
		"WrongOutcome":     {f.WrongOutcome, 1}, // overwritten
		"UnexpectedDead":   {f.UnexpectedDead, 1},
		"DeadWorkerLost":   {f.DeadWorkerLost, 1},
		"UnexpectedAlive":  {f.UnexpectedAlive, 1},
		"EarlyStarts":      {f.EarlyStarts, 1},
		"SkippedAttempts":  {f.SkippedAttempts, 3}, // skipped: attempt 2; deadlost: 1 and 2
		"UnknownExecution": {f.UnknownExecution, 1},
	}
	for name, gw := range want {
		if gw[0] != gw[1] {
			t.Errorf("%s = %d, want %d", name, gw[0], gw[1])
		}
	}
	if len(f.Violations()) != 8 {
		t.Errorf("violations %v, want 8 kinds", f.Violations())
	}
	if t.Failed() {
		for _, p := range f.Problems {
			t.Log(p)
		}
	}
}

// The ledger a worker writes reads back as executions, with the result rewritten to
// name the execution.
func TestLedgerRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := chaos.OpenLedger(dir, "w9")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	okFn := l.Wrap(func(context.Context, *runtime.Task) ([]byte, error) { return []byte("x"), nil })
	errFn := l.Wrap(func(context.Context, *runtime.Task) ([]byte, error) { return nil, errors.New("no") })
	hang := l.Wrap(func(ctx context.Context, _ *runtime.Task) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() })
	res, _ := okFn(context.Background(), &runtime.Task{Queue: "q", ID: "a", Attempt: 2})
	if string(res) != "w9/2" {
		t.Fatalf("result %q, want w9/2", res)
	}
	_, _ = errFn(context.Background(), &runtime.Task{Queue: "q", ID: "b", Attempt: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = hang(ctx, &runtime.Task{Queue: "q", ID: "c", Attempt: 1})
	execs, torn, err := chaos.ReadLedgers(dir)
	if err != nil || torn != 0 || len(execs) != 3 {
		t.Fatalf("read %d execs, %d torn, %v", len(execs), torn, err)
	}
	got := map[string]string{}
	for _, e := range execs {
		got[e.Task] = e.Outcome
		if e.Worker != "w9" || e.PID == 0 || e.Finish.Before(e.Start) {
			t.Errorf("exec %+v", e)
		}
	}
	if got["a"] != chaos.OutcomeOK || got["b"] != chaos.OutcomeErr || got["c"] != chaos.OutcomeCancel {
		t.Fatalf("outcomes %v", got)
	}
}
