package client_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/lua"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func setup(t *testing.T) (*client.Client, context.Context) {
	t.Helper()
	srv := redistest.Shared(t)
	return client.New(srv.Client(t), client.Options{Prefix: redistest.Prefix(t), MaxPayload: 1024}), context.Background()
}

func TestEnqueueRejectsBadInputAndCreatesNothing(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	for _, tc := range []struct {
		name string
		task client.Task
		want error
	}{
		{"queue with braces", client.Task{Queue: "a{b}", Function: "noop"}, client.ErrInvalid},
		{"queue with colon", client.Task{Queue: "a:b", Function: "noop"}, client.ErrInvalid},
		{"queue of 10000 bytes", client.Task{Queue: strings.Repeat("q", 10000), Function: "noop"}, client.ErrInvalid},
		{"no function", client.Task{Queue: "q"}, client.ErrInvalid},
		{"priority 10", client.Task{Queue: "q", Function: "noop", Priority: 10}, client.ErrInvalid},
		{"priority -1", client.Task{Queue: "q", Function: "noop", Priority: -1}, client.ErrInvalid},
		{"payload over the limit", client.Task{Queue: "q", Function: "noop", Payload: make([]byte, 1025)}, client.ErrPayloadTooBig},
		{"negative retries", client.Task{Queue: "q", Function: "noop", MaxRetries: client.Retries(-2)}, client.ErrInvalid},
		{"bad id", client.Task{Queue: "q", Function: "noop", ID: "has space"}, client.ErrInvalid},
	} {
		_, _, err := c.Enqueue(ctx, tc.task)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	qi, err := c.Queue(ctx, "q")
	if err != nil || qi.Lag != 0 || qi.Scheduled != 0 {
		t.Fatalf("queue after refused enqueues = %+v, %v; want empty", qi, err)
	}
}

func TestUniqueKey(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	first, created, err := c.Enqueue(ctx, client.Task{Queue: "q", Function: "noop", Unique: "order-1"})
	if err != nil || !created {
		t.Fatal(err)
	}
	again, created, err := c.Enqueue(ctx, client.Task{Queue: "q", Function: "other", Unique: "order-1", Delay: time.Hour})
	if err != nil || created || again != first {
		t.Fatalf("second enqueue = %q created=%v err=%v; want %q, nothing created", again, created, err, first)
	}
	qi, _ := c.Queue(ctx, "q")
	if qi.Lag != 1 || qi.Scheduled != 0 {
		t.Fatalf("queue = %+v, want exactly the first task", qi)
	}
	// Cancelling the first frees nothing until its record expires: the key still maps to it.
	if err := c.Cancel(ctx, "q", first); err != nil {
		t.Fatal(err)
	}
	if id, created, _ := c.Enqueue(ctx, client.Task{Queue: "q", Function: "noop", Unique: "order-1"}); created || id != first {
		t.Fatalf("enqueue after cancel = %q created=%v", id, created)
	}
}

func TestEnqueueManyAndInspect(t *testing.T) {
	t.Parallel()
	c, ctx := setup(t)
	ts := []client.Task{
		{Queue: "q", Function: "noop", Priority: 9, Timeout: 1500 * time.Millisecond, MaxRetries: client.Retries(7)},
		{Queue: "q", Function: "noop", Priority: 9},
		{Queue: "q", Function: "noop", Priority: 0},
		{Queue: "q", Function: "noop", Delay: time.Hour},
		{Queue: "bad queue", Function: "noop"},
	}
	res, err := c.EnqueueMany(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:4] {
		if r.Err != nil || !r.Created || r.ID == "" {
			t.Fatalf("task %d: %+v", i, r)
		}
	}
	if !errors.Is(res[4].Err, client.ErrInvalid) {
		t.Fatalf("bad task: %+v, want ErrInvalid", res[4])
	}
	qi, err := c.Queue(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Lag != 3 || qi.Priorities[0].Priority != 9 || qi.Priorities[0].Lag != 2 || qi.Priorities[9].Lag != 1 || qi.Scheduled != 1 {
		t.Fatalf("queue = %+v", qi)
	}
	before := time.Now().UnixMilli()
	ti, err := c.Get(ctx, "q", res[0].ID)
	if err != nil || ti.TimeoutMS != 1500 || ti.MaxRetries != 7 || ti.CreatedAt <= 0 || ti.CreatedAt > before {
		t.Fatalf("task 0 = %+v, %v; want timeout 1500 ms, 7 retries, its creation time", ti, err)
	}
	ti, err = c.Get(ctx, "q", res[3].ID)
	if err != nil || ti.Status != "scheduled" || ti.RunAt == 0 {
		t.Fatalf("delayed task = %+v, %v", ti, err)
	}
	if _, err := c.Get(ctx, "q", "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of a missing task: %v", err)
	}
	names, err := c.Queues(ctx)
	if err != nil || len(names) != 1 || names[0] != "q" {
		t.Fatalf("queues = %v, %v", names, err)
	}
}

// evalshaCalls is the number of EVALSHA calls srv has run.
func evalshaCalls(t *testing.T, ctx context.Context, srv *redis.Client) int {
	t.Helper()
	s, err := srv.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(s, "\r\n") {
		if rest, ok := strings.CutPrefix(l, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// EnqueueMany sends the tasks of a queue in batches of lua.EnqueueBatch tasks or
// lua.EnqueueBatchBytes of payload, one script call each, and reports each task as
// enqueued one by one would.
func TestEnqueueManyBatches(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{}) // its own: the test counts script calls
	rdb := srv.Client(t)
	c := client.New(rdb, client.Options{Prefix: redistest.Prefix(t)})
	ctx := context.Background()
	if _, _, err := c.Enqueue(ctx, client.Task{Queue: "warm", Function: "noop"}); err != nil {
		t.Fatal(err) // loads the scripts and registers nothing of a and b
	}
	var ts []client.Task
	for i := range 250 {
		q := "a"
		if i%2 == 1 {
			q = "b"
		}
		ts = append(ts, client.Task{Queue: q, Function: "f" + strconv.Itoa(i), Payload: []byte(strconv.Itoa(i)), Priority: i % 10})
	}
	ts[10].Unique, ts[12].Unique = "same", "same" // both in a: the second gets the first's id
	ts[20].ID, ts[22].ID = "dup", "dup"           // both in a: the second is refused
	ts[40].Delay = time.Hour
	before := evalshaCalls(t, ctx, rdb)
	res, err := c.EnqueueMany(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	// a: 125 tasks, b: 125 → two calls each
	if n := evalshaCalls(t, ctx, rdb) - before; n != 4 {
		t.Fatalf("%d script calls for 2 queues of 125 tasks, want 4 (batches of %d)", n, lua.EnqueueBatch)
	}
	for i, r := range res {
		switch i {
		case 12:
			if r.Created || r.ID != res[10].ID || r.Err != nil {
				t.Fatalf("task 12 (unique key of 10) = %+v", r)
			}
			continue
		case 22:
			if !errors.Is(r.Err, lua.ErrTaskExists) {
				t.Fatalf("task 22 (id of 20) = %+v, want ErrTaskExists", r)
			}
			continue
		}
		if r.Err != nil || !r.Created {
			t.Fatalf("task %d = %+v", i, r)
		}
		ti, err := c.Get(ctx, ts[i].Queue, r.ID)
		if err != nil || ti.Function != ts[i].Function || string(ti.Payload) != strconv.Itoa(i) || ti.Priority != i%10 {
			t.Fatalf("task %d stored as %+v, %v", i, ti, err)
		}
	}
	for q, want := range map[string]int64{"a": 125 - 2 - 1, "b": 125} {
		qi, err := c.Queue(ctx, q)
		if err != nil || qi.Lag != want {
			t.Fatalf("queue %s = %+v, %v; want lag %d", q, qi, err, want)
		}
	}

	// Payloads: a batch holds at most lua.EnqueueBatchBytes of them.
	big := make([]byte, lua.EnqueueBatchBytes/2+1)
	before = evalshaCalls(t, ctx, rdb)
	res, err = c.EnqueueMany(ctx, []client.Task{{Queue: "a", Function: "big", Payload: big}, {Queue: "a", Function: "big", Payload: big},
		{Queue: "a", Function: "small"}})
	if err != nil || res[0].Err != nil || res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("big payloads: %+v, %v", res, err)
	}
	if n := evalshaCalls(t, ctx, rdb) - before; n != 2 {
		t.Fatalf("%d script calls for two payloads of over half the batch limit and a small one, want 2", n)
	}
}

// A batch whose script fails reports the error for each of its tasks; batches of other
// queues are not affected.
func TestEnqueueManyFailedBatch(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	c := client.New(rdb, client.Options{Prefix: prefix})
	ctx := context.Background()
	// A schedule that is not a sorted set: delayed tasks of queue a cannot be written.
	if err := rdb.Set(ctx, keys.New(prefix).Queue("a").Schedule(), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := c.EnqueueMany(ctx, []client.Task{{Queue: "a", Function: "noop", Delay: time.Hour},
		{Queue: "b", Function: "noop"}, {Queue: "a", Function: "noop", Delay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err == nil || res[2].Err == nil || !strings.Contains(res[0].Err.Error(), "WRONGTYPE") {
		t.Fatalf("tasks of the failed batch: %+v, %+v; want its error", res[0], res[2])
	}
	if res[1].Err != nil || !res[1].Created {
		t.Fatalf("task of queue b = %+v, want created", res[1])
	}
}
