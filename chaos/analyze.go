package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dtq/dtq/client"
)

// Fault kinds.
const (
	FaultKill           = "kill"            // SIGKILL of a worker process
	FaultLeaderKill     = "leader-kill"     // SIGKILL of the process holding the scheduler lock
	FaultTerm           = "term"            // SIGTERM (drain), then a new process
	FaultFreeze         = "freeze"          // SIGSTOP past the visibility timeout, then SIGCONT
	FaultRedisRestart   = "redis-restart"   // SIGKILL of redis-server, restarted on its AOF
	FaultCut            = "cut"             // every connection through the proxy dropped
	FaultReplyCut       = "reply-cut"       // a connection dropped as the reply to a chosen command arrived
	FaultOutage         = "outage"          // Redis unreachable: connections dropped and refused
	FaultDelay          = "delay"           // every packet delayed
	FaultLongOutage     = "long-outage"     // Redis unreachable for twice the visibility timeout
	FaultBurst          = "burst"           // one EnqueueMany over every band of every queue
	FaultPause          = "pause"           // a queue paused, then resumed
	FaultBroken         = "broken-key"      // a band stream of one queue made a string
	FaultBrokenSchedule = "broken-schedule" // the schedule zset of one queue made a string
	FaultRegistry       = "registry"        // PREFIX:queues deleted
	FaultCancel         = "cancel"          // client.CancelTask of a task, most often a running one
)

// Fault is one injected fault. PID 0 means it hit every worker (a Redis fault).
type Fault struct {
	Kind   string    `json:"kind"`
	Worker string    `json:"worker,omitempty"`
	PID    int       `json:"pid,omitempty"`
	At     time.Time `json:"at"`
	End    time.Time `json:"end"` // when the process was gone, resumed or Redis answered again
	// Silences, for a Redis fault, is how long after it a worker may count as having gone
	// silent: its heartbeats and completions did not reach Redis, so a peer may take its
	// task over once the visibility timeout passed (the harness sets 2× that timeout).
	Silences time.Duration `json:"silences_ns,omitempty"`
	// Queue and Key name what a pause or a broken key hit.
	Queue string `json:"queue,omitempty"`
	Key   string `json:"key,omitempty"`
	// A pause: At is when Pause returned and End when Resume was sent. Before and After
	// map a task id of the queue to its record's attempt read just before Pause was sent
	// and just after it returned: an attempt up to Before's was started in Redis before
	// the pause; one above Before's and up to After's was claimed in the few milliseconds
	// Pause took; any other start in the window broke the pause.
	Before map[string]int64 `json:"-"`
	After  map[string]int64 `json:"-"`
	// Probes of a broken key: "queue\x00id" of quick tasks enqueued on the other queues
	// as the key broke; each of those queues must start one before it is mended.
	Probes []string `json:"-"`
	// A cancel (Key: the task id): what CancelTask said ("cancelled", "requested", or
	// "ended STATUS" when it refused) and the record's attempt read just after it
	// returned; no attempt above it may start.
	Said    string `json:"said,omitempty"`
	Attempt int64  `json:"attempt,omitempty"`
	// HandedDead holds the probes the enqueue handed to a waiting worker that was gone
	// (killed or frozen): they wait for the leader's rescue, so their queue may start
	// nothing in the window without a stall.
	HandedDead map[string]bool `json:"-"`
}

// Spec is a task as the harness enqueued it.
type Spec struct {
	Queue, ID, Function string
	Priority            int
	MaxRetries          int
	Times               int       // planned failures (function "fail")
	RunAt               time.Time // zero: at once
	Long                bool      // sleeps 2–3× the visibility timeout
}

// plannedDead reports whether the task is meant to end dead: more planned failures than
// retries.
func (s Spec) plannedDead() bool { return s.Function == "fail" && s.Times > s.MaxRetries }

// Final is a task record as read from Redis after the run.
type Final struct {
	Status   client.Status
	Attempt  int64
	Failures int64
	Result   string
	Error    string
	Missing  bool
}

// Findings are what the ledger, the task records and the fault log say together.
type Findings struct {
	Executions     int `json:"executions"`
	Succeeded      int `json:"succeeded"`
	Dead           int `json:"dead"`
	DeadPlanned    int `json:"dead_planned"`     // fail tasks with more planned failures than retries
	DeadWorkerLost int `json:"dead_worker_lost"` // retries used up by lost workers (kills, freezes)
	Lost           int `json:"lost"`             // not succeeded, dead or cancelled at the end
	// LostBrokenSchedule: of the lost, tasks left "retrying" by an execution that failed
	// while its queue's schedule was a string (the retry was never scheduled).
	LostBrokenSchedule int `json:"lost_broken_schedule"`
	DuplicateStarts    int `json:"duplicate_starts"` // a (task, attempt) started more than once
	Retries            int `json:"retries"`          // a next attempt after an attempt that failed
	Reexecutions       int `json:"reexecutions"`     // a next attempt after one that did not fail
	ReexecKill         int `json:"reexec_kill"`
	ReexecFreeze       int `json:"reexec_freeze"`
	ReexecTerm         int `json:"reexec_term"`  // drain deadline passed, function cancelled, handed back
	ReexecRedis        int `json:"reexec_redis"` // the worker's heartbeats could not reach Redis (a Redis fault)
	// ReexecOutage: the task of a worker that stayed alive was taken over because Redis
	// was unreachable for longer than the visibility timeout (a long outage).
	ReexecOutage    int `json:"reexec_outage"`
	LongReexec      int `json:"long_reexec"`      // re-executions of tasks longer than the visibility timeout
	LongUnexplained int `json:"long_unexplained"` // of which no fault explains (in Unexplained too)
	// Starts of a paused queue's tasks between Pause returning and Resume: started in
	// Redis before the pause (held), claimed while Pause was on its way (straddle), or
	// started after it (PauseStarts, a violation).
	PauseHeld     int `json:"pause_held"`
	PauseStraddle int `json:"pause_straddle"`
	PauseStarts   int `json:"pause_starts"`
	// Cancels: what CancelTask said (done: it was waiting; requested: it was running;
	// too late: it had ended). CancelledRunning: of the requested, those that ended
	// cancelled. CancelStarts: attempts started after a cancel that did not come too
	// late; CancelUnasked: tasks cancelled nobody cancelled; CancelBroken: a cancel's
	// answer the final record contradicts. The last three are violations.
	CancelsDone      int `json:"cancels_done"`
	CancelsRequested int `json:"cancels_requested"`
	CancelsTooLate   int `json:"cancels_too_late"`
	CancelledRunning int `json:"cancelled_running"`
	CancelStarts     int `json:"cancel_starts"`
	CancelUnasked    int `json:"cancel_unasked"`
	CancelBroken     int `json:"cancel_broken"`
	// BrokenStalls counts other queues that started nothing (their probes waiting) while
	// a key of one queue was broken.
	BrokenStalls int `json:"broken_stalls"`
	// BrokenProbesHandedDead counts probes of a broken key handed to a gone worker (not
	// stalls: the leader's rescue runs them).
	BrokenProbesHandedDead int `json:"broken_probes_handed_dead"`
	Unexplained            int `json:"unexplained"` // re-executions no fault on their worker explains
	// LateFinishes are executions that finished after a newer attempt of their task had
	// started (a frozen worker resuming): their completion must have been fenced off.
	LateFinishes int `json:"late_finishes"`
	// SkippedAttempts are attempt numbers a task went through without any execution: a
	// claim whose worker died (or whose reply was lost) before the function started.
	SkippedAttempts  int `json:"skipped_attempts"`
	WrongOutcome     int `json:"wrong_outcome"` // a record's outcome that is not its current attempt's
	UnexpectedDead   int `json:"unexpected_dead"`
	UnexpectedAlive  int `json:"unexpected_succeeded"`
	EarlyStarts      int `json:"early_starts"` // a delayed task started before its time
	UnknownExecution int `json:"unknown_executions"`

	Problems []string `json:"problems,omitempty"` // one line per violation (capped)
}

const maxProblems = 50

func (f *Findings) problem(format string, a ...any) {
	if len(f.Problems) < maxProblems {
		f.Problems = append(f.Problems, fmt.Sprintf(format, a...))
	}
}

// Analyze checks the invariants of docs/design.md against what happened.
func Analyze(specs []Spec, finals map[string]Final, execs []*Exec, faults []Fault) Findings {
	var f Findings
	f.Executions = len(execs)
	key := func(q, id string) string { return q + "\x00" + id }
	byTask := map[string][]*Exec{}
	for _, e := range execs {
		byTask[key(e.Queue, e.Task)] = append(byTask[key(e.Queue, e.Task)], e)
	}
	faultsOf := map[int][]Fault{}
	for _, ft := range faults {
		faultsOf[ft.PID] = append(faultsOf[ft.PID], ft)
	}
	known := map[string]bool{}
	for _, s := range specs {
		k := key(s.Queue, s.ID)
		known[k] = true
		fin := finals[k]
		switch {
		case fin.Missing:
			f.Lost++
			f.problem("lost: %s/%s has no task record", s.Queue, s.ID)
		case fin.Status == client.StatusSucceeded:
			f.Succeeded++
		case fin.Status == client.StatusDead:
			f.Dead++
		case fin.Status == client.StatusCancelled:
		default:
			f.Lost++
			why := ""
			if lostToBrokenSchedule(s, fin, byTask[k], faults) {
				f.LostBrokenSchedule++
				why = " (its failure was recorded while the queue's schedule was not a zset)"
			}
			f.problem("lost: %s/%s ended %q at attempt %d%s", s.Queue, s.ID, fin.Status, fin.Attempt, why)
		}
		list := byTask[k]
		sort.SliceStable(list, func(i, j int) bool {
			if list[i].Attempt != list[j].Attempt {
				return list[i].Attempt < list[j].Attempt
			}
			return list[i].Start.Before(list[j].Start)
		})
		// invariant 2: one start per (task, attempt)
		for i := 1; i < len(list); i++ {
			if list[i].Attempt == list[i-1].Attempt {
				f.DuplicateStarts++
				f.problem("duplicate start: %s/%s attempt %d on %s and %s", s.Queue, s.ID, list[i].Attempt, list[i-1].Worker, list[i].Worker)
			}
		}
		if len(list) > 0 && !s.RunAt.IsZero() && list[0].Start.UnixMilli() < s.RunAt.UnixMilli() {
			f.EarlyStarts++
			f.problem("early start: %s/%s due %s started %s", s.Queue, s.ID, s.RunAt.Format(time.RFC3339Nano), list[0].Start.Format(time.RFC3339Nano))
		}
		// attempts that never executed
		var next int64 = 1
		for _, e := range list {
			if e.Attempt > next {
				f.SkippedAttempts += int(e.Attempt - next)
			}
			next = max(next, e.Attempt+1)
		}
		if fin.Attempt >= next && fin.Status != client.StatusCancelled {
			f.SkippedAttempts += int(fin.Attempt - next + 1)
		}
		// invariant 4: re-execution only after a death (or a freeze) of the worker
		for i := 1; i < len(list); i++ {
			prev, cur := list[i-1], list[i]
			if prev.Attempt == cur.Attempt {
				continue
			}
			if prev.Outcome == OutcomeErr {
				f.Retries++
				continue
			}
			f.Reexecutions++
			if s.Long {
				f.LongReexec++
			}
			switch explain(prev, cur, append(faultsOf[prev.PID], faultsOf[0]...)) {
			case FaultKill, FaultLeaderKill:
				f.ReexecKill++
			case FaultFreeze:
				f.ReexecFreeze++
			case FaultTerm:
				f.ReexecTerm++
			case "redis":
				f.ReexecRedis++
			case FaultLongOutage:
				f.ReexecOutage++
			default:
				f.Unexplained++
				if s.Long {
					f.LongUnexplained++
				}
				f.problem("unexplained re-execution: %s/%s attempt %d (%s pid %d, started %s, finish %q) ran again as attempt %d on %s at %s",
					s.Queue, s.ID, prev.Attempt, prev.Worker, prev.PID, prev.Start.Format("15:04:05.000"), prev.Outcome,
					cur.Attempt, cur.Worker, cur.Start.Format("15:04:05.000"))
			}
		}
		for i, e := range list {
			if e.Outcome != "" && i+1 < len(list) && list[i+1].Attempt > e.Attempt && e.Finish.After(list[i+1].Start) {
				f.LateFinishes++
			}
		}
		// invariant 3: the recorded outcome is the current attempt's own
		if fin.Status == client.StatusSucceeded {
			var own *Exec
			for _, e := range list {
				if e.Attempt == fin.Attempt && e.Outcome == OutcomeOK {
					own = e
				}
			}
			if own == nil || fin.Result != own.Worker+"/"+strconv.FormatInt(fin.Attempt, 10) {
				f.WrongOutcome++
				f.problem("wrong outcome: %s/%s succeeded at attempt %d with result %q; ledger has no matching successful execution", s.Queue, s.ID, fin.Attempt, fin.Result)
			}
		}
		if fin.Status == client.StatusDead {
			switch {
			case s.plannedDead():
				f.DeadPlanned++
			case strings.Contains(fin.Error, "worker lost"):
				f.DeadWorkerLost++
			default:
				f.UnexpectedDead++
				f.problem("unexpected dead: %s/%s (%s) at attempt %d: %s", s.Queue, s.ID, s.Function, fin.Attempt, fin.Error)
			}
		}
		if fin.Status == client.StatusSucceeded && s.plannedDead() {
			f.UnexpectedAlive++
			f.problem("unexpected success: %s/%s planned %d failures with %d retries", s.Queue, s.ID, s.Times, s.MaxRetries)
		}
	}
	f.checkPauses(execs, faults)
	f.checkBroken(execs, faults)
	f.checkCancels(finals, byTask, faults)
	for k, list := range byTask {
		if !known[k] {
			f.UnknownExecution += len(list)
			f.problem("execution of a task nobody enqueued: %q", strings.ReplaceAll(k, "\x00", "/"))
		}
	}
	return f
}

// resumeGrace bounds how long after a SIGCONT a frozen worker's executor starts a
// function it had claimed before the freeze (the claim is not in the ledger, the start
// is), and how long after a Redis fault a worker starts a function whose claim's reply
// the fault held back.
const resumeGrace = 2 * time.Second

// explain returns the kind of the fault on prev's process that explains why the task ran
// again as cur, or "". A fault explains it when it hit the process after attempt N
// could have been claimed and before attempt N+1 started: at or after prev's start, or
// while prev's start was being written (a signal is recorded as sent just before it
// lands), or, for a freeze, just before a start the resumed executor made for a claim it
// had taken before the freeze.
func explain(prev, cur *Exec, faults []Fault) string {
	best := ""
	for _, ft := range faults {
		if ft.At.After(cur.Start) {
			continue
		}
		if ft.PID == 0 {
			// A Redis fault silences every worker for a while: attempt N, running when it
			// hit, may be taken over soon after. Or claimed when it hit: the claim's reply
			// was lost and came back once Redis answered again (a resent claim gets its
			// receipt), so the function started just after the fault, while a reaper was
			// taking the entry, idle since the claim, over.
			if ft.Silences > 0 && !prev.Start.After(ft.End.Add(resumeGrace)) && cur.Start.Sub(ft.End) <= ft.Silences {
				if ft.Kind == FaultLongOutage {
					return FaultLongOutage // the worker outlived it: counted apart
				}
				if best == "" {
					best = "redis"
				}
			}
			continue
		}
		end := ft.End
		if end.Before(ft.At) {
			end = ft.At
		}
		if ft.Kind == FaultFreeze {
			end = end.Add(resumeGrace)
		}
		if prev.Start.After(end) {
			continue
		}
		switch ft.Kind {
		case FaultKill, FaultLeaderKill, FaultFreeze:
			return ft.Kind
		case FaultTerm:
			// a drain only gives a task away when its deadline passed: the function was
			// cancelled (or never returned)
			if prev.Outcome == OutcomeCancel || prev.Outcome == "" {
				best = FaultTerm
			}
		}
	}
	return best
}

// Violations lists every broken invariant of the findings, empty when all hold.
func (f Findings) Violations() []string {
	var v []string
	add := func(n int, what string) {
		if n > 0 {
			v = append(v, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(f.Lost, "tasks lost")
	add(f.DuplicateStarts, "duplicate starts of one attempt")
	add(f.Unexplained, "re-executions no kill or freeze explains")
	add(f.WrongOutcome, "task records holding an outcome that is not their current attempt's")
	add(f.UnexpectedDead, "tasks dead that should have succeeded")
	add(f.UnexpectedAlive, "tasks succeeded that should have died")
	add(f.EarlyStarts, "delayed tasks started early")
	add(f.CancelStarts, "attempts started after their task's cancel")
	add(f.CancelUnasked, "tasks cancelled that nobody cancelled")
	add(f.CancelBroken, "cancels whose answer the final record contradicts")
	add(f.UnknownExecution, "executions of tasks nobody enqueued")
	add(f.PauseStarts, "starts of a paused queue's tasks after Pause returned")
	add(f.BrokenStalls, "queues that started nothing while another queue's key was broken")
	return v
}

// checkPauses checks every pause: between Pause returning and Resume being sent, no task
// of the paused queue starts unless Redis had started it (a claim, or a hand-off to an
// idle worker) before the pause.
func (f *Findings) checkPauses(execs []*Exec, faults []Fault) {
	for _, ft := range faults {
		if ft.Kind != FaultPause {
			continue
		}
		for _, e := range execs {
			if e.Queue != ft.Queue || !e.Start.After(ft.At) || !e.Start.Before(ft.End) {
				continue
			}
			b, seen := ft.Before[e.Task]
			switch {
			case seen && e.Attempt <= b:
				f.PauseHeld++
			case e.Attempt <= ft.After[e.Task]:
				f.PauseStraddle++
			default:
				f.PauseStarts++
				f.problem("start while paused: %s/%s attempt %d on %s at %s, paused %s–%s (record's attempt %d before Pause, %d after)",
					e.Queue, e.Task, e.Attempt, e.Worker, e.Start.Format("15:04:05.000"), ft.At.Format("15:04:05.000"),
					ft.End.Format("15:04:05.000"), b, ft.After[e.Task])
			}
		}
	}
}

// checkBroken checks that while one queue's key was broken, every other queue started
// tasks: each had work (the probes enqueued on it as the key broke, if nothing else), so
// a queue that started nothing in the window was stalled by another queue's key. (A
// probe itself may wait behind a backlog of more urgent tasks; the backlog then runs.)
func (f *Findings) checkBroken(execs []*Exec, faults []Fault) {
	for _, ft := range faults {
		if ft.Kind != FaultBroken && ft.Kind != FaultBrokenSchedule {
			continue
		}
		ran := map[string]bool{} // queue -> started a task in the window
		for _, p := range ft.Probes {
			q, _, _ := strings.Cut(p, "\x00")
			ran[q] = ran[q] || ft.HandedDead[p]
			if ft.HandedDead[p] {
				f.BrokenProbesHandedDead++
			}
		}
		for _, e := range execs {
			if _, other := ran[e.Queue]; other && !e.Start.Before(ft.At) && e.Start.Before(ft.End) {
				ran[e.Queue] = true
			}
		}
		for q, ok := range ran {
			if !ok {
				f.BrokenStalls++
				f.problem("queue %s started nothing while %s was broken (%s–%s), though its probe waited", q, ft.Key,
					ft.At.Format("15:04:05.000"), ft.End.Format("15:04:05.000"))
			}
		}
	}
}

// lostToBrokenSchedule reports whether a task left retrying was last failed by an
// execution that finished while its queue's schedule zset was broken.
func lostToBrokenSchedule(s Spec, fin Final, list []*Exec, faults []Fault) bool {
	if fin.Status != client.StatusRetrying || len(list) == 0 {
		return false
	}
	last := list[0]
	for _, e := range list {
		if e.Attempt > last.Attempt || (e.Attempt == last.Attempt && e.Start.After(last.Start)) {
			last = e
		}
	}
	if last.Outcome != OutcomeErr {
		return false
	}
	for _, ft := range faults {
		if ft.Kind == FaultBrokenSchedule && ft.Queue == s.Queue && !last.Finish.Before(ft.At) && !last.Finish.After(ft.End) {
			return true
		}
	}
	return false
}

// checkCancels holds the cancels (FaultCancel) against the ledger and the final records:
// after a cancel that found the task waiting or running, no attempt above the one the
// record held just after it starts; a task the cancel found waiting ends cancelled; one
// it found ended stays so; and a task ends cancelled only if someone cancelled it.
func (f *Findings) checkCancels(finals map[string]Final, byTask map[string][]*Exec, faults []Fault) {
	asked := map[string]bool{}
	for _, ft := range faults {
		if ft.Kind != FaultCancel {
			continue
		}
		k := ft.Queue + "\x00" + ft.Key
		fin := finals[k]
		switch {
		case ft.Said == "cancelled":
			f.CancelsDone++
			asked[k] = true
			if fin.Status != client.StatusCancelled {
				f.CancelBroken++
				f.problem("cancel: %s/%s was cancelled while waiting but ended %q", ft.Queue, ft.Key, fin.Status)
			}
		case ft.Said == "requested":
			f.CancelsRequested++
			asked[k] = true
			if fin.Status == client.StatusCancelled {
				f.CancelledRunning++
			}
		default:
			f.CancelsTooLate++
			if want := strings.TrimPrefix(ft.Said, "ended "); want != string(fin.Status) {
				f.CancelBroken++
				f.problem("cancel: %s/%s had ended %q when cancelled but is %q", ft.Queue, ft.Key, want, fin.Status)
			}
			continue
		}
		for _, e := range byTask[k] {
			if e.Attempt > ft.Attempt {
				f.CancelStarts++
				f.problem("cancel: %s/%s attempt %d started after its cancel (%s at attempt %d)", ft.Queue, ft.Key, e.Attempt, ft.Said, ft.Attempt)
			}
		}
	}
	for k, fin := range finals {
		if fin.Status == client.StatusCancelled && !asked[k] {
			f.CancelUnasked++
			f.problem("cancel: %s ended cancelled, and nobody cancelled it", strings.ReplaceAll(k, "\x00", "/"))
		}
	}
}
