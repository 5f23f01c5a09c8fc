// Package lua holds every Redis script dtq runs, one .lua file each, embedded at
// build time, with one typed Go wrapper per script. Each file's header lists its
// KEYS, ARGV and return value.
package lua

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

var (
	//go:embed enqueue.lua
	enqueueSrc string
	//go:embed claim.lua
	claimSrc string
	//go:embed complete.lua
	completeSrc string
	//go:embed touch.lua
	touchSrc string
	//go:embed sched_claim.lua
	schedClaimSrc string
	//go:embed sched_enqueue.lua
	schedEnqueueSrc string
	//go:embed lock_renew.lua
	lockRenewSrc string
	//go:embed lock_release.lua
	lockReleaseSrc string
	//go:embed cancel.lua
	cancelSrc string
	//go:embed requeue.lua
	requeueSrc string
	//go:embed leave.lua
	leaveSrc string
	//go:embed rescue.lua
	rescueSrc string

	enqueueScript      = redis.NewScript(enqueueSrc)
	claimScript        = redis.NewScript(claimSrc)
	completeScript     = redis.NewScript(completeSrc)
	touchScript        = redis.NewScript(touchSrc)
	schedClaimScript   = redis.NewScript(schedClaimSrc)
	schedEnqueueScript = redis.NewScript(schedEnqueueSrc)
	lockRenewScript    = redis.NewScript(lockRenewSrc)
	lockReleaseScript  = redis.NewScript(lockReleaseSrc)
	cancelScript       = redis.NewScript(cancelSrc)
	requeueScript      = redis.NewScript(requeueSrc)
	leaveScript        = redis.NewScript(leaveSrc)
	rescueScript       = redis.NewScript(rescueSrc)
)

var all = []*redis.Script{enqueueScript, claimScript, completeScript, touchScript,
	schedClaimScript, schedEnqueueScript, lockRenewScript, lockReleaseScript,
	cancelScript, requeueScript, leaveScript, rescueScript}

// Load loads every script into the script cache of c, so that pipelined EVALSHA
// calls find them. Script.Run falls back to EVAL by itself; pipelines do not.
func Load(ctx context.Context, c redis.Scripter) error {
	for _, s := range all {
		if err := s.Load(ctx, c).Err(); err != nil {
			return fmt.Errorf("lua: load script: %w", err)
		}
	}
	return nil
}

// IsNoScript reports whether err says the script cache lost a script (Redis restarted).
func IsNoScript(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Errors a script's return codes map to.
var (
	ErrTaskExists  = errors.New("a task with this id exists already")
	ErrNotFound    = errors.New("no such task")
	ErrWrongStatus = errors.New("task is not in a state that allows this")
)

// EnqueueArgs are the fields of a new task.
type EnqueueArgs struct {
	ID         string
	Function   string
	Payload    []byte
	Priority   int
	MaxRetries int
	TimeoutMS  int64
	NowMS      int64
	RunAtMS    int64  // <= NowMS: run now
	Unique     string // "" for none
	// ReuseUnique: a unique key held by a dead or cancelled task passes to this one.
	ReuseUnique bool
}

// EnqueueCmd queues one enqueue of the tasks as (all of queue q) on c — a pipeline,
// typically — by EVALSHA; call Load first. The script creates them in order, each
// atomically, at the clock nowMS (their NowMS is not read). Read its result with
// EnqueueResults. One call per batch costs Redis about a third less per task than one
// call per task; keep batches small enough that one script does not hold Redis for long
// (the client sends at most EnqueueBatch tasks or EnqueueBatchBytes of payload a call).
func EnqueueCmd(ctx context.Context, c redis.Scripter, q keys.Queue, nowMS int64, as []EnqueueArgs) *redis.Cmd {
	ks, args := enqueueKV(q, nowMS, as)
	return enqueueScript.EvalSha(ctx, c, ks, args...)
}

// Limits of one enqueue call that the client keeps to: tasks, and payload bytes (a
// larger payload goes alone).
const (
	EnqueueBatch      = 100
	EnqueueBatchBytes = 1 << 20
)

// Enqueue creates one task and returns its id; created is false when a task with the
// same unique key exists (its id is returned).
func Enqueue(ctx context.Context, c redis.Scripter, q keys.Queue, a EnqueueArgs) (id string, created bool, err error) {
	if a.Priority < 0 || a.Priority >= keys.Bands {
		return "", false, fmt.Errorf("enqueue: priority %d is not 0..%d", a.Priority, keys.Bands-1)
	}
	ks, args := enqueueKV(q, a.NowMS, []EnqueueArgs{a})
	rs, err := EnqueueResults(enqueueScript.Run(ctx, c, ks, args...), 1)
	if err != nil {
		return "", false, err
	}
	return rs[0].ID, rs[0].Created, rs[0].Err
}

func enqueueKV(q keys.Queue, nowMS int64, as []EnqueueArgs) ([]string, []any) {
	args := make([]any, 0, 3+9*len(as))
	args = append(args, q.Name, keys.Group, nowMS)
	for i := range as {
		a := &as[i]
		reuse := "0"
		if a.ReuseUnique {
			reuse = "1"
		}
		args = append(args, a.ID, a.Function, a.Payload, a.Priority, a.MaxRetries, a.TimeoutMS, a.RunAtMS, a.Unique, reuse)
	}
	return []string{q.TaskPrefix(), q.StreamPrefix(), q.Schedule(), q.UniquePrefix(), q.Waiting(), q.Paused(),
		q.InboxPrefix(), q.Handed()}, args
}

// EnqueueResult is the outcome of one task of an enqueue call.
type EnqueueResult struct {
	ID      string
	Created bool // false: a task with its unique key exists (ID is that task's)
	// HolderStatus is, when Created is false, the status of the task holding the unique
	// key (a dead or cancelled holder's key passes on with ReuseUnique).
	HolderStatus string
	Err          error // ErrTaskExists: a task with its id exists already
}

// EnqueueResults decodes the reply of an EnqueueCmd of n tasks. An error reply fails
// the whole call: the tasks before the one that failed may have been created.
func EnqueueResults(cmd *redis.Cmd, n int) ([]EnqueueResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	if len(v) != 3*n {
		return nil, fmt.Errorf("enqueue: unexpected reply of %d values for %d tasks", len(v), n)
	}
	out := make([]EnqueueResult, n)
	for i := range out {
		id, _ := v[3*i].(string)
		code, _ := v[3*i+1].(int64)
		out[i].ID = id
		switch code {
		case 1:
			out[i].Created = true
		case 0:
			out[i].HolderStatus, _ = v[3*i+2].(string)
		default:
			out[i].Err = fmt.Errorf("enqueue %s: %w", id, ErrTaskExists)
		}
	}
	return out, nil
}

// ClaimArgs says what one claim call takes.
type ClaimArgs struct {
	Consumer   string
	NowMS      int64
	Reclaim    bool // XAUTOCLAIM entries idle >= MinIdleMS instead of reading new ones
	Want       int  // most entries to read or reclaim
	MaxPayload int
	MinIdleMS  int64
	Delivered  []Delivered // entries a blocking XREADGROUP already delivered
	// Holds (reclaim mode): the entries the caller runs now, which a reclaim never takes
	// back from it however idle they look
	Holds []Delivered
	// RegisterUntilMS (read mode): when the call starts nothing, the worker waits for
	// a hand-off from the enqueue until then (unix ms); 0: it does not.
	RegisterUntilMS int64
	Tag             string     // the calling process's tag (see Leave)
	Received        []Received // hand-offs the worker's blocking read got from its inbox
	// Call names this call for its receipt (a resent call gets the same reply) and
	// Previous the caller's previous call on the queue (its receipt is deleted). Empty
	// Call: a random one.
	Call, Previous string
}

// Delivered names an entry already delivered to the consumer.
type Delivered struct {
	Band  int
	Entry string
}

// Received names a hand-off read from the worker's inbox: its inbox entry and task.
type Received struct {
	InboxEntry string
	ID         string
}

// Handoff is one row of a worker's inbox: a task the enqueue started for it (Started
// set), or an entry it delivered to it for the worker to claim (Delivered set).
type Handoff struct {
	InboxEntry string
	Started    *Started
	Delivered  *Delivered
}

// DecodeHandoff decodes an inbox row as enqueue.lua writes it.
func DecodeHandoff(id string, v map[string]any) (Handoff, error) {
	h := Handoff{InboxEntry: id}
	get := func(k string) string { s, _ := v[k].(string); return s }
	band, err := strconv.Atoi(get("b"))
	if err != nil || band < 0 || band > keys.MaxPriority || get("e") == "" {
		return h, fmt.Errorf("inbox row %s: bad band or entry", id)
	}
	if get("d") != "" {
		h.Delivered = &Delivered{Band: band, Entry: get("e")}
		return h, nil
	}
	attempt, err := strconv.ParseInt(get("a"), 10, 64)
	if err != nil || get("i") == "" {
		return h, fmt.Errorf("inbox row %s: bad task or attempt", id)
	}
	num := func(k string) int64 { n, _ := strconv.ParseInt(get(k), 10, 64); return n }
	h.Started = &Started{
		Entry: get("e"), Band: band, ID: get("i"), Attempt: attempt, Function: get("f"),
		Payload: get("p"), TimeoutMS: num("t"), MaxRetries: int(num("m")), Unique: get("u"),
		CreatedMS: num("c"), HandedOff: true,
	}
	return h, nil
}

// SplitInbox sorts rows a blocking read took from a worker's inbox: the tasks started
// for it, the entries delivered to it (to claim), and every row as received (to tell the
// next claim, which deletes them, malformed ones included). err names the first
// malformed row; the others are still sorted.
func SplitInbox(msgs []redis.XMessage) (started []Started, delivered []Delivered, recv []Received, err error) {
	for _, m := range msgs {
		h, derr := DecodeHandoff(m.ID, m.Values)
		r := Received{InboxEntry: m.ID}
		switch {
		case derr != nil:
			if err == nil {
				err = derr
			}
		case h.Delivered != nil:
			delivered = append(delivered, *h.Delivered)
		default:
			started = append(started, *h.Started)
			r.ID = h.Started.ID
		}
		recv = append(recv, r)
	}
	return started, delivered, recv, err
}

// Left is a hand-off a leaving worker had not read: a started task (ID set) or a
// delivered entry (ID empty). Either is in the worker's PEL: hand it back.
type Left struct {
	Band    int
	Entry   string
	ID      string
	Attempt int64
}

// Leave ends consumer's hand-off registration on q and returns, deleting its inbox,
// what was handed to it and not read. For a minute, claims that carry the same tag
// (the same process) do not register it again.
func Leave(ctx context.Context, c redis.Scripter, q keys.Queue, consumer, tag string, maxPayload int) ([]Left, error) {
	v, err := leaveScript.Run(ctx, c, []string{q.Waiting(), q.Inbox(consumer), q.Left(consumer), q.Handed()},
		keys.Group, consumer, WaitingMember(maxPayload, consumer), tag).Slice()
	if err != nil {
		return nil, fmt.Errorf("leave %s: %w", q.Name, err)
	}
	var out []Left
	for _, row := range rows(v) {
		if len(row) == 4 {
			out = append(out, Left{Band: int(num(row[0])), Entry: str(row[1]), ID: str(row[2]), Attempt: num(row[3])})
		}
	}
	return out, nil
}

// RescueAge is how long a hand-off may stay unread before the scheduler leader puts its
// task back on the stream: a live worker blocked on its inbox reads it in milliseconds.
const RescueAge = time.Second

func rescueKV(q keys.Queue, nowMS, cutoffMS int64, limit int) ([]string, []any) {
	ks := make([]string, 0, 13)
	ks = append(ks, q.Handed(), q.TaskPrefix(), q.InboxPrefix())
	ks = append(ks, q.Streams[:]...)
	return ks, []any{keys.Group, nowMS, cutoffMS, limit}
}

// Rescue puts back on their streams the tasks of hand-offs made at or before cutoffMS
// that their worker never read (rescue.lua), up to limit notes, and returns their ids.
func Rescue(ctx context.Context, c redis.Scripter, q keys.Queue, nowMS, cutoffMS int64, limit int) ([]string, error) {
	ks, args := rescueKV(q, nowMS, cutoffMS, limit)
	return RescueResult(q, rescueScript.Run(ctx, c, ks, args...))
}

// RescueCmd queues a Rescue on a pipeline (EVALSHA: call Load first); decode its reply
// with RescueResult.
func RescueCmd(ctx context.Context, p redis.Pipeliner, q keys.Queue, nowMS, cutoffMS int64, limit int) *redis.Cmd {
	ks, args := rescueKV(q, nowMS, cutoffMS, limit)
	return rescueScript.EvalSha(ctx, p, ks, args...)
}

// RescueResult decodes the reply of a RescueCmd.
func RescueResult(q keys.Queue, cmd *redis.Cmd) ([]string, error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("rescue %s: %w", q.Name, err)
	}
	return strs(v), nil
}

// WaitingMember is a worker's member in a queue's waiting zset.
func WaitingMember(maxPayload int, consumer string) string {
	return strconv.Itoa(maxPayload) + " " + consumer
}

// Started is a task the claim started: the caller must run it.
type Started struct {
	Entry      string
	Band       int
	ID         string
	Attempt    int64
	Function   string
	Payload    string
	TimeoutMS  int64
	MaxRetries int
	Failures   int
	Unique     string
	CreatedMS  int64
	Reclaimed  bool
	HandedOff  bool // started by the enqueue for this worker (a hand-off)
}

// Held is the execution's entry and attempt, as touch.lua fences them.
func (s Started) Held() Held {
	return Held{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt}
}

// Absorbed is an entry the claim ACKed without running.
type Absorbed struct {
	Entry  string
	Band   int
	ID     string
	Status string // the task's status; "dead" when the claim killed the task
}

// Invalid is a malformed entry the claim moved to a dead record.
type Invalid struct {
	Entry  string
	Band   int
	DeadID string
	Reason string
}

// Returned is an entry delivered while its queue was paused, put back unstarted as a
// new entry.
type Returned struct {
	Entry string
	Band  int
	ID    string // the entry's task field
	New   string // the entry that took its place
}

// ClaimResult is the decoded reply of a claim.
type ClaimResult struct {
	Started  []Started
	Absorbed []Absorbed
	Invalid  []Invalid
	Paused   bool
	Returned []Returned
	// Broken: bands whose key is not a stream, skipped by a read (the others were read)
	Broken []int
}

func claimKV(q keys.Queue, a ClaimArgs) ([]string, []any) {
	if a.Call == "" {
		a.Call = randomCall()
	}
	prev := a.Previous
	if prev == "" {
		prev = a.Call
	}
	ks := make([]string, 0, 19)
	ks = append(ks, q.Streams[:]...)
	ks = append(ks, q.Paused(), q.TaskPrefix(), q.Dead(), q.Receipt(a.Call), q.Receipt(prev),
		q.Waiting(), q.Inbox(a.Consumer), q.Left(a.Consumer), q.Handed())
	mode := "read"
	if a.Reclaim {
		mode = "reclaim"
	}
	args := make([]any, 0, 13+2*len(a.Delivered)+2*len(a.Received)+2*len(a.Holds))
	args = append(args, keys.Group, a.Consumer, a.NowMS, mode, a.Want, a.MaxPayload, a.MinIdleMS, q.Name,
		a.RegisterUntilMS, a.Tag, len(a.Received))
	for _, r := range a.Received {
		args = append(args, r.InboxEntry, r.ID)
	}
	args = append(args, len(a.Delivered))
	for _, d := range a.Delivered {
		args = append(args, d.Band, d.Entry)
	}
	args = append(args, len(a.Holds))
	for _, d := range a.Holds {
		args = append(args, d.Band, d.Entry)
	}
	return ks, args
}

// Claim reads (or reclaims) entries of one queue and starts their tasks atomically.
func Claim(ctx context.Context, c redis.Scripter, q keys.Queue, a ClaimArgs) (ClaimResult, error) {
	ks, args := claimKV(q, a)
	v, err := claimScript.Run(ctx, c, ks, args...).Slice()
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim %s: %w", q.Name, err)
	}
	return decodeClaim(v)
}

// ClaimCmd queues one claim on c (a pipeline) by EVALSHA; call Load first. Read its
// result with ClaimReply.
func ClaimCmd(ctx context.Context, c redis.Scripter, q keys.Queue, a ClaimArgs) *redis.Cmd {
	ks, args := claimKV(q, a)
	return claimScript.EvalSha(ctx, c, ks, args...)
}

// ClaimReply decodes the reply of a claim.
func ClaimReply(cmd *redis.Cmd) (ClaimResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim: %w", err)
	}
	return decodeClaim(v)
}

func randomCall() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func decodeClaim(v []any) (ClaimResult, error) {
	var r ClaimResult
	if len(v) < 4 || len(v) > 6 { // 4 and 5: receipts written by earlier releases
		return r, fmt.Errorf("claim: unexpected reply of %d elements", len(v))
	}
	for _, row := range rows(v[0]) {
		if len(row) != 12 {
			return r, fmt.Errorf("claim: started row of %d fields", len(row))
		}
		r.Started = append(r.Started, Started{
			Entry: str(row[0]), Band: int(num(row[1])), ID: str(row[2]), Attempt: num(row[3]),
			Function: str(row[4]), Payload: str(row[5]), TimeoutMS: num(row[6]),
			MaxRetries: int(num(row[7])), Failures: int(num(row[8])), Unique: str(row[9]),
			CreatedMS: num(row[10]), Reclaimed: num(row[11]) == 1, HandedOff: num(row[11]) == 2,
		})
	}
	for _, row := range rows(v[1]) {
		if len(row) == 4 {
			r.Absorbed = append(r.Absorbed, Absorbed{Entry: str(row[0]), Band: int(num(row[1])), ID: str(row[2]), Status: str(row[3])})
		}
	}
	for _, row := range rows(v[2]) {
		if len(row) == 4 {
			r.Invalid = append(r.Invalid, Invalid{Entry: str(row[0]), Band: int(num(row[1])), DeadID: str(row[2]), Reason: str(row[3])})
		}
	}
	r.Paused = num(v[3]) == 1
	if len(v) >= 6 {
		if bs, ok := v[5].([]any); ok {
			for _, b := range bs {
				r.Broken = append(r.Broken, int(num(b)))
			}
		}
	}
	if len(v) >= 5 {
		for _, row := range rows(v[4]) {
			if len(row) == 4 {
				r.Returned = append(r.Returned, Returned{Entry: str(row[0]), Band: int(num(row[1])), ID: str(row[2]), New: str(row[3])})
			}
		}
	}
	return r, nil
}

// Outcome is how an execution ended.
type Outcome byte

// Outcomes of an execution.
const (
	Succeeded Outcome = 's'
	Retry     Outcome = 'r'
	Dead      Outcome = 'd'
)

// Completion is the outcome of one execution.
type Completion struct {
	ID      string
	Entry   string
	Band    int
	Attempt int64
	Unique  string
	Outcome Outcome
	Text    string // result on success, error otherwise
	RetryMS int64  // when to run again (Retry)
}

// Complete records the outcomes of executions of one queue in one call and reports,
// per completion, whether it applied (false: fenced off, nothing changed, no ACK).
func Complete(ctx context.Context, c redis.Scripter, q keys.Queue, nowMS, keepMS int64, items []Completion) ([]bool, error) {
	v, err := CompleteCodes(ctx, c, q, nowMS, keepMS, items)
	if err != nil {
		return nil, err
	}
	return applied(v), nil
}

// What complete.lua did with each item.
const (
	CompleteFenced  = 0 // no longer the task's current execution: nothing written
	CompleteApplied = 1
	CompleteRefused = 2 // the schedule or the dead set is of another type: nothing written, not ACKed
)

// CompleteCodes is Complete, with the script's code for each item (CompleteApplied, …).
func CompleteCodes(ctx context.Context, c redis.Scripter, q keys.Queue, nowMS, keepMS int64, items []Completion) ([]int64, error) {
	ks, args := completeKV(q, nowMS, keepMS, items)
	v, err := completeScript.Run(ctx, c, ks, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("complete %s: %w", q.Name, err)
	}
	return v, nil
}

// CompleteCmd queues one complete on c (a pipeline) by EVALSHA; call Load first. Read
// its result with CompleteReply.
func CompleteCmd(ctx context.Context, c redis.Scripter, q keys.Queue, nowMS, keepMS int64, items []Completion) *redis.Cmd {
	ks, args := completeKV(q, nowMS, keepMS, items)
	return completeScript.EvalSha(ctx, c, ks, args...)
}

func completeKV(q keys.Queue, nowMS, keepMS int64, items []Completion) ([]string, []any) {
	ks := make([]string, 0, 2+3*len(items))
	ks = append(ks, q.Schedule(), q.Dead())
	args := make([]any, 0, 4+6*len(items))
	args = append(args, keys.Group, nowMS, keepMS, len(items))
	for _, it := range items {
		h := q.Task(it.ID)
		u := h
		if it.Unique != "" {
			u = q.Unique(it.Unique)
		}
		ks = append(ks, h, q.Stream(it.Band), u)
		args = append(args, it.ID, it.Entry, it.Attempt, string(rune(it.Outcome)), it.Text, it.RetryMS)
	}
	return ks, args
}

// CompleteReply decodes the reply of a complete: per item, whether it applied.
func CompleteReply(cmd *redis.Cmd) ([]bool, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	return applied(v), nil
}

func applied(v []int64) []bool {
	out := make([]bool, len(v))
	for i, x := range v {
		out[i] = x == 1
	}
	return out
}

// Held is an execution a worker holds: its entry and attempt.
type Held struct {
	ID      string
	Entry   string
	Band    int
	Attempt int64
}

// Touch resets (idle 0) or hands back (handback, idle = visibility timeout) the PEL
// idle clock of entries this consumer still holds, and reports which it still held.
func Touch(ctx context.Context, c redis.Scripter, q keys.Queue, consumer string, idleMS int64, handback bool, items []Held) ([]bool, error) {
	ks := make([]string, 0, 2*len(items))
	args := make([]any, 0, 5+2*len(items))
	hb := "0"
	if handback {
		hb = "1"
	}
	args = append(args, keys.Group, consumer, idleMS, hb, len(items))
	for _, it := range items {
		ks = append(ks, q.Task(it.ID), q.Stream(it.Band))
		args = append(args, it.Entry, it.Attempt)
	}
	v, err := touchScript.Run(ctx, c, ks, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("touch %s: %w", q.Name, err)
	}
	out := make([]bool, len(v))
	for i, x := range v {
		out[i] = x == 1
	}
	return out, nil
}

// SchedClaim moves up to limit due tasks from the schedule to the claimed set and
// returns them, with the claims made at or before staleMS and the next due time
// (-1: none).
func SchedClaim(ctx context.Context, c redis.Scripter, q keys.Queue, nowMS int64, limit int, staleMS int64) (due, stale []string, nextMS int64, err error) {
	v, err := schedClaimScript.Run(ctx, c, []string{q.Schedule(), q.Claimed()}, nowMS, limit, staleMS).Slice()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("scheduler claim %s: %w", q.Name, err)
	}
	if len(v) != 3 {
		return nil, nil, 0, fmt.Errorf("scheduler claim %s: unexpected reply", q.Name)
	}
	return strs(v[0]), strs(v[1]), num(v[2]), nil
}

// SchedClaimCmd queues a scheduler claim on a pipeline (EVALSHA: call Load first, and
// again on NOSCRIPT); decode its reply with SchedClaimResult.
func SchedClaimCmd(ctx context.Context, p redis.Pipeliner, q keys.Queue, nowMS int64, limit int, staleMS int64) *redis.Cmd {
	return schedClaimScript.EvalSha(ctx, p, []string{q.Schedule(), q.Claimed()}, nowMS, limit, staleMS)
}

// SchedClaimResult decodes the reply of a SchedClaimCmd.
func SchedClaimResult(q keys.Queue, cmd *redis.Cmd) (due, stale []string, nextMS int64, err error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("scheduler claim %s: %w", q.Name, err)
	}
	if len(v) != 3 {
		return nil, nil, 0, fmt.Errorf("scheduler claim %s: unexpected reply", q.Name)
	}
	return strs(v[0]), strs(v[1]), num(v[2]), nil
}

// SchedEnqueue puts claimed tasks on their streams (XADD before ZREM; a task already
// queued is dropped from the claims without a second XADD).
func SchedEnqueue(ctx context.Context, c redis.Scripter, q keys.Queue, nowMS int64, ids []string) (enqueued, dropped []string, err error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	ks := make([]string, 0, 11+len(ids))
	ks = append(ks, q.Claimed())
	ks = append(ks, q.Streams[:]...)
	args := make([]any, 0, 2+len(ids))
	args = append(args, keys.Group, nowMS)
	for _, id := range ids {
		ks = append(ks, q.Task(id))
		args = append(args, id)
	}
	v, err := schedEnqueueScript.Run(ctx, c, ks, args...).Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler enqueue %s: %w", q.Name, err)
	}
	if len(v) != 2 {
		return nil, nil, fmt.Errorf("scheduler enqueue %s: unexpected reply", q.Name)
	}
	return strs(v[0]), strs(v[1]), nil
}

// LockRenew extends lock by ttlMS while it holds token.
func LockRenew(ctx context.Context, c redis.Scripter, lock, token string, ttlMS int64) (bool, error) {
	n, err := lockRenewScript.Run(ctx, c, []string{lock}, token, ttlMS).Int64()
	if err != nil {
		return false, fmt.Errorf("lock renew: %w", err)
	}
	return n == 1, nil
}

// LockRenewCmd queues a LockRenew on a pipeline (EVALSHA); decode with LockRenewResult.
func LockRenewCmd(ctx context.Context, p redis.Pipeliner, lock, token string, ttlMS int64) *redis.Cmd {
	return lockRenewScript.EvalSha(ctx, p, []string{lock}, token, ttlMS)
}

// LockRenewResult decodes the reply of a LockRenewCmd.
func LockRenewResult(cmd *redis.Cmd) (bool, error) {
	n, err := cmd.Int64()
	if err != nil {
		return false, fmt.Errorf("lock renew: %w", err)
	}
	return n == 1, nil
}

// LockRelease deletes lock while it holds token.
func LockRelease(ctx context.Context, c redis.Scripter, lock, token string) (bool, error) {
	n, err := lockReleaseScript.Run(ctx, c, []string{lock}, token).Int64()
	if err != nil {
		return false, fmt.Errorf("lock release: %w", err)
	}
	return n == 1, nil
}

// Cancel cancels a queued or scheduled task.
func Cancel(ctx context.Context, c redis.Scripter, q keys.Queue, id, unique string, nowMS, keepMS int64) error {
	h := q.Task(id)
	u := h
	if unique != "" {
		u = q.Unique(unique)
	}
	ks := make([]string, 0, 13)
	ks = append(ks, h, q.Schedule())
	ks = append(ks, q.Streams[:]...)
	ks = append(ks, u)
	v, err := cancelScript.Run(ctx, c, ks, keys.Group, nowMS, keepMS, id).Slice()
	if err != nil {
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	if len(v) != 2 {
		return fmt.Errorf("cancel %s: unexpected reply", id)
	}
	if num(v[0]) == 1 {
		return nil
	}
	if str(v[1]) == "missing" {
		return fmt.Errorf("cancel %s: %w", id, ErrNotFound)
	}
	return fmt.Errorf("cancel %s (status %s): %w", id, str(v[1]), ErrWrongStatus)
}

// Requeue puts a dead task back on its stream with a fresh retry budget.
func Requeue(ctx context.Context, c redis.Scripter, q keys.Queue, id string, nowMS int64) error {
	ks := make([]string, 0, 12)
	ks = append(ks, q.Dead(), q.Task(id))
	ks = append(ks, q.Streams[:]...)
	v, err := requeueScript.Run(ctx, c, ks, keys.Group, nowMS, id).Slice()
	if err != nil {
		return fmt.Errorf("requeue %s: %w", id, err)
	}
	if len(v) != 2 {
		return fmt.Errorf("requeue %s: unexpected reply", id)
	}
	if num(v[0]) == 1 {
		return nil
	}
	if str(v[1]) == "missing" {
		return fmt.Errorf("requeue %s: %w", id, ErrNotFound)
	}
	return fmt.Errorf("requeue %s (%s): %w", id, str(v[1]), ErrWrongStatus)
}

func rows(v any) [][]any {
	list, _ := v.([]any)
	out := make([][]any, 0, len(list))
	for _, x := range list {
		if row, ok := x.([]any); ok {
			out = append(out, row)
		}
	}
	return out
}

func strs(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, str(x))
	}
	return out
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	default:
		return fmt.Sprint(x)
	}
}

func num(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	default:
		return 0
	}
}
