package scaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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
//
// The shared read is bounded, since any gRPC caller may name queues: it holds at most
// maxQueues queues, each with at most maxLeads leads, and a queue joins it only once one
// of its keys exists. A queue none of whose keys exist reads as zero in full, so it is
// answered from one EXISTS (per call, never cached: its first task is seen at once); a
// queue that exists but finds the set full, or a lead beyond maxLeads, is read for its
// caller alone. Neither widens the shared read, so made-up names cost their caller
// only, and the triggers already watched keep their latency and their answers.
type signal struct {
	c       queuestat.Getter
	ks      keys.Space
	now     func() time.Time
	timeout time.Duration
	// forget drops a queue nobody asked about for this long from the reads.
	forget time.Duration
	// maxQueues bounds the queues of the shared read; maxLeads the leads of each.
	maxQueues int
	maxLeads  int
	// observe, when set, sees every read's duration and error (for metrics).
	observe func(d time.Duration, err error)
	// outside, when set, counts queues answered outside the shared read: reason
	// "absent" (no key exists) or "limit" (the set or the queue's leads are full).
	outside func(reason string, n int)
	// solo bounds the round trips made for one caller alone (EXISTS and own reads), so a
	// flood of them queues up rather than crowding Redis.
	solo chan struct{}

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
		maxQueues: DefaultMaxQueues, maxLeads: 8, solo: make(chan struct{}, 4),
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
// call began). Wants the shared read does not cover are answered for this call alone.
func (s *signal) get(ctx context.Context, wants []want, maxAge time.Duration) (view, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return view{}, errClosed
	}
	var shared, fresh, own []want
	now := s.now()
	for _, w := range wants {
		switch e := s.entries[w.queue]; {
		case e == nil:
			fresh = append(fresh, w)
		case reserve(e, w, now, s.maxLeads):
			shared = append(shared, w)
		default:
			own = append(own, w)
		}
	}
	s.mu.Unlock()
	if len(fresh) == 0 && len(own) == 0 {
		return s.getShared(ctx, shared, maxAge)
	}

	v := view{stats: make(map[string]*queuestat.Stat, len(wants)), due: make(map[string]int64, len(wants))}
	if len(fresh) > 0 {
		present, absent, err := s.probe(ctx, fresh)
		if err != nil {
			return view{}, err
		}
		for _, w := range absent {
			v.stats[w.queue] = &queuestat.Stat{Queue: w.queue, Bands: w.bands & queuestat.AllBands}
			v.due[w.queue] = 0
		}
		s.count("absent", len(absent))
		s.mu.Lock()
		for _, w := range present {
			if s.admitLocked(w) {
				shared = append(shared, w)
			} else {
				own = append(own, w)
			}
		}
		s.mu.Unlock()
	}
	s.count("limit", len(own))
	if len(own) > 0 {
		ov, err := s.readOwn(ctx, own)
		if err != nil {
			return view{}, err
		}
		v.merge(ov)
	}
	if len(shared) > 0 {
		sv, err := s.getShared(ctx, shared, maxAge)
		if err != nil {
			return view{}, err
		}
		v.merge(sv)
	}
	return v, nil
}

// reserve marks e used by w at now and takes w's lead into it, unless that lead is new
// and e has maxLeads already. Under the lock, so a read starting meanwhile neither
// forgets e nor drops the lead, and concurrent callers cannot overfill it.
func reserve(e *entry, w want, now time.Time, maxLeads int) bool {
	if w.lead > 0 {
		if _, ok := e.leads[w.lead]; !ok && len(e.leads) >= maxLeads {
			return false
		}
		e.leads[w.lead] = now
	}
	e.used = now
	e.bands |= w.bands
	return true
}

func (s *signal) count(reason string, n int) {
	if n > 0 && s.outside != nil {
		s.outside(reason, n)
	}
}

// merge adds o's queues to v; at becomes the older of the two.
func (v *view) merge(o view) {
	for q, st := range o.stats {
		v.stats[q] = st
		v.due[q] = o.due[q]
	}
	if !o.at.IsZero() && (v.at.IsZero() || o.at.Before(v.at)) {
		v.at = o.at
	}
}

// admitLocked adds w's queue to the shared read if it is there already (another caller
// admitted it meanwhile) or there is room, after dropping the queues nobody asked about
// for the forget time when there is not. The lead counts toward the queue's maxLeads
// when it joins.
func (s *signal) admitLocked(w want) bool {
	now := s.now()
	if e := s.entries[w.queue]; e != nil {
		return reserve(e, w, now, s.maxLeads)
	}
	if len(s.entries) >= s.maxQueues {
		for q, e := range s.entries {
			if now.Sub(e.used) > s.forget {
				delete(s.entries, q)
			}
		}
	}
	if len(s.entries) >= s.maxQueues {
		return false
	}
	e := &entry{leads: map[time.Duration]time.Time{}}
	s.entries[w.queue] = e
	return reserve(e, w, now, s.maxLeads)
}

// acquire takes a slot of the round trips made for one caller, within ctx.
func (s *signal) acquire(ctx context.Context) (func(), error) {
	select {
	case s.solo <- struct{}{}:
		return func() { <-s.solo }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ctx.Done():
		return nil, errClosed
	}
}

// probe tells the wants whose queue has a key the signal reads (present) from those
// whose queue has none and so reads as zero in full (absent): one EXISTS per queue, in
// one pipelined round trip (on Cluster one per node; a queue's keys share a slot).
func (s *signal) probe(ctx context.Context, wants []want) (present, absent []want, err error) {
	release, err := s.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	rctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	pipe := s.c.Pipeline()
	cmds := make([]*redis.IntCmd, len(wants))
	for i, w := range wants {
		if err := keys.ValidQueue(w.queue); err != nil {
			return nil, nil, fmt.Errorf("scaler: %w", err)
		}
		q := s.ks.Queue(w.queue)
		ks := make([]string, 0, keys.Bands+4)
		ks = append(ks, q.Streams[:]...)
		// the cron zset too: a queue whose only key is a periodic entry must wake a worker
		ks = append(ks, q.Schedule(), q.Claimed(), q.Dead(), q.Cron())
		cmds[i] = pipe.Exists(rctx, ks...)
	}
	if _, err := pipe.Exec(rctx); err != nil {
		return nil, nil, fmt.Errorf("scaler: look up %d queues: %w", len(wants), err)
	}
	for i, w := range wants {
		if cmds[i].Val() > 0 {
			present = append(present, w)
		} else {
			absent = append(absent, w)
		}
	}
	return present, absent, nil
}

// readOwn reads wants for this caller alone: not cached, not added to the shared read.
func (s *signal) readOwn(ctx context.Context, wants []want) (view, error) {
	release, err := s.acquire(ctx)
	if err != nil {
		return view{}, err
	}
	defer release()
	rctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	specs := make([]queuestat.Spec, len(wants))
	for i, w := range wants {
		specs[i] = queuestat.Spec{Queue: w.queue, Bands: w.bands}
		if w.lead > 0 {
			specs[i].Leads = []time.Duration{w.lead}
		}
	}
	now := s.now()
	stats, err := queuestat.Read(rctx, s.c, s.ks, specs, now)
	if err != nil {
		return view{}, err
	}
	v := view{stats: make(map[string]*queuestat.Stat, len(wants)), due: make(map[string]int64, len(wants)), at: now}
	for i, w := range wants {
		st := &stats[i]
		if st.Err != nil {
			return view{}, st.Err
		}
		v.stats[w.queue] = st
		v.due[w.queue] = st.DueNow
		if w.lead > 0 && len(st.DueWithin) > 0 {
			v.due[w.queue] = st.DueWithin[0]
		}
	}
	return v, nil
}

// getShared answers wants, whose queues are all in the shared read, from it.
func (s *signal) getShared(ctx context.Context, wants []want, maxAge time.Duration) (view, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return view{}, errClosed
	}
	now := s.now()
	for _, w := range wants {
		e := s.entries[w.queue]
		if e == nil {
			// Reserved under the lock just before, so no read forgot it since (short
			// of a clock that jumped the forget time ahead meanwhile).
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

// watchedCount is the number of queues in the shared read.
func (s *signal) watchedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
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
