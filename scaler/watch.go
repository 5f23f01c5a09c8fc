package scaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/queuestat"
)

// watcher serves every open StreamIsActive stream from one loop and one Redis reader.
//
// Each pass reads the signal of every subscribed queue in one pipelined round trip,
// pushes each subscription whose activity changed, then waits:
//
//   - for a new entry on any band an idle subscription watches: one blocking XREAD over
//     all those streams, from the last entry ids read just before the counts (so an
//     entry added in between is seen either by the counts or by the XREAD);
//   - for the next scheduled task to come within an idle subscription's lead (a timer);
//   - at most poll while any subscription is active, since draining (XACK+XDEL) makes no
//     stream entry to wake on;
//   - at most maxBlock otherwise, to resynchronise;
//   - for a new subscription, which interrupts the blocking read with CLIENT UNBLOCK.
//
// A client that goes away only leaves the set; a failed read is retried with backoff
// while the streams stay open, so a Redis restart is healed without KEDA noticing. On
// Redis Cluster one XREAD cannot span queues (slots), so the watcher polls every poll.
type watcher struct {
	c        redis.UniversalClient
	ks       keys.Space
	now      func() time.Time
	log      *slog.Logger
	timeout  time.Duration
	poll     time.Duration
	maxBlock time.Duration
	minGap   time.Duration

	// afterPass, afterUnsubscribe and beforeBlock, when set, run after every pass (with
	// its error), every unsubscribe and before every blocking read: tests wait on them.
	afterPass        atomic.Pointer[func(error)]
	afterUnsubscribe atomic.Pointer[func()]
	beforeBlock      atomic.Pointer[func()]

	// maxQueues bounds the distinct queues of all subscriptions: every pass reads them
	// all and the blocking read names their streams.
	maxQueues int

	mu     sync.Mutex
	subs   map[*subscription]struct{}
	queues map[string]int // subscriptions per queue

	kick     chan struct{}
	stopping chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	started  atomic.Bool

	// epoch is odd while a blocking read may be under way on the connection readerID.
	epoch    atomic.Uint64
	readerID atomic.Int64
}

// subscription is one open StreamIsActive stream.
type subscription struct {
	m       Metadata
	metric  Metric
	wants   []want
	updates chan bool // the latest activity not yet sent; only the watcher loop writes
	last    int8      // -1 unknown, 0 idle, 1 active; only the watcher loop touches it
}

func newWatcher(c redis.UniversalClient, ks keys.Space, now func() time.Time, log *slog.Logger) *watcher {
	return &watcher{c: c, ks: ks, now: now, log: log,
		timeout: 2 * time.Second, poll: 500 * time.Millisecond, maxBlock: 5 * time.Second,
		minGap:    20 * time.Millisecond,
		maxQueues: DefaultMaxQueues,
		subs:      map[*subscription]struct{}{},
		queues:    map[string]int{},
		kick:      make(chan struct{}, 1),
		stopping:  make(chan struct{}),
		done:      make(chan struct{}),
	}
}

// start runs the loop; it returns at once.
func (w *watcher) start() {
	if w.started.Swap(true) {
		return
	}
	go w.run()
}

// stop ends the loop and waits for it; safe twice.
func (w *watcher) stop() {
	w.stopOnce.Do(func() {
		close(w.stopping)
		w.unblock()
	})
	if w.started.Load() {
		<-w.done
	}
}

// watchLimitError: a subscription would take the distinct queues of all open streams
// past the bound.
type watchLimitError struct{ watched, adds, max int }

func (e *watchLimitError) Error() string {
	return fmt.Sprintf("open StreamIsActive streams watch %d queues; this one would add %d, past DTQ_SCALER_MAX_QUEUES=%d", e.watched, e.adds, e.max)
}

// subscribe adds an open stream; its first update comes from the next pass. It fails
// with a *watchLimitError when the stream's queues would take the distinct queues of all
// streams past maxQueues: one stream more must not widen every pass without bound.
func (w *watcher) subscribe(m Metadata) (*subscription, error) {
	s := &subscription{m: m, metric: m.Metrics()[0], updates: make(chan bool, 1), last: -1}
	for _, q := range m.Queues {
		s.wants = append(s.wants, want{queue: q, bands: m.Priorities, lead: m.ScheduledLead})
	}
	w.mu.Lock()
	adds := 0
	for _, q := range m.Queues {
		if w.queues[q] == 0 {
			adds++
		}
	}
	if len(w.queues)+adds > w.maxQueues {
		err := &watchLimitError{watched: len(w.queues), adds: adds, max: w.maxQueues}
		w.mu.Unlock()
		return nil, err
	}
	for _, q := range m.Queues {
		w.queues[q]++
	}
	w.subs[s] = struct{}{}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	w.unblock()
	return s, nil
}

// unsubscribe removes a stream; it costs nothing more.
func (w *watcher) unsubscribe(s *subscription) {
	w.mu.Lock()
	if _, ok := w.subs[s]; ok {
		delete(w.subs, s)
		for _, q := range s.m.Queues {
			if w.queues[q]--; w.queues[q] <= 0 {
				delete(w.queues, q)
			}
		}
	}
	w.mu.Unlock()
	if h := w.afterUnsubscribe.Load(); h != nil {
		(*h)()
	}
}

func (w *watcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs)
}

// queueCount is the number of distinct queues the open streams watch.
func (w *watcher) queueCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queues)
}

// unblock interrupts the blocking read, if one is under way. The loop marks the epoch
// before it checks for kicks and sends XREAD, so a read this misses because it has not
// reached Redis yet is caught by a retry.
func (w *watcher) unblock() {
	e := w.epoch.Load()
	id := w.readerID.Load()
	if e%2 == 0 || id == 0 {
		return
	}
	for try := 0; try < 50 && w.epoch.Load() == e; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		n, err := w.c.ClientUnblock(ctx, id).Result()
		cancel()
		if err != nil || n == 1 {
			return
		}
		t := time.NewTimer(time.Millisecond)
		<-t.C
	}
}

func (w *watcher) snapshot() []*subscription {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*subscription, 0, len(w.subs))
	for s := range w.subs {
		out = append(out, s)
	}
	return out
}

// wait blocks for d, a kick or stop; false on stop.
func (w *watcher) wait(d time.Duration, kickable bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	kick := w.kick
	if !kickable {
		kick = nil
	}
	select {
	case <-t.C:
	case <-kick:
	case <-w.stopping:
		return false
	}
	return true
}

func (w *watcher) run() {
	defer close(w.done)
	var conn *redis.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	client, single := w.c.(*redis.Client)
	var lastRead time.Time
	var byEntry, prevByEntry bool // this pass and the last one were woken by a new entry
	failures := 0
	for {
		select {
		case <-w.stopping:
			return
		default:
		}
		subs := w.snapshot()
		if len(subs) == 0 {
			select {
			case <-w.kick:
			case <-w.stopping:
				return
			}
			continue
		}
		// A first new entry is read at once; a run of them (a busy queue below the
		// activation threshold) is read at most every minGap.
		if gap := w.minGap - w.now().Sub(lastRead); byEntry && prevByEntry && gap > 0 {
			if !w.wait(gap, false) {
				return
			}
		}
		prevByEntry, byEntry = byEntry, false
		select { // this pass covers every subscription made so far
		case <-w.kick:
		default:
		}
		lastRead = w.now()
		next, err := w.pass(subs)
		if h := w.afterPass.Load(); h != nil {
			(*h)(err)
		}
		if err != nil {
			failures++
			if failures == 1 {
				w.log.Warn("scaler: push read failed; retrying", "err", err, "streams", len(subs))
			}
			if conn != nil {
				_ = conn.Close()
				conn = nil
			}
			backoff := min(50*time.Millisecond<<min(failures-1, 6), 2*time.Second)
			backoff = backoff/2 + rand.N(backoff/2+1)
			if !w.wait(backoff, false) {
				return
			}
			continue
		}
		if failures > 0 {
			w.log.Info("scaler: push read recovered", "failed_reads", failures)
			failures = 0
		}
		d := next.until.Sub(w.now()).Truncate(time.Millisecond)
		if d <= 0 {
			continue // something is due now (or a subscription just went idle)
		}
		if len(next.streams) == 0 || !single {
			if !single && len(next.streams) > 0 {
				// Cluster: no blocking read can span the slots, so new entries on an
				// idle subscription's streams are looked for every poll.
				d = min(d, w.poll)
			}
			if !w.wait(d, true) {
				return
			}
			continue
		}
		if conn == nil {
			conn = client.Conn()
			ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
			id, err := conn.ClientID(ctx).Result()
			cancel()
			if err != nil && queuestat.IsServerError(err) {
				// An ACL without CLIENT: block on the connection all the same, but no
				// longer than poll, since nothing can interrupt the read for a new
				// subscription.
				id, err = 0, nil
			}
			if err != nil {
				_ = conn.Close()
				conn = nil
				failures++
				w.log.Warn("scaler: push reader connection failed; retrying", "err", err)
				if !w.wait(w.minGap*10, false) {
					return
				}
				continue
			}
			w.readerID.Store(id)
		}
		w.epoch.Add(1) // odd: a blocking read may be under way
		select {
		case <-w.kick:
			w.epoch.Add(1)
			continue
		case <-w.stopping:
			w.epoch.Add(1)
			return
		default:
		}
		if w.readerID.Load() == 0 {
			d = min(d, w.poll)
		}
		if h := w.beforeBlock.Load(); h != nil {
			(*h)()
		}
		args := make([]string, 0, 2*len(next.streams))
		args = append(args, next.streams...)
		args = append(args, next.ids...)
		err = conn.XRead(context.Background(), &redis.XReadArgs{Streams: args, Count: 1, Block: d}).Err()
		w.epoch.Add(1)
		byEntry = err == nil
		if err != nil && !errors.Is(err, redis.Nil) {
			select {
			case <-w.stopping:
				return
			default:
			}
			w.log.Warn("scaler: push blocking read failed; reconnecting", "err", err)
			_ = conn.Close()
			conn = nil
		}
	}
}

// wake is what the loop waits for after a pass.
type wake struct {
	until   time.Time
	streams []string // streams to block on
	ids     []string // the last entry id read of each
}

// pass reads the signal of subs in one round trip, pushes changes and says what to wait
// for next.
func (w *watcher) pass(subs []*subscription) (wake, error) {
	type qwant struct {
		bands   queuestat.Bands
		cursors queuestat.Bands // bands of idle subscriptions: wake on their entries
		leads   []time.Duration
		nextDue bool
	}
	per := map[string]*qwant{}
	var order []string
	for _, s := range subs {
		idle := s.last != 1
		for _, wt := range s.wants {
			qw := per[wt.queue]
			if qw == nil {
				qw = &qwant{}
				per[wt.queue] = qw
				order = append(order, wt.queue)
			}
			qw.bands |= wt.bands
			if !slices.Contains(qw.leads, wt.lead) {
				qw.leads = append(qw.leads, wt.lead)
			}
			if idle {
				qw.cursors |= wt.bands
				qw.nextDue = qw.nextDue || s.m.IncludeScheduled
			}
		}
	}
	specs := make([]queuestat.Spec, len(order))
	for i, q := range order {
		qw := per[q]
		slices.Sort(qw.leads)
		specs[i] = queuestat.Spec{Queue: q, Bands: qw.bands, Leads: qw.leads,
			Cursors: qw.cursors != 0, NextDue: qw.nextDue}
	}
	now := w.now()
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	stats, err := queuestat.Read(ctx, w.c, w.ks, specs, now)
	cancel()
	if err != nil {
		return wake{}, err
	}
	byQueue := make(map[string]*queuestat.Stat, len(stats))
	for i := range stats {
		byQueue[stats[i].Queue] = &stats[i]
	}
	specOf := make(map[string]int, len(order))
	for i, q := range order {
		specOf[q] = i
	}
	dueAt := func(q string, lead time.Duration) (int64, time.Time) {
		st := byQueue[q]
		i := slices.Index(specs[specOf[q]].Leads, lead)
		var next time.Time
		if i < len(st.NextDue) {
			next = st.NextDue[i]
		}
		return st.DueWithin[i], next
	}

	until := now.Add(w.maxBlock)
	for _, s := range subs {
		stats := make(map[string]*queuestat.Stat, len(s.wants))
		due := make(map[string]int64, len(s.wants))
		failed := false
		for _, wt := range s.wants {
			st := byQueue[wt.queue]
			if st.Err != nil {
				failed = true
				break
			}
			stats[wt.queue] = st
			n, next := dueAt(wt.queue, wt.lead)
			due[wt.queue] = n
			if s.m.IncludeScheduled && s.last != 1 && !next.IsZero() {
				if at := next.Add(-wt.lead); at.Before(until) {
					until = at
				}
			}
		}
		if failed {
			continue // keep the last answer; the queue's keys are broken, not its load
		}
		active := s.m.Active(s.m.Value(s.metric, stats, due))
		v := int8(0)
		if active {
			v = 1
		}
		if !active && s.last == 1 {
			// Just went idle: this pass read no cursors for it, so pass again at once
			// to block on its streams.
			until = now
		}
		if v != s.last {
			s.last = v
			select {
			case <-s.updates:
			default:
			}
			s.updates <- active
		}
		if active && now.Add(w.poll).Before(until) {
			until = now.Add(w.poll)
		}
	}

	var wk wake
	wk.until = until
	for i, q := range order {
		qw := per[q]
		if stats[i].Err != nil {
			continue
		}
		for p := keys.MaxPriority; p >= 0; p-- {
			if qw.cursors.Has(p) {
				wk.streams = append(wk.streams, w.ks.Queue(q).Stream(p))
				wk.ids = append(wk.ids, stats[i].Band[p].LastID)
			}
		}
	}
	return wk, nil
}
