// Package client is the producer and operator API: enqueue tasks, read them back,
// cancel, pause and resume queues, list and requeue dead tasks, list workers.
package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/liveness"
	"github.com/dtq/dtq/lua"
)

// DefaultMaxPayload is the payload limit unless configured otherwise (1 MiB).
const DefaultMaxPayload = 1 << 20

// Client talks to one dtq deployment (one Redis, one key prefix).
type Client struct {
	rdb        redis.UniversalClient
	ks         keys.Space
	maxPayload int
	keepMS     int64
	now        func() time.Time

	mu    sync.Mutex
	known map[string]time.Time // when this client last added each queue to the queues set
}

// RegisterEvery is how often a client adds a queue it enqueues to again to the set of
// known queues: the set heals within this time when it is lost (a FLUSHALL, a restart
// without persistence, a failover that lost the write), so the scheduler leader and the
// scaler find the queue's delayed tasks and backlog again.
const RegisterEvery = 10 * time.Second

// Options configure a Client.
type Options struct {
	Prefix     string           // key prefix ("" = dtq)
	MaxPayload int              // bytes (0 = 1 MiB)
	ResultTTL  time.Duration    // how long cancelled tasks are kept (0 = 24 h)
	Now        func() time.Time // clock (time.Now when nil)
}

// New returns a client on rdb.
func New(rdb redis.UniversalClient, o Options) *Client {
	if o.MaxPayload <= 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.ResultTTL <= 0 {
		o.ResultTTL = 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Client{rdb: rdb, ks: keys.New(o.Prefix), maxPayload: o.MaxPayload,
		keepMS: o.ResultTTL.Milliseconds(), now: o.Now, known: map[string]time.Time{}}
}

// Errors callers can test with errors.Is.
var (
	ErrInvalid        = errors.New("invalid task")
	ErrPayloadTooBig  = errors.New("payload over the limit")
	ErrNotFound       = lua.ErrNotFound
	ErrWrongStatus    = lua.ErrWrongStatus
	ErrTaskExists     = lua.ErrTaskExists
	ErrNotRequeueable = errors.New("not requeueable")
)

// Task is a task to enqueue.
type Task struct {
	Queue    string
	Function string
	Payload  []byte
	// Priority 0..9; 9 is the most urgent.
	Priority int
	// Delay or RunAt schedule the task for later (RunAt wins when both are set).
	Delay time.Duration
	RunAt time.Time
	// MaxRetries: failed attempts retried before the task is dead. nil: the function's
	// default (3 unless the function says otherwise).
	MaxRetries *int
	// Timeout bounds one attempt (0: the function's default).
	Timeout time.Duration
	// Unique: a second enqueue with the same key (in the same queue) returns the first
	// task's id and creates nothing, for as long as the first task's record exists
	// (succeeded and cancelled records live DTQ_RESULT_TTL_S; dead ones until the
	// scheduler leader trims them, DTQ_DEAD_MAX and DTQ_DEAD_TTL_S). A key whose task is
	// gone is free.
	Unique string
	// ReuseUnique: when the task holding Unique is dead or cancelled, create this task
	// and pass the key to it (the old record keeps its history without the key).
	ReuseUnique bool
	// ID: an explicit id ("" = generated).
	ID string
}

// Retries is a helper for Task.MaxRetries.
func Retries(n int) *int { return &n }

func (c *Client) validate(t *Task) error {
	if err := keys.ValidQueue(t.Queue); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if t.Function == "" || len(t.Function) > 128 {
		return fmt.Errorf("%w: function name must be 1..128 bytes", ErrInvalid)
	}
	if err := keys.ValidPriority(t.Priority); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(t.Payload) > c.maxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooBig, len(t.Payload), c.maxPayload)
	}
	if t.MaxRetries != nil && (*t.MaxRetries < 0 || *t.MaxRetries > 1000) {
		return fmt.Errorf("%w: max retries %d must be 0..1000", ErrInvalid, *t.MaxRetries)
	}
	if t.Timeout < 0 || t.Delay < 0 {
		return fmt.Errorf("%w: timeout and delay must not be negative", ErrInvalid)
	}
	if t.ID != "" && (len(t.ID) > 128 || !keys.NameChars(t.ID, "_.:-")) {
		return fmt.Errorf("%w: id %q must match [A-Za-z0-9_.:-]{1,128}", ErrInvalid, t.ID)
	}
	if len(t.Unique) > 512 {
		return fmt.Errorf("%w: unique key is %d bytes, limit 512", ErrInvalid, len(t.Unique))
	}
	return nil
}

func (c *Client) args(t *Task, now time.Time) lua.NewTask {
	id := t.ID
	if id == "" {
		id = NewID(now)
	}
	runAt := int64(0)
	if !t.RunAt.IsZero() {
		runAt = t.RunAt.UnixMilli()
	} else if t.Delay > 0 {
		runAt = now.Add(t.Delay).UnixMilli()
	}
	mr := -1
	if t.MaxRetries != nil {
		mr = *t.MaxRetries
	}
	return lua.NewTask{ID: id, Function: t.Function, Payload: t.Payload, Priority: t.Priority,
		MaxRetries: mr, TimeoutMS: t.Timeout.Milliseconds(), RunAtMS: runAt, Unique: t.Unique,
		ReuseUnique: t.ReuseUnique}
}

// Enqueue creates a task and returns its id. With a unique key that is taken, it
// returns the existing task's id and created=false.
func (c *Client) Enqueue(ctx context.Context, t Task) (id string, created bool, err error) {
	if err := c.validate(&t); err != nil {
		return "", false, err
	}
	if err := c.register(ctx, t.Queue); err != nil {
		return "", false, err
	}
	now := c.now()
	rs, err := lua.Enqueue.Run(ctx, c.rdb, withTrace(ctx, lua.EnqueueArgs{Queue: c.ks.Queue(t.Queue), NowMS: now.UnixMilli(),
		Tasks: []lua.NewTask{c.args(&t, now)}}))
	if err != nil {
		return "", false, err
	}
	return rs[0].ID, rs[0].Created, rs[0].Err
}

// Result is the outcome of one task of an EnqueueMany.
type Result struct {
	ID      string
	Created bool
	// HolderStatus: when Created is false, the status of the task holding the unique key
	// (StatusDead or StatusCancelled: pass ReuseUnique to replace it).
	HolderStatus Status
	Err          error
}

// EnqueueMany creates many tasks in one pipelined round trip. Tasks of one queue go
// in batches, one script call each (at most lua.EnqueueBatch tasks or
// lua.EnqueueBatchBytes of payload), created in order and each atomically as by Enqueue.
// Results are in the order of ts. A batch whose call fails reports that error for each
// of its tasks (the ones before the failure may exist).
func (c *Client) EnqueueMany(ctx context.Context, ts []Task) ([]Result, error) {
	out := make([]Result, len(ts))
	now := c.now()
	type batch struct {
		q     keys.Queue
		idx   []int // positions in ts
		args  []lua.NewTask
		bytes int
		call  *lua.Pending[[]lua.EnqueueResult]
	}
	var bs []*batch
	open := map[string]*batch{} // the batch of each queue that takes more tasks
	for i := range ts {
		if err := c.validate(&ts[i]); err != nil {
			out[i].Err = err
			continue
		}
		if err := c.register(ctx, ts[i].Queue); err != nil {
			return nil, err
		}
		b := open[ts[i].Queue]
		size := len(ts[i].Payload)
		if b == nil || len(b.args) == lua.EnqueueBatch || (len(b.args) > 0 && b.bytes+size > lua.EnqueueBatchBytes) {
			b = &batch{q: c.ks.Queue(ts[i].Queue)}
			open[ts[i].Queue] = b
			bs = append(bs, b)
		}
		b.idx = append(b.idx, i)
		b.args = append(b.args, c.args(&ts[i], now))
		b.bytes += size
	}
	for attempt := 0; attempt < 2 && len(bs) > 0; attempt++ {
		p := c.rdb.Pipeline()
		for _, b := range bs {
			b.call = lua.Enqueue.Queue(ctx, p, withTrace(ctx, lua.EnqueueArgs{Queue: b.q, NowMS: now.UnixMilli(), Tasks: b.args}))
		}
		_, _ = p.Exec(ctx)
		var again []*batch
		for _, b := range bs {
			if lua.IsNoScript(b.call.Err()) && attempt == 0 {
				again = append(again, b)
				continue
			}
			rs, err := b.call.Result()
			for j, i := range b.idx {
				if err != nil {
					out[i].Err = err
					continue
				}
				out[i] = Result{ID: rs[j].ID, Created: rs[j].Created, HolderStatus: rs[j].HolderStatus, Err: rs[j].Err}
			}
		}
		bs = again
		if len(bs) > 0 {
			if err := lua.Load(ctx, c.rdb); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// register adds q to the set of known queues, again every RegisterEvery (by the client's clock).
func (c *Client) register(ctx context.Context, q string) error {
	now := c.now()
	c.mu.Lock()
	last, done := c.known[q]
	c.mu.Unlock()
	if done && now.Sub(last) < RegisterEvery && !now.Before(last) {
		return nil
	}
	if err := c.rdb.SAdd(ctx, c.ks.Queues(), q).Err(); err != nil {
		return fmt.Errorf("register queue %s: %w", q, err)
	}
	c.mu.Lock()
	c.known[q] = now
	c.mu.Unlock()
	return nil
}

// Get reads a task.
func (c *Client) Get(ctx context.Context, queue, id string) (*TaskInfo, error) {
	if err := keys.ValidQueue(queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	h, err := c.rdb.HGetAll(ctx, c.ks.Queue(queue).Task(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("get %s in %s: %w", id, queue, ErrNotFound)
	}
	ti := DecodeTask(h)
	if ti.ID == "" {
		ti.ID = id
	}
	if ti.Queue == "" {
		ti.Queue = queue
	}
	return &ti, nil
}

// CancelOutcome is what a cancel did: CancelDone or CancelRequested.
type CancelOutcome = lua.CancelOutcome

// Outcomes of CancelTask.
const (
	// CancelDone: the task was queued, scheduled or retrying, and is now cancelled.
	CancelDone = lua.CancelDone
	// CancelRequested: the task was running. Its worker cancels the function's context
	// (context.Cause: runtime.ErrCancelled) at its next heartbeat, within
	// DTQ_HEARTBEAT_INTERVAL_S; the task then ends cancelled, not retried. A function
	// that finished before its worker learned of the request keeps its outcome, as
	// does one that returns success after the cancel: Wait tells which happened.
	CancelRequested = lua.CancelRequested
)

// Cancel cancels a queued, scheduled or retrying task, or asks a running one to stop
// (CancelTask says which): ErrNotFound when there is no such task, ErrWrongStatus
// (naming the status) when it has ended.
func (c *Client) Cancel(ctx context.Context, queue, id string) error {
	_, err := c.CancelTask(ctx, queue, id)
	return err
}

// CancelTask is Cancel, reporting what it did.
func (c *Client) CancelTask(ctx context.Context, queue, id string) (CancelOutcome, error) {
	if err := keys.ValidQueue(queue); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if id == "" {
		return "", fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	q := c.ks.Queue(queue)
	unique, err := c.rdb.HGet(ctx, q.Task(id), "unique").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("cancel %s: %w", id, err)
	}
	return lua.Cancel.Run(ctx, c.rdb, lua.CancelArgs{Queue: q, ID: id, Unique: unique, NowMS: c.now().UnixMilli(), KeepMS: c.keepMS})
}

// Pause stops workers reading new entries of queue (running tasks finish).
func (c *Client) Pause(ctx context.Context, queue string) error {
	if err := keys.ValidQueue(queue); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return c.rdb.Set(ctx, c.ks.Queue(queue).Paused(), "1", 0).Err()
}

// Resume undoes Pause.
func (c *Client) Resume(ctx context.Context, queue string) error {
	if err := keys.ValidQueue(queue); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return c.rdb.Del(ctx, c.ks.Queue(queue).Paused()).Err()
}

// Paused reports whether queue is paused.
func (c *Client) Paused(ctx context.Context, queue string) (bool, error) {
	n, err := c.rdb.Exists(ctx, c.ks.Queue(queue).Paused()).Result()
	return n == 1, err
}

// Dead lists up to limit dead tasks of queue, most recent first.
func (c *Client) Dead(ctx context.Context, queue string, limit int) ([]TaskInfo, error) {
	if err := keys.ValidQueue(queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if limit <= 0 {
		limit = 100
	}
	q := c.ks.Queue(queue)
	ids, err := c.rdb.ZRevRange(ctx, q.Dead(), 0, int64(limit-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("list dead: %w", err)
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, q.Task(id))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read dead: %w", err)
	}
	out := make([]TaskInfo, 0, len(ids))
	for i, id := range ids {
		ti := DecodeTask(cmds[i].Val())
		if ti.ID == "" {
			ti.ID, ti.Queue, ti.Status = id, queue, StatusDead
		}
		out = append(out, ti)
	}
	return out, nil
}

// Requeue puts a dead task back on its stream with a fresh retry budget.
func (c *Client) Requeue(ctx context.Context, queue, id string) error {
	if err := keys.ValidQueue(queue); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	_, err := lua.Requeue.Run(ctx, c.rdb, lua.RequeueArgs{Queue: c.ks.Queue(queue), ID: id, NowMS: c.now().UnixMilli()})
	return err
}

// Workers lists workers with their liveness computed from heartbeat age.
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
	ws, err := liveness.List(ctx, c.rdb, c.ks, c.now())
	if ws == nil {
		return nil, err
	}
	out := make([]Worker, len(ws))
	for i, w := range ws {
		out[i] = workerOf(w)
	}
	return out, err
}

// NewID returns a task id: 10 characters of millisecond time then 16 random ones
// (Crockford base32, so ids sort by creation time).
func NewID(now time.Time) string {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	var b [26]byte
	ms := uint64(now.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = alphabet[ms&31]
		ms >>= 5
	}
	var r [16]byte
	_, _ = rand.Read(r[:])
	for i := 0; i < 16; i++ {
		b[10+i] = alphabet[r[i]&31]
	}
	return string(b[:])
}

// TaskInfo is a task as stored.
type TaskInfo struct {
	ID         string `json:"id"`
	Queue      string `json:"queue"`
	Function   string `json:"function"`
	Status     Status `json:"status"`
	Attempt    int64  `json:"attempt"`
	Priority   int    `json:"priority"`
	Failures   int64  `json:"failures"`
	MaxRetries int64  `json:"max_retries"`
	TimeoutMS  int64  `json:"timeout_ms,omitempty"` // 0: the function's default
	Error      string `json:"error"`
	Result     string `json:"result"`
	Payload    string `json:"payload,omitempty"`
	Worker     string `json:"worker,omitempty"`
	Unique     string `json:"unique,omitempty"`
	Raw        string `json:"raw,omitempty"` // the fields of a malformed entry (dead records)
	CreatedAt  int64  `json:"created_at_ms,omitempty"`
	RunAt      int64  `json:"run_at_ms,omitempty"`
	StartedAt  int64  `json:"started_at_ms,omitempty"`
	FinishedAt int64  `json:"finished_at_ms,omitempty"`
	Reclaims   int64  `json:"reclaims,omitempty"`
}

// DecodeTask reads a task hash. It never fails: a field that does not parse reads as
// zero, and the raw text stays available through HGETALL. The timeout, the retries and
// the creation time are read from the record's spec (enqueue.lua keeps them there
// alone), or from fields of their own in a record that has them (written before, or an
// invalid-entry record).
func DecodeTask(h map[string]string) TaskInfo {
	n := func(k string) int64 {
		v, err := strconv.ParseInt(h[k], 10, 64)
		if err != nil {
			return 0 // out of range too: ParseInt would return the closest bound
		}
		return v
	}
	var tmo, maxr, created int64
	if spec, ok := h["spec"]; ok {
		_, tmo, maxr, created, _ = lua.ParseSpec(spec)
	}
	// a field of its own, where the record has one, over the spec's
	own := func(k string, spec int64) int64 {
		if _, ok := h[k]; ok {
			return n(k)
		}
		return spec
	}
	tmo, maxr, created = own("timeout_ms", tmo), own("max_retries", maxr), own("created_at", created)
	return TaskInfo{
		ID: h["id"], Queue: h["queue"], Function: h["function"], Status: Status(h["status"]),
		Attempt: n("attempt"), Priority: int(n("priority")), Failures: n("failures"),
		MaxRetries: maxr, TimeoutMS: tmo, Error: h["error"], Result: h["result"], Payload: h["payload"],
		Worker: h["worker"], Unique: h["unique"], Raw: h["raw"],
		CreatedAt: created, RunAt: n("run_at"), StartedAt: n("started_at"),
		FinishedAt: n("finished_at"), Reclaims: n("reclaims"),
	}
}
