package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

// Rate and concurrency limits. A limit applies to a whole queue (Function "") or to
// the tasks of one function of a queue, across every worker of the fleet: at most Rate
// task starts per Per (GCRA, up to Burst at once) and at most Concurrency tasks running
// at once. A task over a limit is not started (its task stays queued) until the limit
// lets it: it is never started and then held back. Limits are stored in the queue's
// PREFIX:{Q}:limits hash and enforced by the claim (lua/claim.lua); see the README,
// "Rate and concurrency limits".

// Limit is one limit definition. Rate 0 sets no rate limit and Concurrency 0 no
// concurrency limit; at least one of them is set.
type Limit struct {
	Function    string        `json:"function,omitempty"` // "" the whole queue
	Rate        int           `json:"rate,omitempty"`     // task starts per Per
	Per         time.Duration `json:"per,omitempty"`
	Burst       int           `json:"burst,omitempty"`       // starts allowed at once (0 reads as 1)
	Concurrency int           `json:"concurrency,omitempty"` // tasks running at once
}

// LimitInfo is a limit as listed, with its current use.
type LimitInfo struct {
	Limit
	// Running: tasks holding one of its concurrency slots now
	Running int64 `json:"running"`
	// NextTokenMS: when its rate limit lets the next task start (unix ms); 0 or a past
	// time: now
	NextTokenMS int64 `json:"next_token_ms,omitempty"`
	// Error is set for a definition that does not decode (written by hand).
	Error string `json:"error,omitempty"`
}

// Bounds of a limit.
const (
	MaxLimitRatePerSecond = 100000 // starts a second
	MaxLimitPer           = 24 * time.Hour
	MaxLimitBurst         = 100000
	MaxLimitConcurrency   = 1000000
)

// ErrLimitNotFound is the error of removing a limit that does not exist.
var ErrLimitNotFound = errors.New("no such limit")

// ParseRate reads a rate "N/UNIT": UNIT is s, m or h (one second, minute or hour) or a
// duration with its unit ("10/1m", "5/30s", "100/500ms"). N is 1 or more; the rate is at
// most MaxLimitRatePerSecond a second and its period at most MaxLimitPer.
func ParseRate(s string) (int, time.Duration, error) {
	num, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("%w: rate %q: want N/UNIT, e.g. 100/s, 5000/h, 10/1m", ErrInvalid, s)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf("%w: rate %q: %q is not a count of 1 or more", ErrInvalid, s, num)
	}
	var per time.Duration
	switch unit {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	default:
		per, err = time.ParseDuration(unit)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: rate %q: unknown unit %q (s, m, h or a duration such as 30s)", ErrInvalid, s, unit)
		}
	}
	l := Limit{Rate: n, Per: per}
	if err := l.checkRate(); err != nil {
		return 0, 0, err
	}
	return n, per, nil
}

func (l Limit) checkRate() error {
	if l.Per < time.Millisecond || l.Per > MaxLimitPer || l.Per%time.Millisecond != 0 {
		return fmt.Errorf("%w: limit period %v must be whole milliseconds, 1ms..%v", ErrInvalid, l.Per, MaxLimitPer)
	}
	if float64(l.Rate)/l.Per.Seconds() > MaxLimitRatePerSecond {
		return fmt.Errorf("%w: rate %d per %v is over %d a second", ErrInvalid, l.Rate, l.Per, MaxLimitRatePerSecond)
	}
	return nil
}

// Validate reports whether l is a limit SetLimit accepts.
func (l Limit) Validate() error {
	if l.Function != "" {
		if err := keys.ValidLimitFunction(l.Function); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if l.Rate < 0 || l.Concurrency < 0 || l.Burst < 0 {
		return fmt.Errorf("%w: limit rate %d, burst %d, concurrency %d: none may be negative", ErrInvalid, l.Rate, l.Burst, l.Concurrency)
	}
	if l.Rate == 0 && l.Concurrency == 0 {
		return fmt.Errorf("%w: a limit needs a rate or a concurrency of 1 or more", ErrInvalid)
	}
	if l.Rate == 0 && (l.Per != 0 || l.Burst != 0) {
		return fmt.Errorf("%w: a period or burst without a rate", ErrInvalid)
	}
	if l.Rate > 0 {
		if err := l.checkRate(); err != nil {
			return err
		}
	}
	if l.Burst > MaxLimitBurst {
		return fmt.Errorf("%w: burst %d is over %d", ErrInvalid, l.Burst, MaxLimitBurst)
	}
	if l.Concurrency > MaxLimitConcurrency {
		return fmt.Errorf("%w: concurrency %d is over %d", ErrInvalid, l.Concurrency, MaxLimitConcurrency)
	}
	return nil
}

// encode is the definition as the limits hash holds it.
func (l Limit) encode() string {
	var parts []string
	if l.Rate > 0 {
		parts = append(parts, "rate="+strconv.Itoa(l.Rate), "per="+strconv.FormatInt(l.Per.Milliseconds(), 10),
			"burst="+strconv.Itoa(max(1, l.Burst)))
	}
	if l.Concurrency > 0 {
		parts = append(parts, "conc="+strconv.Itoa(l.Concurrency))
	}
	return strings.Join(parts, ";")
}

// decodeLimit reads a definition of the limits hash.
func decodeLimit(fn, def string) (Limit, error) {
	l := Limit{Function: fn}
	for part := range strings.SplitSeq(def, ";") {
		k, v, ok := strings.Cut(part, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			return l, fmt.Errorf("limit definition %q: bad part %q", def, part)
		}
		switch k {
		case "rate":
			l.Rate = int(n)
		case "per":
			l.Per = time.Duration(n) * time.Millisecond
		case "burst":
			l.Burst = int(n)
		case "conc":
			l.Concurrency = int(n)
		default:
			return l, fmt.Errorf("limit definition %q: unknown part %q", def, k)
		}
	}
	return l, l.Validate()
}

// SetLimit sets (or replaces) the limit on queue of l.Function ("" the whole queue).
// It takes effect at the next claim of every worker.
func (c *Client) SetLimit(ctx context.Context, queue string, l Limit) error {
	if err := keys.ValidQueue(queue); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := l.Validate(); err != nil {
		return err
	}
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = 1
	}
	q := c.ks.Queue(queue)
	if err := c.rdb.HSet(ctx, q.Limits(), l.Function, l.encode()).Err(); err != nil {
		return err
	}
	return c.rdb.SAdd(ctx, c.ks.Queues(), queue).Err()
}

// RemoveLimit removes the limit on queue of function ("" the whole queue), and the
// state it kept; ErrLimitNotFound when there is none.
func (c *Client) RemoveLimit(ctx context.Context, queue, function string) error {
	if err := keys.ValidQueue(queue); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	q := c.ks.Queue(queue)
	n, err := c.rdb.HDel(ctx, q.Limits(), function).Result()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: queue %s, function %q", ErrLimitNotFound, queue, function)
	}
	return c.rdb.Del(ctx, q.LimitRate(function), q.LimitRun(function)).Err()
}

// Limits lists the limits of queue, the queue's own first, then by function, with
// their current use.
func (c *Client) Limits(ctx context.Context, queue string) ([]LimitInfo, error) {
	if err := keys.ValidQueue(queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	q := c.ks.Queue(queue)
	defs, err := c.rdb.HGetAll(ctx, q.Limits()).Result()
	if err != nil {
		return nil, fmt.Errorf("limits of queue %s: %w", queue, err)
	}
	out := make([]LimitInfo, 0, len(defs))
	for fn, def := range defs {
		l, err := decodeLimit(fn, def)
		li := LimitInfo{Limit: l}
		if err != nil {
			li.Error = err.Error()
		}
		out = append(out, li)
	}
	slices.SortFunc(out, func(a, b LimitInfo) int { return strings.Compare(a.Function, b.Function) })
	runs := make([]*redis.IntCmd, len(out))
	tats := make([]*redis.StringCmd, len(out))
	_, _ = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, li := range out {
			runs[i] = p.SCard(ctx, q.LimitRun(li.Function))
			tats[i] = p.Get(ctx, q.LimitRate(li.Function))
		}
		return nil
	})
	for i := range out {
		out[i].Running, _ = runs[i].Result()
		if tat, err := tats[i].Int64(); err == nil && out[i].Rate > 0 {
			// the next start is allowed at TAT − burst × interval + interval (GCRA)
			interval := out[i].Per.Microseconds() / int64(out[i].Rate)
			out[i].NextTokenMS = (tat - int64(max(1, out[i].Burst))*interval + interval) / 1000
		}
	}
	return out, nil
}
