// Package runtime is the dtq worker: it runs registered functions on tasks read from
// per-priority Redis Streams, with the behaviour of docs/design.md (four supervised
// loops — poller, reaper, scheduler, heartbeat — beside a completer and an events
// publisher, observer-computed staleness, drain rules, a scheduler leader lock, three races
// closed in Lua). docs/data-model.md lists every key, hash field, member format and TTL
// it reads and writes.
//
// # Task states
//
//	          enqueue (run-at in the future)
//	                │
//	                ▼                       scheduler (leader): sched_claim.lua
//	           scheduled ─────────────────► (claimed) ── sched_enqueue.lua: XADD, then ZREM ──┐
//	                                                                                            │
//	enqueue ──────────────────────────────────────────────────────────────────────► queued ◄──┘
//	                                                                                  │  ▲
//	                             claim.lua (status queued, entry attempt ≥ task's)    │  │ retry due
//	                                                                                  ▼  │
//	reclaim (XAUTOCLAIM after the visibility timeout, attempt+1) ───────────────► running
//	                                                                                  │
//	           complete.lua, fenced on (status running, attempt, entry) ┌─────────────┼──────────────┐
//	                                                                    ▼             ▼              ▼
//	                                                               succeeded      retrying         dead
//	                                                                              (schedule)   (dead zset,
//	cancel.lua: queued | scheduled | retrying ──► cancelled                                    last error)
//
// Every finished, absorbed or dead entry is XACKed and XDELed, so a band's XLEN is its
// undelivered plus in-flight work.
//
// # The services, and the file of each mechanism
//
// Every loop is a service on internal/service: Start returns at once and runs the loop
// on its own goroutine, Stop ends it and waits (idempotent, safe before Start), and New
// starts nothing. Each loop runs under service.Supervise: an error or a panic is logged
// (and counted in dtq_worker_loop_restarts_total) and the loop restarts, after 10–30 ms
// or, while it keeps failing, up to 0.5–1.5 s; the worker never dies of a loop. Each
// loop's pass is a runOnce method, which the internal tests drive one by one. Worker
// (worker.go) composes them, beside core (its identity and collaborators, read-only
// once New returns) and tally (its state and counters, which change while it runs):
//
//	Run ─► events (events.go)       the best-effort publisher of lifecycle events
//	    ─► completer (completer.go)  records outcomes in batches (complete.lua)
//	    ─► poller (poller.go) ──► first fetch ──► heartbeat, reaper, scheduler
//	         │ starts executions            │
//	         ▼                              ▼
//	    holdings (holdings.go) ◄──── pool (exec.go): executors run the functions
//	    held executions, in-flight counters; shared by every service below
//
// The services and the other mechanisms, each in its file:
//
//   - poller (poller.go): capacity = concurrency − in flight − asked for (within
//     DTQ_WORKER_MAX_TASKS); for each queue in order, claim.lua reads up to
//     min(remaining, 32) new entries across bands p9 → p0 and starts them; paused queues
//     are skipped; the claim registers the worker for hand-offs on the queues its idle
//     read covers (waitsOn). When nothing was collected it blocks (internal/blockread:
//     an ended context unblocks the read at once), or ends the worker after DTQ_WORKER_IDLE_EXIT_S idle. A read that finds a
//     stream missing its group creates the groups. Its claim calls carry receipts
//     (receipts.go). Started tasks go to a fixed pool of DTQ_WORKER_CONCURRENCY executor
//     goroutines (exec.go): the design's semaphore, without a goroutine per task.
//     The busy path has a second claim loop, the lane (lane.go): while a queue's claims
//     come back full and at least 16 slots are free, the lane's claims on it run in
//     Redis beside the loop's; each claim holds the slots it asks for until its reply
//     is in (concurrency − in flight − asked for), so the two never start more than
//     the concurrency. The loop holds the lane off before it blocks or takes back a
//     lost read, and sends again a lane call whose reply was lost (its receipt).
//   - reaper (reaper.go): every max(0.5 s, visibility/2), jittered, claim.lua in reclaim
//     mode XAUTOCLAIMs entries idle past the visibility timeout on every band, at most
//     concurrency×2 per pass, and starts them as reclaimed executions. After an outage
//     every entry in flight looks idle past the timeout, the live owners' too: the
//     reaper touches its own worker's entries before each pass and names them to the
//     reclaim, which never takes them back from it; it holds its reclaims for two
//     heartbeat intervals plus 2 s after the worker last found Redis unreachable, or
//     after its own sleep overran by more than half the visibility timeout (a stalled
//     process or machine: the owners touch theirs meanwhile); and it bounds each reclaim
//     call, resends included, so one sent before an outage cannot run after it.
//   - scheduler (scheduler.go, with leader.go, retention.go and cron.go): every 1–1.2 s, one
//     pipelined pass. The leader type owns the scheduler lock: SET NX PX (lock TTL) with
//     the worker id, or, once a third of the TTL has passed since the lock was taken or
//     renewed, lock_renew.lua (token checked); lock_release.lua at drain; its state
//     (is-leader, locked-at), the dtq_worker_scheduler_leader gauge and the
//     SCHEDULER_LEADER_* events are its own. The leader moves due delayed tasks and
//     retries of every known queue (not only its own) onto their streams, re-enqueues
//     claims older than the lock TTL (a leader that died between its two steps left
//     them), rescues unread hand-offs of dead workers and trims dead tasks. It fires
//     periodic entries (cron.go): each due tick's task, id cron-NAME-TICK, then the
//     entry moved on by cron_advance.lua, a compare-and-set on the tick.
//   - heartbeat (heartbeat.go): at once and every DTQ_HEARTBEAT_INTERVAL_S, jittered, the
//     design's hash fields (plus heartbeat_interval_ms and queues) with expiry 3× the
//     interval, the id in dtq:workers, and touch.lua on every held entry. The scheduler
//     writes the heartbeat in its own pipeline when it falls due before its next pass.
//     It keeps running during a drain so long tasks finishing within the drain are not
//     reclaimed; the drain writes the final "stopped" heartbeat.
//   - completer (completer.go): whatever finished by the time the previous call returned
//     goes in the next complete.lua call, one per queue; settle counts and reports.
//   - events (events.go): a bounded buffer flushed in pipelines; see below.
//   - drain (drain.go): the ordered steps of SIGTERM in one function; hand-off and
//     hand-back (handoff.go): leave.lua, touchBack, the hand-back of deliveries and
//     inbox rows.
//
// # Stopping, and how long it takes
//
// Run drains when its ctx ends, on Stop (the same drain; Stop waits until Run returned
// or its own ctx ended), on StopAndCancel (the hard stop: no wait for running
// functions, which are cancelled and handed back at once), when Redis refuses the
// worker for good, or by itself (DTQ_WORKER_MAX_TASKS, DTQ_WORKER_IDLE_EXIT_S). Stop and
// StopAndCancel are safe twice and before Run (a later Run then drains at once). The
// drain (drain.go): stop the poller (its blocked read unblocked at once), reaper and
// scheduler, leaving the hand-off registrations before and after; write the "draining"
// heartbeat and release the scheduler lock; wait up to DTQ_DRAIN_TIMEOUT_S for running
// functions; then cancel them, wait 1 s, detach the ones ignoring cancellation and hand
// every entry without an outcome back; wait 1 s more for the executors; record the
// outcomes; stop the heartbeat and write the final one; flush the events.
//
// Every step that talks to Redis has its own bound, so Run returns after the drain
// began — Redis reachable or not — within (Worker.exitBound, tested with a function
// that ignores cancellation and the Redis server killed):
//
//	DTQ_DRAIN_TIMEOUT_S
//	+ max(1 s, DTQ_HEARTBEAT_INTERVAL_S)           the "draining" heartbeat
//	+ max(C, the reclaim bound ≤ 2 s) + C           a command in flight as the fetching
//	                                                loops and the heartbeat stop
//	+ 49 s: 2×(leave 2 + touch back 3 + hand back 2) + the poller's hand-back 3 + 2
//	        + lock release 1 + cancellation grace 1 + a heartbeat touch in flight 3
//	        + touch back 3 + executors' grace 1
//	        + completion call 5 + completion give-up 5 + final heartbeat 1
//	        + events: 5 flushes of 2 s (a 1024-event buffer, 256 a flush)
//
// where C bounds one command already on the wire: go-redis does not abandon it when
// its context is cancelled, so it is the client's dial, write and read timeouts (5 + 3
// + 3 s by default); a dead server's refused connection ends it at once. With the
// defaults (drain 30 s, heartbeat 5 s) that is 30 + 5 + 11 + 11 + 49 = 106 s; most
// steps take milliseconds, and only the drain timeout is spent waiting when Redis
// answers. A Kubernetes terminationGracePeriodSeconds shorter than the bound may kill
// the worker in its hand-back; peers then reclaim its entries after the visibility
// timeout.
//
// # The three races
//
//  1. Two claimants, one queued task (duplicate entries, racing batches): claim.lua starts a
//     task only when it is queued and the entry's attempt is not older than the task's; the
//     task's attempt becomes entry attempt + 1. The loser absorbs its entry: XACK + XDEL,
//     no run, TASK_DUPLICATE_ABSORBED.
//  2. Two reclaimers, one running entry: XAUTOCLAIM and the attempt increment are one
//     script, so exactly one reclaimer gets the new attempt; the entry must still be the
//     task's current one (else it is absorbed).
//  3. Two schedulers during a failover: sched_claim.lua moves due tasks schedule → claimed
//     atomically, so one scheduler sees each; sched_enqueue.lua XADDs before it ZREMs the
//     claim, and drops (without a second XADD) a claimed task that is already queued.
//
// # Where this runtime departs from docs/design.md, and why
//
//   - Idle blocking: one XREADGROUP (COUNT 1) blocks on every band of every unpaused queue
//     at once, instead of on the first queue's first band: a p0 arrival wakes the worker as
//     fast as a p9 one. It runs on a dedicated connection whose CLIENT ID the drain uses to
//     CLIENT UNBLOCK it, so an idle worker exits at once whatever DTQ_POLL_BLOCK_MS is (the
//     block only bounds idle round trips). What the blocking read delivers is claimed in the
//     same claim.lua call that tops the batch up. On Redis Cluster, whose queues live on
//     different slots, the block covers the first unpaused queue's bands, at most 500 ms.
//     While a queue the worker serves is paused the block lasts at most a second: a
//     paused queue is not read, so its resume would wake nobody, and the next claim sees
//     the flag gone. A read issued before the pause still delivers the queue's next
//     entries; claim.lua puts each back unstarted as a new entry (which wakes the next
//     reader still blocked, which learns of the pause the same way), and reclaims
//     nothing while the flag is set, so no task starts after the pause that its worker
//     did not already hold.
//   - Hand-off: an idle worker's pickup costs no claim round trip. A claim in read mode
//     that finds nothing registers the worker in the queue's waiting zset (member
//     "PAYLOADLIMIT WORKER", score: the end of the coming block + 1 s), and the blocking
//     read also covers the worker's inbox stream on that queue. enqueue.lua, for a task
//     to run now on an unpaused queue, pops one live registration, delivers the new entry
//     to that worker (XREADGROUP inside the script: it sits in the worker's PEL as a
//     claimed entry does) and writes the task running at attempt 1, and XADDs the started
//     row to the inbox: the read returns it and the function starts. A registration serves
//     once; a claim that starts anything ends it; drain ends it (leave.lua) before and
//     after the loops stop, handing back any unread row, and leaves a marker for a minute
//     so a claim of the draining process still in flight cannot register it again. Every
//     inbox row is noted in the queue's handed zset until the worker's next claim says it
//     was received. A worker SIGKILLed while registered leaves at most one task per queue
//     handed to it and never read: the scheduler leader's pass (rescue.lua, pipelined with
//     its scheduler claims) takes rows unread for a second from the dead worker's inbox
//     with XREADGROUP, as the worker would — whichever reads first owns the row — and puts
//     their tasks back on their streams at attempt 0 with a new entry (the old delivery
//     acked and deleted): the function never started, so no failure is counted, and a
//     peer starts it within about a scheduler interval (plus the lock TTL when the dead
//     worker was the leader) instead of a visibility timeout. The task's handback field
//     holds the attempt until that receipt too, so the visibility-timeout reclaim, should
//     it come first, counts no failure either. Delayed tasks, retries and requeues take
//     the ordinary path (the read wakes on the band, a claim follows). On a cluster the
//     worker registers on the queue its block covers only. A worker serving several
//     queues can get one hand-off from each at once, so it may briefly run up to one
//     task per extra queue beyond its concurrency, as a multi-band read already could.
//   - Reading and claiming are one script call per batch (XREADGROUP inside claim.lua), and
//     outcomes are recorded in batches (complete.lua; one call holds whatever finished
//     while the previous call ran). The task hash of an entry is named by the entry itself,
//     so claim.lua derives it from a key prefix of the same slot passed in KEYS.
//   - Fencing: complete.lua and touch.lua act only while the execution is the task's
//     current one (status running, same attempt, same entry). A worker that went silent
//     and lost its task cannot overwrite the newer attempt, ACK its entry, or — through
//     its heartbeat's XCLAIM — take the entry back from the reclaimer (the design's
//     unconditional XCLAIM with idle 0 would).
//     Its next heartbeat finds the execution fenced and cancels the function's context
//     (cause ErrLost): a worker that resumes after a freeze or an outage does not keep
//     running a task beside the attempt that replaced it. An execution not known to be
//     the worker's for half the visibility timeout (its claim, or the last touch that
//     held it) is touched once more before its function starts, and not started when
//     the task is no longer its own (Worker.confirm).
//   - Receipts (call names carry a per-process tag, so a restart under the same
//     DTQ_WORKER_ID never gets the previous process's reply): a claim call resent after its reply was lost (go-redis resends on a dropped
//     connection) finds its receipt, a key holding the first run's reply for at most a
//     minute, and returns that reply instead of claiming again; without it the tasks the
//     first run started would sit pending until the visibility timeout. A call that got
//     no reply at all (go-redis gave up, the loop failed and restarted) is sent again
//     under the same name as the loop's next call on that queue, so its receipt answers
//     if it ran. Each loop's next call on a queue deletes the previous receipt. A replay
//     returns only the starts still current (the task running that attempt from that
//     entry for this worker) and restarts their entries' idle clocks: a resend that came
//     after a reaper reclaimed one of them would otherwise run the old attempt beside the
//     new one.
//   - A reclaim after a silent death counts as a failed attempt, so a task that kills its
//     worker every time ends dead instead of looping; a hand-back at drain does not count.
//   - Drain: at the deadline, running functions are cancelled and their entries handed
//     back with touch.lua (XCLAIM … IDLE <visibility timeout>), still without ACK, so a
//     peer's next reaper pass takes them at once instead of after a whole visibility
//     timeout. Entries the blocking read delivered as the drain began are handed back the
//     same way, unstarted. Completions that cannot reach Redis are retried with backoff.
//   - One queue's broken keys stop nothing else (faults.go): a band stream of another
//     type is skipped by the claim, named in its reply and left out of the idle read;
//     a queue whose script Redis refuses for a key's sake (a wrong type, or a script
//     error on what it read there) is skipped by that loop — poll, reaper or scheduler —
//     for 1 s doubling to 10 s while every other queue is served, and the log names the
//     keys of the wrong type (lua.Diagnose). Errors of the server as a whole (network,
//     LOADING, READONLY, OOM) still fail and restart the loop.
//   - Retention (retention.go): the scheduler leader trims each known queue's dead
//     tasks beyond DTQ_DEAD_MAX or older than DTQ_DEAD_TTL_S (trim_dead.lua: the dead
//     member, the record while it is still dead, and its unique key while it names the
//     task), at most 200 a call, and counts them in the queue's stats hash.
//   - Malformed entries (no task field, a bad attempt, a task that does not exist) become
//     dead records "invalid-<entry id>" that keep the raw fields; payloads over
//     DTQ_MAX_PAYLOAD_BYTES are killed at claim with a clear error.
//   - Cold start: the first fetch comes first. Executors start on demand; the reaper,
//     scheduler and heartbeat services and the runtime metrics begin once the first
//     fetch returned and Redis has answered (the worker is "starting", not ready, until
//     then; "worker: started" is logged only then), and dtq worker serves its HTTP
//     endpoints after it — having bound PORT before anything else, so that a port in use
//     exits 2 with no task claimed. Each first run of a code path costs page faults,
//     which on a small VM are the bulk of a cold start.
//   - Redis health: the worker follows Redis from the outcomes of commands, with no
//     pings of its own (one atomic load per answered command). With
//     Options.InstrumentRedis (dtq worker sets it: it owns the client) the hook that
//     counts round trips (dtq_worker_redis_roundtrips_total) hands every outcome of the
//     client to a redisconn.Health. Without it New adds nothing to the caller's client,
//     round trips are not counted, and the loops hand the error of each of the worker's
//     own commands to the same health (Worker.sawRedis): readiness, the reaper's hold
//     after an outage and the refusal below work the same. Readiness
//     follows it: /readyz is 503, with the reason, from the first round trip that found
//     Redis unreachable until the next reply. A refusal no wait heals (a wrong password,
//     a missing ACL permission, a database number out of range: redisconn.Classify) that
//     lasts DTQ_REDIS_FATAL_AFTER_S — no command answered since, or for a permission, not
//     the command refused — drains the worker and ends Run with ErrRedisRefused: dtq
//     worker logs the cause once and exits 3.
//   - Events are best-effort: a bounded buffer flushed in pipelines by one goroutine,
//     XADD MAXLEN ~ DTQ_EVENTS_MAXLEN; per-task TASK_STARTED/TASK_SUCCEEDED only with
//     DTQ_EVENTS_VERBOSE (they would double the writes per task).
package runtime
