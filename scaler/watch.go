package scaler

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/blockread"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/queuestat"
	"github.com/dtq/dtq/internal/service"
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
//   - for a new subscription, which interrupts the blocking read (blockread: CLIENT
//     UNBLOCK, or at most poll where the server refuses it).
//
// A client that goes away only leaves the set; a failed read is retried with backoff
// while the streams stay open, so a Redis restart is healed without KEDA noticing. On
// Redis Cluster one XREAD cannot span queues (slots), so the watcher polls every poll.
//
// The watcher is a service: Start runs the loop, Stop ends it (and its read) and waits.
type watcher struct {
	service.Base

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

	// repeat: an active subscription's true is sent again repeat, 3×repeat and
	// 7×repeat after it turned active (gaps doubling; pushRepeats of them), while it stays
	// active; 0 sends each change once. repeated, when set, counts those sends.
	repeat   time.Duration
	repeated func()

	// pushed, when set, is told the time from the stream entry that woke the loop to the
	// push of the subscription it made active (the dtq_scaler_push_seconds histogram).
	pushed func(time.Duration)
	// wokenAt is the time of the entry that ended the last blocking read, zero when the
	// read ended otherwise; only the loop touches it.
	wokenAt time.Time

	// maxQueues bounds the distinct queues of all subscriptions: every pass reads them
	// all and the blocking read names their streams.
	maxQueues int

	mu     sync.Mutex
	subs   map[*subscription]struct{}
	queues map[string]int // subscriptions per queue
	// endRead ends the blocking read under way, if any (set before the loop checks
	// for kicks, so a subscription either kicks the loop or ends its read).
	endRead context.CancelFunc

	kick chan struct{}
}

// subscription is one open StreamIsActive stream.
type subscription struct {
	m       Metadata
	metric  Metric
	wants   []want
	updates chan bool // the latest activity not yet sent; only the watcher loop writes
	last    int8      // -1 unknown, 0 idle, 1 active; only the watcher loop touches it
	// repeats of true sent since it turned active, and when the next is due; only the
	// watcher loop touches them
	repeats  int
	repeatAt time.Time
}

// send leaves active as the latest activity not yet sent to the stream.
func (s *subscription) send(active bool) {
	select {
	case <-s.updates:
	default:
	}
	s.updates <- active
}

// repeatOwed reports whether the active subscription is still owed a repeat of true
// (at s.repeatAt), repeating every interval (0: never).
func (s *subscription) repeatOwed(interval time.Duration) bool {
	return interval > 0 && s.repeats < pushRepeats
}

// pushRepeats is how many times true is sent again after a stream turns active.
//
// KEDA's push handler scales from zero only when the Deployment's replicas, read from
// its informer cache, are 0; otherwise it takes the push as "already running". A task
// enqueued just as KEDA scales the Deployment to zero can be pushed before that cache
// has caught up, and KEDA then waits for its next poll (pollingInterval, 30 s by
// default). Three repeats over 7×repeat cover a cache that lags by seconds, at a cost
// of three status writes in KEDA per activation.
const pushRepeats = 3

func newWatcher(c redis.UniversalClient, ks keys.Space, now func() time.Time, log *slog.Logger) *watcher {
	return &watcher{c: c, ks: ks, now: now, log: log,
		timeout: 2 * time.Second, poll: 500 * time.Millisecond, maxBlock: 5 * time.Second,
		minGap:    20 * time.Millisecond,
		maxQueues: DefaultMaxQueues,
		subs:      map[*subscription]struct{}{},
		queues:    map[string]int{},
		kick:      make(chan struct{}, 1),
	}
}

// Start runs the loop until ctx ends or Stop; it returns at once.
func (w *watcher) Start(ctx context.Context) error {
	w.Go(ctx, w.run)
	return nil
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
	w.mu.Lock()
	if w.endRead != nil {
		w.endRead()
	}
	w.mu.Unlock()
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

func (w *watcher) snapshot() []*subscription {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*subscription, 0, len(w.subs))
	for s := range w.subs {
		out = append(out, s)
	}
	return out
}

// wait blocks for d, a kick or the end of ctx; false once ctx ended.
func (w *watcher) wait(ctx context.Context, d time.Duration, kickable bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	kick := w.kick
	if !kickable {
		kick = nil
	}
	select {
	case <-t.C:
	case <-kick:
	case <-ctx.Done():
		return false
	}
	return true
}

func (w *watcher) run(ctx context.Context) {
	_, single := w.c.(*redis.Client)
	// Where the server refuses the CLIENT commands nothing can interrupt the read for
	// a new subscription, so it blocks no longer than poll.
	reader := blockread.New(w.c, blockread.Options{ShortBlock: w.poll, Timeout: w.timeout})
	defer reader.Close()
	var lastRead time.Time
	var byEntry, prevByEntry bool // this pass and the last one were woken by a new entry
	failures := 0
	for ctx.Err() == nil {
		subs := w.snapshot()
		if len(subs) == 0 {
			select {
			case <-w.kick:
			case <-ctx.Done():
				return
			}
			continue
		}
		// A first new entry is read at once; a run of them (a busy queue below the
		// activation threshold) is read at most every minGap.
		if gap := w.minGap - w.now().Sub(lastRead); byEntry && prevByEntry && gap > 0 {
			if !w.wait(ctx, gap, false) {
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
		w.wokenAt = time.Time{} // told to the pass just made, if it was one
		if h := w.afterPass.Load(); h != nil {
			(*h)(err)
		}
		if err != nil {
			failures++
			if failures == 1 {
				w.log.Warn("scaler: push read failed; retrying", "err", err, "streams", len(subs))
			}
			reader.Close() // the next read opens a new connection
			backoff := min(50*time.Millisecond<<min(failures-1, 6), 2*time.Second)
			backoff = backoff/2 + rand.N(backoff/2+1)
			if !w.wait(ctx, backoff, false) {
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
			if !w.wait(ctx, d, true) {
				return
			}
			continue
		}
		got, at, err := w.block(ctx, reader, next, d)
		byEntry, w.wokenAt = got, at
		if err != nil && ctx.Err() == nil {
			w.log.Warn("scaler: push blocking read failed; reconnecting", "err", err)
		}
	}
}

// block waits on one blocking XREAD of next's streams for at most d, until a new entry,
// a new subscription or the end of ctx; it reports whether an entry came, and when it
// was added (its id's time).
func (w *watcher) block(ctx context.Context, reader *blockread.Reader, next wake, d time.Duration) (bool, time.Time, error) {
	rctx, end := context.WithCancel(ctx)
	defer end()
	w.mu.Lock()
	w.endRead = end
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.endRead = nil
		w.mu.Unlock()
	}()
	select {
	case <-w.kick: // a subscription came since the pass: pass again
		return false, time.Time{}, nil
	default:
	}
	if h := w.beforeBlock.Load(); h != nil {
		(*h)()
	}
	args := make([]string, 0, 2*len(next.streams))
	args = append(args, next.streams...)
	args = append(args, next.ids...)
	xs, err := reader.XRead(rctx, &redis.XReadArgs{Streams: args, Count: 1, Block: d})
	if err != nil && rctx.Err() != nil {
		return false, time.Time{}, nil // ended for a subscription or Stop before it got an answer
	}
	if err != nil || len(xs) == 0 || len(xs[0].Messages) == 0 {
		return false, time.Time{}, err
	}
	var at time.Time
	if id, ok := keys.ParseEntryID(xs[0].Messages[0].ID); ok {
		at = id.Time()
	}
	return true, at, nil
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
		switch {
		case v != s.last:
			if active && !w.wokenAt.IsZero() && w.pushed != nil {
				w.pushed(w.now().Sub(w.wokenAt))
			}
			s.last = v
			s.repeats, s.repeatAt = 0, now.Add(w.repeat)
			s.send(active)
		case active && s.repeatOwed(w.repeat) && !now.Before(s.repeatAt):
			s.repeats++
			s.repeatAt = now.Add(w.repeat << s.repeats)
			s.send(true)
			if w.repeated != nil {
				w.repeated()
			}
		}
		if active && s.repeatOwed(w.repeat) && s.repeatAt.Before(until) {
			until = s.repeatAt
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
