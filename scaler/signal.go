package scaler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/queuestat"
)

// errClosed: the signal is stopping and starts no more reads.
var errClosed = errors.New("scaler is shutting down")

// want is one caller's interest in a queue.
type want struct {
	queue string
	bands queuestat.Bands
	lead  time.Duration
}

// signal answers many concurrent callers (every ScaledObject's GetMetrics and IsActive)
// from as few Redis round trips as it can: a caller whose queues were read less than
// maxAge ago gets the cached read; the others wait for the next read, which covers every
// queue any caller asked for recently (one pipelined round trip), and at most one read
// runs at a time. A read is bounded by the read timeout whether or not the callers have
// a deadline (KEDA's calls have none).
type signal struct {
	c       queuestat.Getter
	ks      keys.Space
	now     func() time.Time
	timeout time.Duration
	// forget drops a queue nobody asked about for this long from the reads.
	forget time.Duration
	// observe, when set, sees every read's duration and error (for metrics).
	observe func(d time.Duration, err error)

	ctx    context.Context // cancelled by stop: ends a read in flight
	cancel context.CancelFunc

	mu      sync.Mutex
	entries map[string]*entry
	next    *batch // collects callers until the running read ends
	running *batch
	closed  bool
	wg      sync.WaitGroup
}

type entry struct {
	bands    queuestat.Bands             // bands asked for recently
	leads    map[time.Duration]time.Time // leads asked for, by last use
	used     time.Time
	stat     *queuestat.Stat
	statAt   time.Time       // when the cached stat was read
	statLead []time.Duration // the leads of stat.DueWithin
}

type batch struct {
	done chan struct{}
	err  error
}

func newSignal(c queuestat.Getter, ks keys.Space, now func() time.Time, timeout time.Duration) *signal {
	ctx, cancel := context.WithCancel(context.Background())
	return &signal{c: c, ks: ks, now: now, timeout: timeout, forget: 10 * time.Minute,
		ctx: ctx, cancel: cancel, entries: map[string]*entry{}}
}

// view is what a caller gets: the stat of each queue it asked for and the due count at
// its lead.
type view struct {
	stats map[string]*queuestat.Stat
	due   map[string]int64
	at    time.Time // the oldest read among them
}

// get returns the signal of wants, read no longer than maxAge ago (0: read after this
// call began).
func (s *signal) get(ctx context.Context, wants []want, maxAge time.Duration) (view, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return view{}, errClosed
	}
	now := s.now()
	for _, w := range wants {
		e := s.entries[w.queue]
		if e == nil {
			e = &entry{leads: map[time.Duration]time.Time{}}
			s.entries[w.queue] = e
		}
		e.used = now
		e.bands |= w.bands
		if w.lead > 0 {
			e.leads[w.lead] = now
		}
	}
	if v, ok, err := s.cached(wants, now, maxAge); ok {
		s.mu.Unlock()
		return v, err
	}
	b := s.next
	if b == nil {
		b = &batch{done: make(chan struct{})}
		s.next = b
	}
	if s.running == nil {
		s.startLocked()
	}
	s.mu.Unlock()

	select {
	case <-b.done:
	case <-ctx.Done():
		return view{}, ctx.Err()
	}
	if b.err != nil {
		return view{}, b.err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The read began after this call did, so whatever it cached is fresh enough.
	v, ok, err := s.cached(wants, now, s.now().Sub(now)+maxAge)
	if !ok {
		// A read never drops a band or lead asked for since it began: this cannot happen.
		return view{}, errors.New("scaler: read did not cover the request")
	}
	return v, err
}

// cached answers wants from the entries if all were read at or after now−maxAge and
// cover the wanted bands and leads; err is a queue's own read error.
func (s *signal) cached(wants []want, now time.Time, maxAge time.Duration) (view, bool, error) {
	v := view{stats: make(map[string]*queuestat.Stat, len(wants)), due: make(map[string]int64, len(wants))}
	var err error
	for _, w := range wants {
		e := s.entries[w.queue]
		if e == nil || e.stat == nil || now.Sub(e.statAt) > maxAge || e.stat.Bands&w.bands != w.bands {
			return view{}, false, nil
		}
		if e.stat.Err != nil && err == nil {
			err = e.stat.Err
		}
		due := e.stat.DueNow
		if w.lead > 0 {
			i := slices.Index(e.statLead, w.lead)
			if i < 0 {
				return view{}, false, nil
			}
			if i < len(e.stat.DueWithin) {
				due = e.stat.DueWithin[i]
			}
		}
		v.stats[w.queue] = e.stat
		v.due[w.queue] = due
		if v.at.IsZero() || e.statAt.Before(v.at) {
			v.at = e.statAt
		}
	}
	if err != nil {
		return view{}, true, err
	}
	return v, true, nil
}

// startLocked starts the collected batch as the running read.
func (s *signal) startLocked() {
	b := s.next
	s.next = nil
	s.running = b
	now := s.now()
	var specs []queuestat.Spec
	for q, e := range s.entries {
		if now.Sub(e.used) > s.forget {
			delete(s.entries, q)
			continue
		}
		sp := queuestat.Spec{Queue: q, Bands: e.bands}
		for l, used := range e.leads {
			if now.Sub(used) > s.forget {
				delete(e.leads, l)
				continue
			}
			sp.Leads = append(sp.Leads, l)
		}
		slices.Sort(sp.Leads)
		specs = append(specs, sp)
	}
	s.wg.Add(1)
	go s.read(b, specs, now)
}

func (s *signal) read(b *batch, specs []queuestat.Spec, now time.Time) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	stats, err := queuestat.Read(ctx, s.c, s.ks, specs, now)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.observe != nil {
		s.observe(s.now().Sub(now), err)
	}
	if err == nil {
		for i := range stats {
			e := s.entries[stats[i].Queue]
			if e == nil {
				continue
			}
			e.stat, e.statAt, e.statLead = &stats[i], now, specs[i].Leads
		}
	}
	b.err = err
	close(b.done)
	s.running = nil
	if s.next != nil && !s.closed {
		s.startLocked()
	}
}

// stop fails the callers still waiting, ends a read in flight and waits for it.
func (s *signal) stop() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.cancel()
		if b := s.next; b != nil {
			s.next = nil
			b.err = errClosed
			close(b.done)
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// watched lists the queues callers asked about recently.
func (s *signal) watched() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.entries))
	for q := range s.entries {
		out = append(out, q)
	}
	return out
}
