// Package chaos proves dtq's invariants under fire. Run starts worker processes (or, for
// Redis faults, in-process workers) on a real redis-server, feeds them thousands of
// tasks across queues and priorities — sleeps, planned failures, delayed tasks — and
// while they run injects faults: SIGKILL, SIGTERM with a restart, SIGSTOP past the
// visibility timeout (the fencing case), a kill of the scheduler leader, redis-server
// killed -9 and restarted on its AOF, and, through a TCP proxy, dropped connections,
// replies dropped after Redis ran the command, outages and slow networks.
//
// Every execution is written to a ledger by the functions themselves (ledger.go), outside
// the runtime and outside Redis. When every task has ended (or a deadline passed), Analyze
// reads the ledger, the task records and the fault log, and checks DESIGN.md's
// invariants: nothing lost, one start per attempt, a recorded outcome is always its
// current attempt's own (fencing), a re-execution only after a kill or a freeze of the
// worker that ran the previous attempt, no delayed task early.
//
// `go test ./chaos` runs a CI-sized version; `go run ./chaos/cmd/chaos` (and bench's
// `chaos` command, through Run) the long one.
package chaos
