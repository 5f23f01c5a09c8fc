// Package scaler is dtq's KEDA external scaler: a gRPC server implementing KEDA's
// externalscaler.ExternalScaler, usable as an `external` or `external-push` trigger,
// with /metrics, /healthz and /readyz over HTTP beside it. It observes Redis only; it
// never imports the worker runtime.
//
// # The signal
//
// For every watched queue and priority band: lag (entries not yet delivered to group
// dtq) and pending (delivered, not acknowledged); per queue, the scheduled tasks and
// retries due now or within scheduledLead, plus scheduler claims in flight, plus the
// periodic entries' ticks due now or within scheduledLead. Pending
// counts by default: a worker SIGKILLed at scale-in leaves its entries pending, and only
// a live worker reclaims them. Due tasks count: with no worker, nobody runs the
// scheduler. internal/queuestat reads all of it in one pipelined round trip.
//
// # Metrics of a trigger
//
//	dtq-<queues>          backlog of every watched band (+ due tasks), target targetPerReplica
//	dtq-<queues>-p9-8     backlog of bands 9..8 only, target from bandTargets ("9-8:2")
//
// The HPA runs the largest replica count any metric asks for, so a band group with a
// small target scales urgent work harder while the first metric still covers the whole
// backlog. The first metric also decides activation: active iff it exceeds
// activationThreshold.
//
// # Reads
//
// KEDA calls GetMetrics then IsActive for every metric each poll, with no deadline, and
// many ScaledObjects poll at once. A signal answers them all from a cache at most
// DTQ_SCALER_CACHE_TTL_MS old; callers that miss wait for the next read, which covers
// every queue asked for recently in one round trip, with at most one read in flight.
// Any gRPC caller may name queues, so the shared read is bounded: a queue joins it once
// one of its keys exists (before, it reads as zero from one EXISTS, per call), and it
// holds at most DTQ_SCALER_MAX_QUEUES queues (an existing queue beyond them is read for
// its caller alone). Made-up names cost their caller only.
// Every read is bounded by DTQ_SCALER_REDIS_TIMEOUT_MS; a failure reaches KEDA as a gRPC
// status with an ErrorInfo reason (Unavailable for an unreachable or slow Redis,
// FailedPrecondition for an error reply, InvalidArgument naming the key for bad
// metadata).
//
// # Push
//
//	             ┌──────────── new subscription (CLIENT UNBLOCK) ───────────┐
//	             ▼                                                         │
//	pass: one pipelined read of every subscribed queue ──► push changes ──► wait:
//	  counts, cursors (last entry ids), next due times         XREAD BLOCK on idle bands
//	             ▲                                              timer: next due, poll while
//	             └──────────────────────────────────────────────  active, max block
//
// One loop and one blocking reader serve every open StreamIsActive stream. An idle
// subscription wakes on the first new entry of its bands (milliseconds), or when a
// scheduled task comes within its lead; an active one is re-read every
// DTQ_SCALER_PUSH_POLL_MS to see its backlog drain (XACK+XDEL make no entry to wake
// on). A failed read is retried with backoff while the streams stay open, so a Redis
// restart heals without KEDA reconnecting. On SIGTERM streams end with a nil return, so
// KEDA reconnects to another replica after 2 s instead of backing off. Replicas hold no
// state but the cache, so any of them gives the same answers.
package scaler
