package chaos_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dtq/dtq/chaos"
	"github.com/dtq/dtq/internal/redistest"
)

func TestMain(m *testing.M) {
	chaos.MaybeWorker() // the worker processes of a run are this binary again
	redistest.Main(m)
}

// logWriter sends the run's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The CI-sized chaos run: real worker processes and a real redis-server, 1 500 tasks
// across three queues and ten priorities (sleeps, planned failures, delayed tasks, a few
// tasks longer than the visibility timeout), and while they run: SIGKILLs, SIGTERM
// restarts, a freeze past the visibility timeout, a kill of the scheduler leader, a burst
// over every band of every queue, a pause and a band stream turned into a string. (Broken
// schedules and a deleted registry, which the long runs take, are left out: both still
// break an invariant, see docs/reliability.md.) Every invariant is checked against the ledger the
// functions wrote (chaos.Analyze); the long version is `go run ./chaos/cmd/chaos`.
func TestChaosCI(t *testing.T) {
	t.Parallel()
	o := chaos.Options{
		Workers: 3, Concurrency: 8, Tasks: 1500,
		EnqueueFor: 8 * time.Second, FaultEvery: time.Second,
		Kills: 2, Terms: 2, Freezes: 1, LeaderKills: 1,
		Bursts: 1, Pauses: 1, BrokenKeys: 1, Cancels: 2, LongShare: 0.005, ConcLimit: 6,
		VisibilityTimeout: 3 * time.Second, HeartbeatInterval: 300 * time.Millisecond,
		Deadline: 2 * time.Minute,
		Log:      logWriter{t},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, o)
	t.Log("\n" + rep.String())
	if err != nil {
		t.Fatal(err)
	}
	// The limits were in force: each reached its bound (never passed: Violations).
	if len(rep.Limits) != 2 {
		t.Fatalf("limits checked: %+v", rep.Limits)
	}
	for _, l := range rep.Limits {
		if l.Peak != o.ConcLimit {
			t.Fatalf("limit %s peaked at %d: the run did not press on it", l.Scope, l.Peak)
		}
	}
	if rep.Kills != o.Kills || rep.Terms != o.Terms || rep.Freezes != o.Freezes || rep.LeaderKills != o.LeaderKills {
		t.Fatalf("faults injected: %d kills, %d terms, %d freezes, %d leader kills; want all of %+v", rep.Kills, rep.Terms, rep.Freezes, rep.LeaderKills, o)
	}
	if rep.Tasks < o.Tasks || rep.Executions < rep.Tasks-rep.Delayed {
		t.Fatalf("%d tasks, %d executions: the run did not do its work", rep.Tasks, rep.Executions)
	}
	// The fencing case happened: the frozen worker resumed and finished its task after
	// a peer had started the next attempt, and the record kept the peer's outcome
	// (WrongOutcome, checked by Analyze, is 0).
	if rep.LateFinishes < rep.Freezes {
		t.Fatalf("%d late completions after %d freezes: the fencing case was not exercised", rep.LateFinishes, rep.Freezes)
	}
	if !errors.Is(err, nil) {
		t.Fatal(err)
	}
}

// Redis faults under workers running in this process, so that TestMain's goleak check
// covers them: replies to claims, completions and blocking reads dropped after Redis ran
// the command, every connection dropped, Redis unreachable, traffic slowed,
// redis-server killed -9 and restarted on its AOF (appendfsync always), an outage of
// twice the visibility timeout (its re-executions of live workers' tasks are counted,
// not failed), and the keyspace faults of TestChaosCI. The workers reconnect on their
// own (no crash, no loop restarting once Redis is back), and no task is lost or run
// twice.
func TestRedisFaultsCI(t *testing.T) {
	t.Parallel()
	o := chaos.Options{
		InProcess: true, Workers: 3, Concurrency: 8, Tasks: 800,
		EnqueueFor: 8 * time.Second, FaultEvery: 600 * time.Millisecond,
		RedisRestarts: 2, ConnCuts: 3, ReplyCuts: 6, Outages: 1, Delays: 1, LongOutages: 1,
		Bursts: 1, Pauses: 1, BrokenKeys: 1, Cancels: 2, LongShare: 0.005,
		VisibilityTimeout: 3 * time.Second, HeartbeatInterval: 300 * time.Millisecond,
		Deadline: 2 * time.Minute,
		Log:      logWriter{t},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, o)
	t.Log("\n" + rep.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.RedisRestarts != o.RedisRestarts || rep.ConnCuts != o.ConnCuts || rep.Outages != o.Outages || rep.Delays != o.Delays {
		t.Fatalf("faults injected: %+v; want all of %+v", rep, o)
	}
	if rep.ReplyCuts == 0 {
		t.Fatalf("no reply was dropped: the mid-script case was not exercised")
	}
	// Once Redis is healthy, a worker may still meet one connection that a fault
	// dropped while it sat idle (its loop logs and restarts once); a crash loop would
	// restart again and again.
	if rep.LoopRestartsAfter > o.Workers {
		t.Fatalf("%d loop restarts in a healthy batch after the faults: a crash loop", rep.LoopRestartsAfter)
	}
}
