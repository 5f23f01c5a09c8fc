// Package chaos proves dtq's invariants under fire. Run starts worker processes (or, for
// Redis faults, in-process workers) on a real redis-server, feeds them thousands of
// tasks across queues and priorities — sleeps, planned failures, delayed tasks — and
// while they run injects faults: SIGKILL, SIGTERM with a restart, SIGSTOP past the
// visibility timeout (the fencing case), a kill of the scheduler leader, redis-server
// killed -9 and restarted on its AOF, and, through a TCP proxy, dropped connections,
// replies dropped after Redis ran the command, outages (some longer than the visibility
// timeout) and slow networks. Both kinds of run also take faults of the keyspace and the
// client (wide.go): one EnqueueMany over every band of every queue (entry ids repeat
// across streams), a queue paused and resumed while tasks arrive on it, a band stream or
// a schedule zset turned into a string for a second and mended, and the queue registry
// deleted. The mix holds tasks that sleep 2–3× the visibility timeout.
//
// Every execution is written to a ledger by the functions themselves (ledger.go), outside
// the runtime and outside Redis. When every task has ended (or a deadline passed), Analyze
// reads the ledger, the task records and the fault log, and checks docs/design.md's
// invariants: nothing lost, one start per attempt, a recorded outcome is always its
// current attempt's own (fencing), a re-execution only after a kill or a freeze of the
// worker that ran the previous attempt, no delayed task early, no task of a paused queue
// started after Pause returned, no queue stalled by another queue's broken key.
//
// `go test ./chaos` runs a CI-sized version; `go run ./chaos/cmd/chaos` (and bench's
// `chaos` command, through Run) the long one.
package chaos
