// Package keys builds every Redis key dtq uses. Nothing else formats a key.
//
// All keys of one queue carry the queue name as a hash tag ({Q}), so every
// script touches one slot and dtq runs unchanged on Redis Cluster.
//
//	PREFIX:{Q}:p0 … PREFIX:{Q}:p9   stream, group "dtq": one entry per delivery (task, attempt)
//	PREFIX:{Q}:t:ID                 hash: the task record
//	PREFIX:{Q}:schedule             zset: task id → due time (ms) of delayed tasks and retries
//	PREFIX:{Q}:claimed              zset: task id → claim time (ms) of scheduler claims in flight
//	PREFIX:{Q}:dead                 zset: task id → time (ms) it died
//	PREFIX:{Q}:u:KEY                string: unique key → task id
//	PREFIX:{Q}:paused               string: present while the queue is paused
//	PREFIX:{Q}:r:CALL               string: a claim call's reply, while it may be resent
//	PREFIX:{Q}:waiting              zset: "PAYLOADLIMIT WORKER" → until (ms): idle workers taking hand-offs
//	PREFIX:{Q}:in:WORKER            stream, group "dtq": the worker's inbox of hand-offs, expires 10 min after its last use
//	PREFIX:{Q}:handed               zset: "WORKER ROWID" → time (ms): hand-offs not yet received (rescued when unread)
//	PREFIX:{Q}:left:WORKER          string: a draining process's tag, one minute
//	PREFIX:{Q}:stats                hash: the queue's counters (dead_trimmed)
//	PREFIX:{Q}:retrying             zset: task id → due time (ms) of the retries among the schedule's members
//	PREFIX:{Q}:succeeded            list: "MS ID1 ID2 …" a completion call, about the newest lua.SucceededKept succeeded tasks, newest first
//	PREFIX:{Q}:tp:HOUR              hash: completions and failed attempts per minute of one hour, one day
//	PREFIX:{Q}:limits               hash: rate and concurrency limits by scope (limits.go)
//	PREFIX:{Q}:lim:rate:SCOPE       string: a rate limit's GCRA state, µs
//	PREFIX:{Q}:lim:run:SCOPE        set: task ids holding a concurrency slot
//	PREFIX:queues                   set: every queue ever enqueued to
//	PREFIX:workers                  set: worker ids that have heartbeated
//	PREFIX:worker:ID                hash: a worker's heartbeat, expires after 3× the interval
//	PREFIX:lock:scheduler           string: scheduler leader token (the worker id)
//	PREFIX:events                   stream, capped: lifecycle events
//	PREFIX:stale:ID                 string: the observers' WORKER_STALE marker of a worker
package keys

import (
	"fmt"
	"strconv"
	"strings"
)

// Group is the consumer group every worker reads the priority streams through.
const Group = "dtq"

// DefaultPrefix is the key prefix unless configured otherwise.
const DefaultPrefix = "dtq"

// Bands is the number of priority bands; priority 9 is the most urgent.
const Bands = 10

// MaxPriority is the most urgent priority.
const MaxPriority = Bands - 1

// ValidQueue reports whether name is an acceptable queue name: [A-Za-z0-9_.-]{1,64}.
// (A loop, not a regexp: compiling one costs every process start.)
func ValidQueue(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("queue name is %d bytes, more than 64", len(name))
	}
	if len(name) == 0 || !NameChars(name, "_.-") {
		return fmt.Errorf("queue name %q must match [A-Za-z0-9_.-]{1,64}", name)
	}
	return nil
}

// NameChars reports whether s holds only ASCII letters, digits and bytes of extra.
func NameChars(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// ValidPriority reports whether p is a priority band 0..9.
func ValidPriority(p int) error {
	if p < 0 || p > MaxPriority {
		return fmt.Errorf("priority %d out of range 0..%d", p, MaxPriority)
	}
	return nil
}

// Space names the keys under one prefix.
type Space struct{ prefix string }

// New returns the key space under prefix ("" means DefaultPrefix).
func New(prefix string) Space {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Space{prefix: prefix}
}

// Prefix returns the prefix of this key space.
func (s Space) Prefix() string { return s.prefix }

// Queue returns the keys of one queue.
func (s Space) Queue(q string) Queue {
	base := s.prefix + ":{" + q + "}:"
	var q0 Queue
	q0.Name = q
	q0.base = base
	for p := 0; p < Bands; p++ {
		q0.Streams[p] = base + "p" + strconv.Itoa(p)
	}
	return q0
}

// Queues is the set of every queue enqueued to.
func (s Space) Queues() string { return s.prefix + ":queues" }

// Workers is the set of worker ids that have heartbeated.
func (s Space) Workers() string { return s.prefix + ":workers" }

// Worker is one worker's heartbeat hash.
func (s Space) Worker(id string) string { return s.prefix + ":worker:" + id }

// SchedulerLock is the scheduler leader lock.
func (s Space) SchedulerLock() string { return s.prefix + ":lock:scheduler" }

// Events is the capped lifecycle event stream.
func (s Space) Events() string { return s.prefix + ":events" }

// StaleMark is the observers' marker of a worker they settled: WORKER_STALE published
// for it, or its stop seen (stale.lua).
func (s Space) StaleMark(id string) string { return s.prefix + ":stale:" + id }

// Queue holds the keys of one queue.
type Queue struct {
	Name    string
	base    string
	Streams [Bands]string // Streams[p] is the stream of priority p
}

// Stream returns the stream of priority p.
func (q Queue) Stream(p int) string { return q.Streams[p] }

// StreamPrefix is the prefix of the band streams: StreamPrefix()+"7" == Stream(7).
func (q Queue) StreamPrefix() string { return q.base + "p" }

// Task returns the hash of task id.
func (q Queue) Task(id string) string { return q.base + "t:" + id }

// TaskPrefix is the prefix of task hashes: TaskPrefix()+id == Task(id).
// Scripts receive it to name the task of a stream entry they just read.
func (q Queue) TaskPrefix() string { return q.base + "t:" }

// Schedule is the zset of delayed tasks and retries by due time.
func (q Queue) Schedule() string { return q.base + "schedule" }

// Claimed is the zset of scheduler claims in flight.
func (q Queue) Claimed() string { return q.base + "claimed" }

// Dead is the zset of dead tasks.
func (q Queue) Dead() string { return q.base + "dead" }

// Stats is the hash of the queue's counters kept in Redis, so that they outlive the
// worker that counted and any observer reads them (field StatDeadTrimmed).
func (q Queue) Stats() string { return q.base + "stats" }

// Retrying is the zset of the queue's retrying tasks by due time: the retries among the
// schedule's members, so that they are counted with one ZCARD.
func (q Queue) Retrying() string { return q.base + "retrying" }

// Waiters is the zset of tasks someone waits on (client.Wait): member the task id,
// score when the latest registration lapses (ms). It expires with its latest lapse.
func (q Queue) Waiters() string { return q.base + "waiters" }

// Done is the channel a task's end is published on while someone waits on it
// (complete.lua, cancel.lua): the waiters key, ":", the task id. The message is the
// final status.
func (q Queue) Done(id string) string { return q.base + "waiters:" + id }

// Succeeded is the list of the queue's recently succeeded tasks, newest first: entries
// "MS ID1 ID2 …" a completion call, MS the time they succeeded; capped at about
// lua.SucceededKept tasks.
func (q Queue) Succeeded() string { return q.base + "succeeded" }

// Throughput is the hash of the completions of the queue counted per minute in one hour
// (Unix ms / 3 600 000): fields ThroughputFields names.
func (q Queue) Throughput(hour int64) string { return q.base + "tp:" + strconv.FormatInt(hour, 10) }

// ThroughputFields names, for the minute holding ms, the hour of its Throughput hash and
// that hash's fields counting the minute's completions ("p" and the minute of the hour,
// 0..59) and failed attempts ("f" and the minute).
func ThroughputFields(ms int64) (hour int64, processed, failed string) {
	minute := ms / 60000
	m := strconv.FormatInt(minute%60, 10)
	return minute / 60, "p" + m, "f" + m
}

// StatDeadTrimmed is the field of Stats counting the dead tasks the scheduler leader
// deleted under the retention bounds (DTQ_DEAD_MAX, DTQ_DEAD_TTL_S).
const StatDeadTrimmed = "dead_trimmed"

// Unique returns the key holding the task id enqueued under a unique key.
func (q Queue) Unique(key string) string { return q.base + "u:" + key }

// UniquePrefix is the prefix of unique keys.
func (q Queue) UniquePrefix() string { return q.base + "u:" }

// Receipt holds the reply of one claim call for a minute, so that a call resent after
// its reply was lost gets the same reply instead of stranding what it claimed.
func (q Queue) Receipt(call string) string { return q.base + "r:" + call }

// Waiting is the zset of workers blocked idle on this queue that take the next new
// task straight from the enqueue (member "MAXPAYLOAD WORKER", score: until when, ms).
func (q Queue) Waiting() string { return q.base + "waiting" }

// Handed is the zset of hand-offs not yet known to be received (member "WORKER ROWID",
// the inbox row; score: when it was handed, ms). The scheduler leader rescues the ones a
// dead worker never read (rescue.lua).
func (q Queue) Handed() string { return q.base + "handed" }

// Inbox is the stream on which the enqueue hands a waiting worker the task it started
// for it; InboxPrefix()+worker == Inbox(worker).
func (q Queue) Inbox(worker string) string { return q.base + "in:" + worker }

// Left marks, for a minute, that the process of a worker id with a given tag left the
// hand-offs of this queue (it drains).
func (q Queue) Left(worker string) string { return q.base + "left:" + worker }

// InboxPrefix is the prefix of inbox streams.
func (q Queue) InboxPrefix() string { return q.base + "in:" }

// Epoch is the queue's fence epoch, a count: claim.lua raises it by one when it reclaims a
// running task (the old execution loses the task while its entry stays pending), and
// complete.lua records a batch of plain successes without reading their records while
// it still holds the value the claims that started them replied (docs/design.md, invariant 3).
func (q Queue) Epoch() string { return q.base + "epoch" }

// Paused is present while the queue is paused.
func (q Queue) Paused() string { return q.base + "paused" }

// BandOf returns the priority band of a stream key of this queue, or -1.
func (q Queue) BandOf(stream string) int {
	for p, s := range q.Streams {
		if s == stream {
			return p
		}
	}
	return -1
}
