package runtime

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"

	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/syncbuf"
	"github.com/dtq/dtq/lua"
)

// A function claimed long before its executor took it up (the worker was frozen, or
// starved, between the claim and the start) starts only once Redis confirms the claim
// is still the worker's. A peer's reaper took "taken" over meanwhile: its function is
// not called, and the worker lets the execution go. "kept" is still the worker's: its
// function runs, and the touch renewed its entry.
func TestStaleClaimStartsOnlyWhenConfirmed(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	cfg, err := LoadConfig(ctx, envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": redistest.Prefix(t),
	}))
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan string, 4)
	reg := NewRegistry()
	reg.Register("f", func(_ context.Context, task *Task) ([]byte, error) {
		called <- task.ID
		return nil, nil
	}, FuncOptions{})
	var logs syncbuf.Buffer
	w, err := New(Options{Config: cfg, Redis: rdb, Registry: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.events.Stop()
	q := w.queues[0]
	now := time.Now()
	if _, err := lua.Enqueue.Run(ctx, rdb, lua.EnqueueArgs{Queue: q, NowMS: now.UnixMilli(),
		Tasks: []lua.NewTask{{ID: "taken", Function: "f"}, {ID: "kept", Function: "f"}}}); err != nil {
		t.Fatal(err)
	}
	mine, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: w.id, NowMS: now.UnixMilli(), Want: 2, MaxPayload: 1 << 20})
	if err != nil || len(mine.Started) != 2 {
		t.Fatalf("claim = %+v, %v", mine, err)
	}
	peer, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: "peer", NowMS: now.UnixMilli(), Reclaim: true,
		Want: 1, MaxPayload: 1 << 20, MinIdleMS: 0})
	if err != nil || len(peer.Started) != 1 || peer.Started[0].ID != "taken" {
		t.Fatalf("peer's reclaim = %+v, %v", peer, err)
	}
	for _, s := range mine.Started {
		e := &execution{queue: q.Name, s: s, fn: w.reg.lookup(s.Function), fnLabel: s.Function, claimed: now}
		e.task = Task{ID: s.ID, Queue: q.Name, Function: s.Function, Attempt: s.Attempt, MaxRetries: 3}
		// claimed a visibility timeout ago, never touched since
		e.confirmed.Store(now.Add(-cfg.VisibilityTimeout).UnixNano())
		w.hold.add(e)
		w.execute(e)
		if s.ID == "taken" {
			select {
			case id := <-called:
				t.Fatalf("the function of %s ran although a peer had taken it over", id)
			default:
			}
			if w.hold.holds(q.Name, s.Band, s.Entry) {
				t.Fatal("the execution a peer took over is still held (the heartbeat would touch it)")
			}
			continue
		}
		select {
		case id := <-called:
			if id != "kept" {
				t.Fatalf("function called for %s", id)
			}
		default:
			t.Fatal("the function of a claim still the worker's did not run")
		}
		if age := time.Since(time.Unix(0, e.confirmed.Load())); age > time.Minute {
			t.Fatalf("the confirmed claim is %v old", age)
		}
	}
	if !strings.Contains(logs.String(), "taken over by a peer meanwhile; not started") {
		t.Fatalf("no word of the task not started:\n%s", logs.String())
	}
}

// When Redis does not answer the confirmation, the function starts as before: nothing
// shows the task was taken over, and its completion's fence settles it.
func TestStaleClaimUnconfirmedStartsAllTheSame(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	cfg, err := LoadConfig(ctx, envconfig.MapLookuper(map[string]string{
		"DTQ_REDIS_URL": srv.URL(), "DTQ_KEY_PREFIX": redistest.Prefix(t),
	}))
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan string, 1)
	reg := NewRegistry()
	reg.Register("f", func(_ context.Context, task *Task) ([]byte, error) {
		called <- task.ID
		return nil, nil
	}, FuncOptions{})
	var logs syncbuf.Buffer
	w, err := New(Options{Config: cfg, Redis: rdb, Registry: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer w.events.Stop()
	q := w.queues[0]
	now := time.Now()
	if _, err := lua.Enqueue.Run(ctx, rdb, lua.EnqueueArgs{Queue: q, NowMS: now.UnixMilli(),
		Tasks: []lua.NewTask{{ID: "a", Function: "f"}}}); err != nil {
		t.Fatal(err)
	}
	mine, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: w.id, NowMS: now.UnixMilli(), Want: 1, MaxPayload: 1 << 20})
	if err != nil || len(mine.Started) != 1 {
		t.Fatalf("claim = %+v, %v", mine, err)
	}
	// Redis out of reach from here on: nothing listens on the address
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dead := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer dead.Close()
	w.rdb = dead
	s := mine.Started[0]
	e := &execution{queue: q.Name, s: s, fn: w.reg.lookup(s.Function), fnLabel: s.Function, claimed: now}
	e.task = Task{ID: s.ID, Queue: q.Name, Function: s.Function, Attempt: s.Attempt, MaxRetries: 3}
	e.confirmed.Store(now.Add(-cfg.VisibilityTimeout).UnixNano())
	w.hold.add(e)
	w.execute(e)
	select {
	case <-called:
	default:
		t.Fatal("the function did not start when its claim could not be confirmed")
	}
	if !strings.Contains(logs.String(), "cannot be confirmed; started all the same") {
		t.Fatalf("no word of the unconfirmed start:\n%s", logs.String())
	}
}
