package blockread

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// long is a block no test waits out: a read that returns did not run it to its end.
const long = time.Hour

// hang bounds how long a test waits for a read that must end: far below long.
const hang = time.Minute

// sent records the BLOCK argument of every XREAD and XREADGROUP a client sends, and
// tells each one on a channel just before it goes out.
type sent struct {
	mu     sync.Mutex
	blocks []string
	out    chan struct{}
}

func watch(c interface{ AddHook(redis.Hook) }) *sent {
	s := &sent{out: make(chan struct{}, 16)}
	c.AddHook(s)
	return s
}

func (s *sent) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "xread" || n == "xreadgroup" {
			args := cmd.Args()
			for i := range args[:len(args)-1] {
				if a, ok := args[i].(string); ok && strings.EqualFold(a, "block") {
					s.mu.Lock()
					s.blocks = append(s.blocks, fmt.Sprint(args[i+1]))
					s.mu.Unlock()
				}
			}
			select {
			case s.out <- struct{}{}:
			default:
			}
		}
		return next(ctx, cmd)
	}
}

func (s *sent) last(t *testing.T) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.blocks) == 0 {
		t.Fatal("no blocking read was sent")
	}
	return s.blocks[len(s.blocks)-1]
}

// drain forgets the reads already told of.
func (s *sent) drain() {
	for {
		select {
		case <-s.out:
		default:
			return
		}
	}
}

// newReader is New, closed when t ends unless t failed (a read may still hang then).
func newReader(t *testing.T, c redis.UniversalClient, o Options) *Reader {
	r := New(c, o)
	t.Cleanup(func() {
		if !t.Failed() {
			r.Close()
		}
	})
	return r
}

type result struct {
	xs  []redis.XStream
	err error
}

// readAsync runs read on a goroutine; its result comes on the channel.
func readAsync(read func() ([]redis.XStream, error)) <-chan result {
	ch := make(chan result, 1)
	go func() {
		xs, err := read()
		ch <- result{xs, err}
	}()
	return ch
}

func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(hang):
		t.Fatal("the read did not end")
		return result{}
	}
}

func group(t *testing.T, c redis.UniversalClient, stream string) {
	t.Helper()
	if err := c.XGroupCreateMkStream(context.Background(), stream, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
}

// Ending the context of a read blocked for an hour ends it at once, with nothing and
// the context's error; the connection stays (same CLIENT ID) and the next read gets
// its entry.
func TestEndedContextEndsALongBlock(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client(t)
	hook := watch(c)
	stream := redistest.Prefix(t) + "s"
	group(t, c, stream)
	r := newReader(t, c, Options{})
	if !r.Interruptible() {
		t.Fatal("a single node is not interruptible")
	}
	ctx, cancel := context.WithCancel(context.Background())
	args := &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{stream, ">"}, Block: long}
	ch := readAsync(func() ([]redis.XStream, error) { return r.XReadGroup(ctx, args) })
	<-hook.out // the read is past its context check, on its way to the server
	cancel()
	res := await(t, ch)
	if !errors.Is(res.err, context.Canceled) || res.xs != nil {
		t.Fatalf("interrupted read = %v, %v; want nothing and context.Canceled", res.xs, res.err)
	}
	if got := hook.last(t); got != fmt.Sprint(long.Milliseconds()) {
		t.Fatalf("BLOCK %s sent, want the full %d", got, long.Milliseconds())
	}
	id := r.id
	if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []string{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	xs, err := r.XReadGroup(context.Background(), args)
	if err != nil || len(xs) != 1 || len(xs[0].Messages) != 1 {
		t.Fatalf("read after the interruption = %v, %v; want the entry", xs, err)
	}
	if r.id != id {
		t.Fatalf("CLIENT ID %d after the interruption, was %d: the connection was replaced", r.id, id)
	}
	if args.Block != long {
		t.Fatal("the caller's arguments were changed")
	}
}

// A context ended before the read returns its error and sends nothing.
func TestEndedContextSendsNothing(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client(t)
	hook := watch(c)
	r := newReader(t, c, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.XRead(ctx, &redis.XReadArgs{Streams: []string{redistest.Prefix(t) + "s", "$"}, Block: long}); err != context.Canceled {
		t.Fatalf("read with an ended context: %v, want context.Canceled", err)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.blocks) != 0 {
		t.Fatalf("sent %v", hook.blocks)
	}
}

// A nil reply (nothing within the block, or no BLOCK and nothing new) is nothing, not
// an error.
func TestNilIsNothing(t *testing.T) {
	t.Parallel()
	c := redistest.Shared(t).Client(t)
	stream := redistest.Prefix(t) + "s"
	group(t, c, stream)
	r := newReader(t, c, Options{})
	ctx := context.Background()
	for _, block := range []time.Duration{-1, time.Millisecond, 100 * time.Microsecond} {
		xs, err := r.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, "$"}, Block: block})
		if err != nil || xs != nil {
			t.Errorf("XREAD block %v = %v, %v; want nothing", block, xs, err)
		}
		xs, err = r.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{stream, ">"}, Block: block})
		if err != nil || xs != nil {
			t.Errorf("XREADGROUP block %v = %v, %v; want nothing", block, xs, err)
		}
	}
}

// A server that refuses CLIENT ID, or CLIENT UNBLOCK, makes the Reader block on the pool
// with short blocks, for good; reads still get their entries.
func TestRefusedClientCommandsFallBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{Args: append(
		redistest.ACLUser("user noclient on >pw ~* &* +@all -client"),
		redistest.ACLUser("user nounblock on >pw ~* &* +@all -client|unblock")...)})
	admin := srv.Client(t)
	for _, user := range []string{"noclient", "nounblock"} {
		t.Run(user, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw"})
			t.Cleanup(func() { _ = c.Close() })
			hook := watch(c)
			stream := "s-" + user
			r := newReader(t, c, Options{ShortBlock: 20 * time.Millisecond})
			res := await(t, readAsync(func() ([]redis.XStream, error) {
				return r.XRead(context.Background(), &redis.XReadArgs{Streams: []string{stream, "$"}, Block: long})
			}))
			if res.err != nil || res.xs != nil {
				t.Fatalf("read = %v, %v; want nothing after a short block", res.xs, res.err)
			}
			if got := hook.last(t); got != "20" {
				t.Fatalf("BLOCK %s sent, want the short block 20", got)
			}
			if r.Interruptible() {
				t.Fatal("still interruptible after the refusal")
			}
			if err := admin.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: []string{"k", "v"}}).Err(); err != nil {
				t.Fatal(err)
			}
			xs, err := r.XRead(context.Background(), &redis.XReadArgs{Streams: []string{stream, "0"}, Block: 0})
			if err != nil || len(xs) != 1 {
				t.Fatalf("read = %v, %v; want the entry", xs, err)
			}
			if got := hook.last(t); got != "20" {
				t.Fatalf("BLOCK %s sent for a block without end, want the short block 20", got)
			}
		})
	}
}

// A broken dedicated connection (killed by the server) is replaced: the read on it
// fails, the next one opens a new connection with a new CLIENT ID.
func TestBrokenConnectionIsReplaced(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	c := srv.Client(t)
	admin := srv.Client(t)
	stream := "s"
	ctx := context.Background()
	r := newReader(t, c, Options{})
	if _, err := r.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, "$"}, Block: -1}); err != nil {
		t.Fatal(err)
	}
	old := r.id
	if old == 0 {
		t.Fatal("no dedicated connection")
	}
	if err := admin.ClientKillByFilter(ctx, "ID", fmt.Sprint(old)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	read := func() ([]redis.XStream, error) {
		return r.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, "0"}, Block: -1})
	}
	xs, err := read()
	if err == nil {
		t.Fatalf("read on the killed connection = %v, want its error", xs)
	}
	if xs, err = read(); err != nil || len(xs) != 1 {
		t.Fatalf("read after the failure = %v, %v; want the entry", xs, err)
	}
	if r.id == 0 || r.id == old {
		t.Fatalf("CLIENT ID %d after the failure, was %d: want a new connection", r.id, old)
	}
	if !r.Interruptible() {
		t.Fatal("a broken connection made the reader give up the dedicated connection")
	}
}

// A read whose dedicated connection dropped fails at once: go-redis does not resend it
// (here each resend would first wait an hour), so the caller can reconnect at once.
func TestDroppedConnectionIsNotResent(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 3, MinRetryBackoff: long, MaxRetryBackoff: long})
	t.Cleanup(func() { _ = c.Close() })
	admin := srv.Client(t)
	stream := "s"
	ctx := context.Background()
	group(t, admin, stream)
	r := newReader(t, c, Options{})
	if _, err := r.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{stream, ">"}, Block: -1}); err != nil {
		t.Fatal(err)
	}
	ch := readAsync(func() ([]redis.XStream, error) {
		return r.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{stream, ">"}, Block: long})
	})
	for deadline := time.Now().Add(hang); ; time.Sleep(time.Millisecond) {
		list, err := admin.ClientList(ctx).Result()
		if err == nil && strings.Contains(list, "cmd=xreadgroup") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the read did not block")
		}
	}
	if err := admin.ClientKillByFilter(ctx, "ID", fmt.Sprint(r.id)).Err(); err != nil {
		t.Fatal(err)
	}
	if res := await(t, ch); res.err == nil {
		t.Fatalf("read on the dropped connection = %v, want its error", res.xs)
	}
	xs, err := r.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{stream, ">"}, Block: -1})
	if err != nil || len(xs) != 0 {
		t.Fatalf("read after the failure = %v, %v; want nothing, no error", xs, err)
	}
}

// On a cluster every read blocks on the pool, at most the short block, and an ended
// context is noticed within it (by the end of the block, or by go-redis before it
// sends the read).
func TestClusterUsesShortBlocks(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	hook := watch(c)
	r := newReader(t, c, Options{ShortBlock: 30 * time.Millisecond})
	if r.Interruptible() {
		t.Fatal("a cluster is interruptible")
	}
	streams := []string{"{q}:a", "{q}:b"} // one slot
	for _, s := range streams {
		group(t, c, s)
	}
	args := &redis.XReadGroupArgs{Group: "g", Consumer: "w", Streams: []string{streams[0], streams[1], ">", ">"}, Block: long}
	xs, err := r.XReadGroup(context.Background(), args)
	if err != nil || xs != nil {
		t.Fatalf("read = %v, %v; want nothing after a short block", xs, err)
	}
	if got := hook.last(t); got != "30" {
		t.Fatalf("BLOCK %s sent, want the short block 30", got)
	}
	if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: streams[1], Values: []string{"k", "v"}}).Err(); err != nil {
		t.Fatal(err)
	}
	xs, err = r.XReadGroup(context.Background(), args)
	if err != nil || len(xs) != 1 || xs[0].Stream != streams[1] {
		t.Fatalf("read = %v, %v; want the entry of %s", xs, err, streams[1])
	}
	hook.drain()
	ctx, cancel := context.WithCancel(context.Background())
	ch := readAsync(func() ([]redis.XStream, error) { return r.XReadGroup(ctx, args) })
	<-hook.out
	cancel()
	if res := await(t, ch); !errors.Is(res.err, context.Canceled) || res.xs != nil {
		t.Fatalf("read whose context ended = %v, %v; want nothing and context.Canceled", res.xs, res.err)
	}
}
