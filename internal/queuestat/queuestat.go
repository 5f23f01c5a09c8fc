// Package queuestat reads the scaling signal of dtq queues: for every watched queue and
// priority band the lag (entries not yet delivered to group dtq) and the pending depth
// (delivered, not acknowledged), and for every queue the scheduled tasks due now and due
// within a lead time, and the dead count. All of it in one pipelined round trip, however
// many queues and bands are read (on Redis Cluster: one round trip per node, in parallel).
//
// Lag comes from XINFO GROUPS. Redis reports it as null once entries were deleted out of
// order (dtq's cancel deletes undelivered entries) and does not report it at all before
// Redis 7; then lag is XLEN − pending, which holds because dtq acknowledges and deletes
// every finished entry together, so a stream holds exactly its undelivered and pending
// entries.
//
// A queue or band whose keys do not exist yet reads as zero, not as an error. Every count
// is an int64.
package queuestat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

// Bands is a set of priority bands: bit p stands for band p.
type Bands uint16

// AllBands holds every band 0..9.
const AllBands Bands = 1<<keys.Bands - 1

// Band returns the set holding band p alone.
func Band(p int) Bands { return 1 << uint(p) }

// Has reports whether p is in the set.
func (b Bands) Has(p int) bool { return p >= 0 && p < keys.Bands && b&(1<<uint(p)) != 0 }

// Len is the number of bands in the set.
func (b Bands) Len() int { return bits.OnesCount16(uint16(b & AllBands)) }

// Spec says what to read of one queue.
type Spec struct {
	Queue string
	Bands Bands // bands to read; bands outside the set read as zero
	// Leads are the look-ahead windows: Stat.DueWithin[i] counts tasks due by now+Leads[i].
	Leads []time.Duration
	// Cursors also reads the id of the last entry of every band read (for a blocking
	// XREAD that wakes on the next one).
	Cursors bool
	// NextDue also reads, for every lead, the due time of the first scheduled task beyond
	// now+lead (for a timer that wakes when it enters the window).
	NextDue bool
}

// BandStat is the signal of one priority stream.
type BandStat struct {
	Lag     int64 // entries not yet delivered to the group
	Pending int64 // entries delivered and not acknowledged (the PEL)
	// LagFromLen: Redis gave no lag (null after deletions, or a server before 7.0), so
	// Lag is XLEN − Pending.
	LagFromLen bool
	// LastID is the id of the stream's last entry ("0-0" when it has none); read only
	// with Spec.Cursors.
	LastID string
}

// Stat is the signal of one queue.
type Stat struct {
	Queue string
	Bands Bands
	Band  [keys.Bands]BandStat
	// DueNow counts scheduled tasks and retries due at the read time, plus the ones a
	// scheduler claimed and has not enqueued yet (a scheduler that died mid-pass leaves
	// them), plus the periodic entries whose next tick is due (the queue's cron zset):
	// with no worker running, nobody moves them, so they must wake one.
	DueNow int64
	// DueWithin[i] counts what DueNow counts, due by now+Spec.Leads[i] (so >= DueNow).
	DueWithin []int64
	// NextDue[i] is the due time of the first scheduled task or periodic tick after
	// now+Spec.Leads[i] (zero time when there is none); read only with Spec.NextDue.
	NextDue []time.Time
	Dead    int64 // tasks that used up their retries
	// Limit is the queue's own rate and concurrency limit (PREFIX:{Q}:limits, field
	// ""); zero when it has none (or its limits key is unreadable: the claim refuses
	// the queue then, and the scaler caps nothing).
	Limit Limit
	// Err is set when Redis refused to read this queue (a key of the wrong type): the
	// other queues of the same read are still good.
	Err error
}

// Limit is a queue's own limit as the scaler reads it.
type Limit struct {
	Concurrency   int64   // tasks running at once; 0 none
	RatePerSecond float64 // task starts a second; 0 none
}

// Runnable is how many of the queue's tasks its limit lets run at once: its
// concurrency, or its rate a second rounded up (a rate of R a second keeps about R
// tasks of a second busy), the smaller of the two; ok is false without a limit.
func (l Limit) Runnable() (int64, bool) {
	n, ok := int64(math.MaxInt64), false
	if l.Concurrency > 0 {
		n, ok = l.Concurrency, true
	}
	if l.RatePerSecond > 0 {
		n, ok = min(n, int64(math.Ceil(min(l.RatePerSecond, 1e12)))), true
	}
	return n, ok
}

// parseLimit reads a definition "rate=R;per=MS;burst=B;conc=C" (client.SetLimit);
// parts it does not know or cannot read are left out.
func parseLimit(def string) Limit {
	var l Limit
	var rate, per float64
	for part := range strings.SplitSeq(def, ";") {
		k, v, _ := strings.Cut(part, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			continue
		}
		switch k {
		case "rate":
			rate = float64(n)
		case "per":
			per = float64(n)
		case "conc":
			l.Concurrency = n
		}
	}
	if rate > 0 && per > 0 {
		l.RatePerSecond = rate * 1000 / per
	}
	return l
}

// Backlog is the sum over bands of lag, plus pending when withPending.
func (s *Stat) Backlog(bands Bands, withPending bool) int64 {
	var n int64
	for p := 0; p < keys.Bands; p++ {
		if !bands.Has(p) || !s.Bands.Has(p) {
			continue
		}
		n = Add(n, s.Band[p].Lag)
		if withPending {
			n = Add(n, s.Band[p].Pending)
		}
	}
	return n
}

// Add returns a+b for counts, saturating at math.MaxInt64 instead of wrapping.
func Add(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Getter is what Read needs of a client: a one-node client, a Sentinel-backed client,
// a cluster client, or a pipeline of any of them.
type Getter interface {
	Pipeline() redis.Pipeliner
}

type bandCmds struct {
	groups *redis.Cmd // XINFO GROUPS, parsed by hand to tell a null lag from a missing one
	xlen   *redis.IntCmd
	last   *redis.XMessageSliceCmd
}

type queueCmds struct {
	bands   [keys.Bands]*bandCmds
	due     *redis.IntCmd
	claimed *redis.IntCmd
	within  []*redis.IntCmd
	next    []*redis.ZSliceCmd
	dead    *redis.IntCmd
	limit   *redis.StringCmd
	// the queue's periodic entries (cron zset), read like the schedule
	cronDue    *redis.IntCmd
	cronWithin []*redis.IntCmd
	cronNext   []*redis.ZSliceCmd
}

// Read reads every spec in one pipelined round trip, judging due times at now. The
// stats come back in the order of specs. ctx bounds the round trip. A failure to reach
// Redis fails the whole read; an error reply about one queue's keys sets that queue's
// Stat.Err only.
func Read(ctx context.Context, c Getter, ks keys.Space, specs []Spec, now time.Time) ([]Stat, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	nowMS := now.UnixMilli()
	pipe := c.Pipeline()
	cmds := make([]queueCmds, len(specs))
	for i, sp := range specs {
		if err := keys.ValidQueue(sp.Queue); err != nil {
			return nil, fmt.Errorf("queuestat: %w", err)
		}
		q := ks.Queue(sp.Queue)
		qc := &cmds[i]
		for p := 0; p < keys.Bands; p++ {
			if !sp.Bands.Has(p) {
				continue
			}
			bc := &bandCmds{}
			// The cursor is read before the counts: an entry added in between is then
			// both counted and seen by a read from the cursor, never neither.
			if sp.Cursors {
				bc.last = pipe.XRevRangeN(ctx, q.Stream(p), "+", "-", 1)
			}
			bc.groups = pipe.Do(ctx, "XINFO", "GROUPS", q.Stream(p))
			bc.xlen = pipe.XLen(ctx, q.Stream(p))
			qc.bands[p] = bc
		}
		qc.due = pipe.ZCount(ctx, q.Schedule(), "-inf", strconv.FormatInt(nowMS, 10))
		qc.cronDue = pipe.ZCount(ctx, q.Cron(), "-inf", strconv.FormatInt(nowMS, 10))
		qc.claimed = pipe.ZCard(ctx, q.Claimed())
		for _, lead := range sp.Leads {
			at := addMS(nowMS, lead)
			qc.within = append(qc.within, pipe.ZCount(ctx, q.Schedule(), "-inf", strconv.FormatInt(at, 10)))
			qc.cronWithin = append(qc.cronWithin, pipe.ZCount(ctx, q.Cron(), "-inf", strconv.FormatInt(at, 10)))
			if sp.NextDue {
				qc.next = append(qc.next, pipe.ZRangeByScoreWithScores(ctx, q.Schedule(), &redis.ZRangeBy{
					Min: "(" + strconv.FormatInt(at, 10), Max: "+inf", Count: 1,
				}))
				qc.cronNext = append(qc.cronNext, pipe.ZRangeByScoreWithScores(ctx, q.Cron(), &redis.ZRangeBy{
					Min: "(" + strconv.FormatInt(at, 10), Max: "+inf", Count: 1,
				}))
			}
		}
		if sp.NextDue && len(sp.Leads) == 0 {
			qc.next = append(qc.next, pipe.ZRangeByScoreWithScores(ctx, q.Schedule(), &redis.ZRangeBy{
				Min: "(" + strconv.FormatInt(nowMS, 10), Max: "+inf", Count: 1,
			}))
			qc.cronNext = append(qc.cronNext, pipe.ZRangeByScoreWithScores(ctx, q.Cron(), &redis.ZRangeBy{
				Min: "(" + strconv.FormatInt(nowMS, 10), Max: "+inf", Count: 1,
			}))
		}
		qc.dead = pipe.ZCard(ctx, q.Dead())
		qc.limit = pipe.HGet(ctx, q.Limits(), "")
	}
	// Exec reports the first failed command; a missing stream fails XINFO GROUPS and is
	// no failure here, so every command is judged below instead.
	// (HGET of a queue without a limit replies nil.)
	if _, err := pipe.Exec(ctx); err != nil && !isServerError(err) && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("queuestat: read %d queues: %w", len(specs), err)
	}
	out := make([]Stat, len(specs))
	for i, sp := range specs {
		st, err := decode(sp, &cmds[i])
		if err != nil {
			err = fmt.Errorf("queuestat: queue %s: %w", sp.Queue, err)
			if !isServerError(err) {
				return nil, err
			}
			st = Stat{Queue: sp.Queue, Bands: sp.Bands & AllBands, Err: err}
		}
		out[i] = st
	}
	return out, nil
}

func decode(sp Spec, qc *queueCmds) (Stat, error) {
	st := Stat{Queue: sp.Queue, Bands: sp.Bands & AllBands}
	for p := 0; p < keys.Bands; p++ {
		bc := qc.bands[p]
		if bc == nil {
			continue
		}
		b, err := decodeBand(bc)
		if err != nil {
			return st, fmt.Errorf("band %d: %w", p, err)
		}
		st.Band[p] = b
	}
	due, err := qc.due.Result()
	if err != nil {
		return st, fmt.Errorf("schedule: %w", err)
	}
	claimed, err := qc.claimed.Result()
	if err != nil {
		return st, fmt.Errorf("scheduler claims: %w", err)
	}
	cronDue, err := qc.cronDue.Result()
	if err != nil {
		return st, fmt.Errorf("cron entries: %w", err)
	}
	st.DueNow = Add(Add(due, claimed), cronDue)
	for i, c := range qc.within {
		n, err := c.Result()
		if err != nil {
			return st, fmt.Errorf("schedule: %w", err)
		}
		cn, err := qc.cronWithin[i].Result()
		if err != nil {
			return st, fmt.Errorf("cron entries: %w", err)
		}
		st.DueWithin = append(st.DueWithin, Add(Add(n, claimed), cn))
	}
	for i, c := range qc.next {
		t, err := first(c)
		if err != nil {
			return st, fmt.Errorf("schedule: %w", err)
		}
		ct, err := first(qc.cronNext[i])
		if err != nil {
			return st, fmt.Errorf("cron entries: %w", err)
		}
		if t.IsZero() || (!ct.IsZero() && ct.Before(t)) {
			t = ct
		}
		st.NextDue = append(st.NextDue, t)
	}
	if st.Dead, err = qc.dead.Result(); err != nil {
		return st, fmt.Errorf("dead set: %w", err)
	}
	if def, err := qc.limit.Result(); err == nil {
		st.Limit = parseLimit(def)
	}
	return st, nil
}

// first is the score, as a time, of the one member a ZRANGEBYSCORE … LIMIT 0 1 read
// (zero time when there is none).
func first(c *redis.ZSliceCmd) (time.Time, error) {
	z, err := c.Result()
	if err != nil {
		return time.Time{}, err
	}
	if len(z) > 0 && !math.IsNaN(z[0].Score) && !math.IsInf(z[0].Score, 0) {
		return time.UnixMilli(int64(z[0].Score)), nil
	}
	return time.Time{}, nil
}

func decodeBand(bc *bandCmds) (BandStat, error) {
	var b BandStat
	n, err := bc.xlen.Result()
	if err != nil {
		return b, fmt.Errorf("XLEN: %w", err)
	}
	if bc.last != nil {
		msgs, err := bc.last.Result()
		if err != nil {
			return b, fmt.Errorf("XREVRANGE: %w", err)
		}
		b.LastID = "0-0"
		if len(msgs) > 0 {
			b.LastID = msgs[0].ID
		}
	}
	v, err := bc.groups.Result()
	if err != nil {
		if !isServerError(err) {
			return b, fmt.Errorf("XINFO GROUPS: %w", err)
		}
		// No such key (or a key that stopped being a stream, which XLEN reports): no
		// group has read anything, so everything there is lag.
		b.Lag, b.LagFromLen = n, true
		return b, nil
	}
	g, found, err := parseGroup(v, keys.Group)
	if err != nil {
		return b, fmt.Errorf("XINFO GROUPS: %w", err)
	}
	if !found {
		b.Lag, b.LagFromLen = n, true
		return b, nil
	}
	b.Pending = max(g.pending, 0)
	if g.lagKnown {
		b.Lag = max(g.lag, 0)
	} else {
		b.Lag, b.LagFromLen = max(n-b.Pending, 0), true
	}
	return b, nil
}

type groupInfo struct {
	pending  int64
	lag      int64
	lagKnown bool
}

// parseGroup finds group name in an XINFO GROUPS reply, RESP2 (flat arrays) or RESP3
// (maps). lagKnown is false when lag is null or absent.
func parseGroup(v any, name string) (groupInfo, bool, error) {
	list, ok := v.([]any)
	if !ok {
		return groupInfo{}, false, fmt.Errorf("unexpected reply %T", v)
	}
	for _, item := range list {
		fields := map[string]any{}
		switch it := item.(type) {
		case map[any]any:
			for k, val := range it {
				if ks, ok := k.(string); ok {
					fields[ks] = val
				}
			}
		case map[string]any:
			fields = it
		case []any:
			for j := 0; j+1 < len(it); j += 2 {
				if ks, ok := it[j].(string); ok {
					fields[ks] = it[j+1]
				}
			}
		default:
			return groupInfo{}, false, fmt.Errorf("unexpected group entry %T", item)
		}
		if s, _ := fields["name"].(string); s != name {
			continue
		}
		var g groupInfo
		var err error
		if g.pending, _, err = toInt(fields["pending"]); err != nil {
			return g, false, fmt.Errorf("pending: %w", err)
		}
		if g.lag, g.lagKnown, err = toInt(fields["lag"]); err != nil {
			return g, false, fmt.Errorf("lag: %w", err)
		}
		return g, true, nil
	}
	return groupInfo{}, false, nil
}

// toInt reads an integer reply; ok is false for a null or absent one.
func toInt(v any) (n int64, ok bool, err error) {
	switch x := v.(type) {
	case nil:
		return 0, false, nil
	case int64:
		return x, true, nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil, err
	default:
		return 0, false, fmt.Errorf("unexpected %T", v)
	}
}

// isServerError reports whether err is an error reply of the Redis server (as opposed
// to a network failure or a timeout).
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// IsServerError reports whether err carries an error reply of the Redis server rather
// than a failure to reach it. Replies that say the server is not able to answer yet
// (LOADING after a restart, BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN) count as failures
// to reach it.
func IsServerError(err error) bool {
	if !isServerError(err) {
		return false
	}
	var re redis.Error
	errors.As(err, &re)
	code, _, _ := strings.Cut(re.Error(), " ")
	switch code {
	case "LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY":
		return false
	}
	return true
}

// addMS returns ms + d in milliseconds, saturating.
func addMS(ms int64, d time.Duration) int64 {
	return Add(ms, d.Milliseconds())
}
