package runtime

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/syncbuf"
	"github.com/dtq/dtq/lua"
)

// staleClaim is a worker (not started) that claimed ids of function "f" a visibility
// timeout ago; called receives the id of each call of "f".
type staleClaim struct {
	w      *Worker
	logs   *syncbuf.Buffer
	called chan string
	mine   []lua.Started
	at     time.Time
}

func newStaleClaim(t *testing.T, ids ...string) *staleClaim {
	t.Helper()
	ctx := context.Background()
	s := &staleClaim{logs: &syncbuf.Buffer{}, called: make(chan string, len(ids)), at: time.Now()}
	reg := NewRegistry()
	reg.Register("f", func(_ context.Context, task *Task) ([]byte, error) {
		s.called <- task.ID
		return nil, nil
	}, FuncOptions{})
	s.w = unstartedWorker(t, reg, slog.New(slog.NewTextHandler(s.logs, nil)))
	rdb := s.w.rdb
	q := s.w.queues[0]
	tasks := make([]lua.NewTask, len(ids))
	for i, id := range ids {
		tasks[i] = lua.NewTask{ID: id, Function: "f"}
	}
	if _, err := lua.Enqueue.Run(ctx, rdb, lua.EnqueueArgs{Queue: q, NowMS: s.at.UnixMilli(), Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	r, err := lua.Claim.Run(ctx, rdb, lua.ClaimArgs{Queue: q, Consumer: s.w.id, NowMS: s.at.UnixMilli(), Want: len(ids), MaxPayload: 1 << 20})
	if err != nil || len(r.Started) != len(ids) {
		t.Fatalf("claim = %+v, %v", r, err)
	}
	s.mine = r.Started
	return s
}

// execute runs the execution of st as an executor would, claimed a visibility timeout
// ago and never touched since, and returns it.
func (s *staleClaim) execute(st lua.Started) *execution {
	e := s.held(st)
	s.w.execute(e)
	return e
}

// held is the execution of st, held, claimed a visibility timeout ago and never
// touched since.
func (s *staleClaim) held(st lua.Started) *execution {
	q := s.w.queues[0]
	e := &execution{queue: q.Name, s: st, fn: s.w.reg.lookup(st.Function), fnLabel: st.Function, claimed: s.at}
	e.task = Task{ID: st.ID, Queue: q.Name, Function: st.Function, Attempt: st.Attempt, MaxRetries: 3}
	e.confirmed.Store(s.at.Add(-s.w.cfg.VisibilityTimeout).UnixNano())
	s.w.hold.add(e)
	return e
}

// ran reports whether "f" was called (for id, when it was).
func (s *staleClaim) ran(t *testing.T) (string, bool) {
	t.Helper()
	select {
	case id := <-s.called:
		return id, true
	default:
		return "", false
	}
}

// A function claimed long before its executor took it up (the worker was frozen, or
// starved, between the claim and the start) starts only once Redis confirms the claim
// is still the worker's. A peer's reaper took "taken" over meanwhile: its function is
// not called, and the worker lets the execution go. "kept" is still the worker's: its
// function runs, and the touch renewed its entry.
func TestStaleClaimStartsOnlyWhenConfirmed(t *testing.T) {
	t.Parallel()
	s := newStaleClaim(t, "taken", "kept")
	q := s.w.queues[0]
	peer, err := lua.Claim.Run(context.Background(), s.w.rdb, lua.ClaimArgs{Queue: q, Consumer: "peer", NowMS: s.at.UnixMilli(),
		Reclaim: true, Want: 1, MaxPayload: 1 << 20, MinIdleMS: 0})
	if err != nil || len(peer.Started) != 1 || peer.Started[0].ID != "taken" {
		t.Fatalf("peer's reclaim = %+v, %v", peer, err)
	}
	for _, st := range s.mine {
		e := s.execute(st)
		id, ran := s.ran(t)
		if st.ID == "taken" {
			if ran {
				t.Fatalf("the function of %s ran although a peer had taken it over", id)
			}
			if s.w.hold.holds(q.Name, st.Band, st.Entry) {
				t.Fatal("the execution a peer took over is still held (the heartbeat would touch it)")
			}
			continue
		}
		if !ran || id != "kept" {
			t.Fatalf("the function of a claim still the worker's: ran %v for %q", ran, id)
		}
		if age := time.Since(time.Unix(0, e.confirmed.Load())); age > time.Minute {
			t.Fatalf("the confirmed claim is %v old", age)
		}
	}
	if !strings.Contains(s.logs.String(), "taken over by a peer meanwhile; not started") {
		t.Fatalf("no word of the task not started:\n%s", s.logs.String())
	}
}

// When Redis does not answer the confirmation, the function starts as before: nothing
// shows the task was taken over, and its completion's fence settles it.
func TestStaleClaimUnconfirmedStartsAllTheSame(t *testing.T) {
	t.Parallel()
	s := newStaleClaim(t, "a")
	// Redis out of reach from here on: nothing listens on the address
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dead := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer dead.Close()
	s.w.rdb = dead
	s.execute(s.mine[0])
	if _, ran := s.ran(t); !ran {
		t.Fatal("the function did not start when its claim could not be confirmed")
	}
	if !strings.Contains(s.logs.String(), "cannot be confirmed; started all the same") {
		t.Fatalf("no word of the unconfirmed start:\n%s", s.logs.String())
	}
}

// A stale execution the drain handed back before its executor took it up is not
// started, and its confirmation touches nothing: the entry keeps the visibility timeout
// as its idle time the hand-back gave it, for a peer's next reaper pass.
func TestStaleClaimHandedBackIsNotStarted(t *testing.T) {
	t.Parallel()
	s := newStaleClaim(t, "a")
	e := s.held(s.mine[0])
	s.w.handBack([]*execution{e})
	s.w.execute(e)
	if id, ran := s.ran(t); ran {
		t.Fatalf("the function of %s ran after the drain handed it back", id)
	}
	q := s.w.queues[0]
	pending, err := s.w.rdb.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: q.Stream(e.s.Band), Group: keys.Group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending = %v, %v; want the one entry", pending, err)
	}
	if pending[0].Idle < s.w.cfg.VisibilityTimeout {
		t.Fatalf("idle %v after the hand-back, want at least the visibility timeout %v", pending[0].Idle, s.w.cfg.VisibilityTimeout)
	}
}

// An execution a heartbeat found lost while it waited for an executor (a peer took the
// task over) is not started: its function is not called with a cancelled context, and
// the worker lets it go.
func TestLostBeforeItStartsIsNotStarted(t *testing.T) {
	t.Parallel()
	s := newStaleClaim(t, "a")
	e := s.held(s.mine[0])
	e.confirmed.Store(time.Now().UnixNano()) // not stale: no confirmation runs
	if !e.lost() {
		t.Fatal("lost() = false on a fresh execution")
	}
	s.w.execute(e)
	if id, ran := s.ran(t); ran {
		t.Fatalf("the function of %s ran after its task was found lost", id)
	}
	if s.w.hold.holds(e.queue, e.s.Band, e.s.Entry) {
		t.Fatal("the lost execution is still held")
	}
	if !strings.Contains(s.logs.String(), "taken over by a peer before it started") {
		t.Fatalf("no word of the task not started:\n%s", s.logs.String())
	}
}
