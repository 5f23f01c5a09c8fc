package scaler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/redistest"
)

// repeatFixture is a scaler on a clock the test moves, with one StreamIsActive stream of
// queue whose messages arrive on msgs in order.
type repeatFixture struct {
	*fixture
	clock *fakeClock
	msgs  chan bool
}

func newRepeatFixture(t *testing.T, queue string, repeat time.Duration) *repeatFixture {
	t.Helper()
	srv := redistest.Shared(t)
	cfg := testConfig(redistest.Prefix(t))
	cfg.PushRepeat = repeat
	cfg.PushMaxBlock = 50 * time.Millisecond // idle passes come often too
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	clock := &fakeClock{t: time.Now()}
	f := serveWith(t, c, cfg, Options{Now: clock.now})
	f.c = c
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := f.cli.StreamIsActive(ctx, ref("queues", queue))
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan bool, 64)
	go func() {
		defer close(msgs)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			msgs <- r.Result
		}
	}()
	return &repeatFixture{fixture: f, clock: clock, msgs: msgs}
}

// next is the stream's next message.
func (r *repeatFixture) next(t *testing.T, what string, want bool) {
	t.Helper()
	select {
	case v, ok := <-r.msgs:
		if !ok {
			t.Fatalf("%s: the stream ended", what)
		}
		if v != want {
			t.Fatalf("%s: %v, want %v", what, v, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: nothing for 20 s, want %v", what, want)
	}
}

// passes waits for n whole passes of the watcher begun after the call.
func (r *repeatFixture) passes(t *testing.T, n int) {
	t.Helper()
	passed := make(chan struct{}, 1)
	hook := func(error) {
		select {
		case passed <- struct{}{}:
		default:
		}
	}
	r.s.watch.afterPass.Store(&hook)
	defer r.s.watch.afterPass.Store(nil)
	for range n + 1 { // the first may have begun before
		select {
		case <-passed:
		case <-time.After(20 * time.Second):
			t.Fatal("no pass of the watcher for 20 s")
		}
	}
}

// none checks that nothing was sent by the passes that saw the clock as it is now.
func (r *repeatFixture) none(t *testing.T, what string) {
	t.Helper()
	r.passes(t, 1)
	select {
	case v := <-r.msgs:
		t.Fatalf("%s: %v sent, want nothing yet", what, v)
	default:
	}
}

func (r *repeatFixture) repeats(t *testing.T) string {
	t.Helper()
	return grepLines(scrape(t, r.fixture), "dtq_scaler_push_repeats_total")
}

// An active stream's true is sent again 1, 3 and 7 repeats after it turned active (on
// the scaler's clock, not before), and no more; a stream that went idle gets no stray
// repeat; turning active again starts the repeats afresh. (KEDA drops a true it gets
// while its cached Deployment still shows replicas; the repeat is what wakes it then.)
func TestActiveStreamRepeatsTrue(t *testing.T) {
	t.Parallel()
	const repeat = 100 * time.Millisecond
	r := newRepeatFixture(t, "rep", repeat)
	s := r.seed(t)
	r.next(t, "first message", false)

	s.add("rep", 0, 1)
	r.next(t, "after the first task", true)
	at := time.Duration(0) // since the activation, on the scaler's clock
	for i, due := range []time.Duration{repeat, 3 * repeat, 7 * repeat} {
		r.clock.add(due - time.Millisecond - at)
		r.none(t, "just before a repeat is due")
		r.clock.add(time.Millisecond)
		at = due
		r.next(t, "repeat "+string(rune('1'+i)), true)
	}
	r.clock.add(20*repeat - at) // past where a fourth would be due if the gaps went on
	r.passes(t, 2)
	s.finish("rep", 0, s.deliver("rep", 0, 1)...)
	r.next(t, "after the backlog drained (no fourth repeat before it)", false)
	if got := r.repeats(t); got != "dtq_scaler_push_repeats_total 3" {
		t.Fatalf("repeats = %q, want 3", got)
	}

	// Active again: the repeats start afresh; idle before they end: none after the false.
	s.add("rep", 0, 1)
	r.next(t, "after the second task", true)
	r.clock.add(repeat)
	r.next(t, "the second activation's first repeat", true)
	s.finish("rep", 0, s.deliver("rep", 0, 1)...)
	r.next(t, "after the second backlog drained", false)
	r.clock.add(20 * repeat)
	r.none(t, "idle, past every repeat's time")
	if got := r.repeats(t); got != "dtq_scaler_push_repeats_total 4" {
		t.Fatalf("repeats = %q, want 4 (one repeat before the stream went idle)", got)
	}
}

// DTQ_SCALER_PUSH_REPEAT_MS=0 sends each change once.
func TestPushRepeatOff(t *testing.T) {
	t.Parallel()
	r := newRepeatFixture(t, "once", 0)
	s := r.seed(t)
	r.next(t, "first message", false)
	s.add("once", 0, 1)
	r.next(t, "after the task", true)
	r.clock.add(time.Minute)
	r.none(t, "a minute on, still active")
	s.finish("once", 0, s.deliver("once", 0, 1)...)
	r.next(t, "after the backlog drained", false)
	if m := scrape(t, r.fixture); !strings.Contains(m, "\ndtq_scaler_push_repeats_total 0\n") {
		t.Fatalf("repeats: %q, want 0", grepLines(m, "dtq_scaler_push_repeats_total"))
	}
}
