package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/dtq/dtq/internal/keys"
)

// Periodic (cron) entries. An entry is a task template and a schedule, stored in Redis:
// its definition in the PREFIX:cron hash, and, while it is not paused, its next tick in
// its queue's cron zset. The scheduler leader enqueues a task for each tick that falls
// due, with the id CronTaskID(name, tick): a second enqueue of the same tick is refused
// (ErrTaskExists), so a tick fires once however many leaders try it.

// MissedPolicy says what the scheduler does with the ticks of an entry that fell due
// while nothing fired them (no worker ran) beyond the lateness bound.
type MissedPolicy string

// Missed policies.
const (
	// MissedOnce runs the entry once for all the ticks it missed, then goes on from now.
	MissedOnce MissedPolicy = "once"
	// MissedSkip runs nothing for the missed ticks and goes on from now.
	MissedSkip MissedPolicy = "skip"
)

// CronEntry is a periodic entry: a schedule and the task it enqueues at each tick.
type CronEntry struct {
	Name string `json:"name"`
	// Spec: five-field cron syntax ("*/5 * * * *"), a descriptor (@hourly, @daily, …,
	// @every 30s), either optionally after "CRON_TZ=Zone " (UTC otherwise).
	Spec       string       `json:"spec"`
	Queue      string       `json:"queue"`
	Function   string       `json:"function"`
	Payload    string       `json:"payload,omitempty"`
	Priority   int          `json:"priority"`
	MaxRetries *int         `json:"max_retries,omitempty"` // nil: the function's default
	TimeoutMS  int64        `json:"timeout_ms,omitempty"`  // 0: the function's default
	Unique     string       `json:"unique,omitempty"`      // a unique key for its tasks ("" none)
	Missed     MissedPolicy `json:"missed"`                // "" reads as once
	Paused     bool         `json:"paused"`
	UpdatedMS  int64        `json:"updated_ms"`
}

// CronInfo is an entry as listed: its definition and its next tick.
type CronInfo struct {
	CronEntry
	// NextMS is the next tick (unix ms) the scheduler waits for; 0 while paused.
	NextMS int64 `json:"next_ms,omitempty"`
	// Error is set for a definition that does not decode (written by hand).
	Error string `json:"error,omitempty"`
}

// ErrCronNotFound is the error of an operation on an entry that does not exist.
var ErrCronNotFound = errors.New("no such cron entry")

// cronParser reads the five standard fields and the descriptors; CRON_TZ= and TZ= are
// read by the library itself.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses a schedule. It refuses a spec that never fires.
func ParseCron(spec string) (cron.Schedule, error) {
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w: cron spec %q: %v", ErrInvalid, spec, err)
	}
	if s.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("%w: cron spec %q never fires", ErrInvalid, spec)
	}
	return s, nil
}

// CronTaskID is the id of the task entry name enqueues for the tick at tickMS.
func CronTaskID(name string, tickMS int64) string {
	return "cron-" + name + "-" + strconv.FormatInt(tickMS, 10)
}

// CronTick reads back the entry name and tick of a task id made by CronTaskID.
func CronTick(id string) (name string, tickMS int64, ok bool) {
	rest, ok := strings.CutPrefix(id, "cron-")
	i := strings.LastIndexByte(rest, '-')
	if !ok || i <= 0 {
		return "", 0, false
	}
	t, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], t, true
}

// Task is the task e enqueues for the tick at tickMS.
func (e *CronEntry) Task(tickMS int64) Task {
	return Task{Queue: e.Queue, Function: e.Function, Payload: []byte(e.Payload), Priority: e.Priority,
		MaxRetries: e.MaxRetries, Timeout: time.Duration(e.TimeoutMS) * time.Millisecond,
		Unique: e.Unique, ID: CronTaskID(e.Name, tickMS)}
}

// ValidateCron checks an entry as AddCron would, without Redis: its name, spec, missed
// policy and task template.
func (c *Client) ValidateCron(e *CronEntry) error {
	if err := keys.ValidCronName(e.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch e.Missed {
	case "":
		e.Missed = MissedOnce
	case MissedOnce, MissedSkip:
	default:
		return fmt.Errorf("%w: missed policy %q must be once or skip", ErrInvalid, e.Missed)
	}
	if e.TimeoutMS < 0 {
		return fmt.Errorf("%w: timeout must not be negative", ErrInvalid)
	}
	if !utf8.ValidString(e.Payload) {
		// JSON would store U+FFFD for the bytes that are not UTF-8: refused, not changed
		return fmt.Errorf("%w: a cron entry's payload must be UTF-8 text (it is kept in the entry's JSON definition)", ErrInvalid)
	}
	t := e.Task(0)
	if err := c.validate(&t); err != nil {
		return err
	}
	_, err := ParseCron(e.Spec)
	return err
}

// DecodeCron reads an entry's stored definition.
func DecodeCron(name, raw string) (CronEntry, error) {
	var e CronEntry
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return CronEntry{Name: name}, fmt.Errorf("cron entry %s: malformed definition: %v", name, err)
	}
	e.Name = name
	if e.Missed == "" {
		e.Missed = MissedOnce
	}
	return e, nil
}

// AddCron creates or replaces an entry (unpaused unless e.Paused). The next tick is
// computed from now when the entry is new, its spec or queue changed, or it was paused;
// otherwise the tick it waits for is kept, so that re-adding an entry loses no tick.
func (c *Client) AddCron(ctx context.Context, e CronEntry) (*CronInfo, error) {
	return c.putCron(ctx, e, false)
}

// DeclareCron is AddCron for entries declared in code (a worker declares them at every
// start): an entry whose definition is unchanged is left as it is, paused or not, and
// a changed one keeps its paused state.
func (c *Client) DeclareCron(ctx context.Context, e CronEntry) (*CronInfo, error) {
	return c.putCron(ctx, e, true)
}

func (c *Client) putCron(ctx context.Context, e CronEntry, declare bool) (*CronInfo, error) {
	if err := c.ValidateCron(&e); err != nil {
		return nil, err
	}
	sched, _ := ParseCron(e.Spec)
	old, err := c.readCron(ctx, e.Name)
	if err != nil && !errors.Is(err, ErrCronNotFound) {
		return nil, err
	}
	if declare && old != nil {
		e.Paused = old.Paused
	}
	now := c.now()
	q := c.ks.Queue(e.Queue)
	same := old != nil && old.Spec == e.Spec && old.Queue == e.Queue && !old.Paused
	if declare && old != nil {
		o := *old
		o.UpdatedMS = 0
		if sameEntry(o, e) {
			if err := c.register(ctx, e.Queue); err != nil {
				return nil, err
			}
			if !e.Paused { // an entry lost from its zset waits again
				if err := c.rdb.ZAddNX(ctx, q.Cron(), redis.Z{Score: float64(nextTick(sched, now)), Member: e.Name}).Err(); err != nil {
					return nil, fmt.Errorf("declare cron %s: %w", e.Name, err)
				}
			}
			return c.Cron(ctx, e.Name)
		}
	}
	if err := c.register(ctx, e.Queue); err != nil {
		return nil, err
	}
	e.UpdatedMS = now.UnixMilli()
	def, _ := json.Marshal(e)
	if err := c.rdb.HSet(ctx, c.ks.Cron(), e.Name, def).Err(); err != nil {
		return nil, fmt.Errorf("add cron %s: %w", e.Name, err)
	}
	if old != nil && old.Queue != e.Queue && keys.ValidQueue(old.Queue) == nil {
		if err := c.rdb.ZRem(ctx, c.ks.Queue(old.Queue).Cron(), e.Name).Err(); err != nil {
			return nil, fmt.Errorf("add cron %s: %w", e.Name, err)
		}
	}
	z := redis.Z{Score: float64(nextTick(sched, now)), Member: e.Name}
	switch {
	case e.Paused:
		err = c.rdb.ZRem(ctx, q.Cron(), e.Name).Err()
	case old == nil || same:
		// NX: several workers declaring one new entry at once, or a re-add, keep the
		// tick it already waits for
		err = c.rdb.ZAddNX(ctx, q.Cron(), z).Err()
	default:
		err = c.rdb.ZAdd(ctx, q.Cron(), z).Err()
	}
	if err != nil {
		return nil, fmt.Errorf("add cron %s: %w", e.Name, err)
	}
	return c.Cron(ctx, e.Name)
}

// sameEntry compares two definitions field by field.
func sameEntry(a, b CronEntry) bool {
	b.UpdatedMS = a.UpdatedMS
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// nextTick is the first tick of s after now, in unix ms.
func nextTick(s cron.Schedule, now time.Time) int64 { return s.Next(now).UnixMilli() }

// readCron reads one definition (ErrCronNotFound when there is none).
func (c *Client) readCron(ctx context.Context, name string) (*CronEntry, error) {
	if err := keys.ValidCronName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	raw, err := c.rdb.HGet(ctx, c.ks.Cron(), name).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("cron entry %q: %w", name, ErrCronNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read cron %s: %w", name, err)
	}
	e, err := DecodeCron(name, raw)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// Cron reads one entry with its next tick.
func (c *Client) Cron(ctx context.Context, name string) (*CronInfo, error) {
	e, err := c.readCron(ctx, name)
	if err != nil {
		return nil, err
	}
	ci := &CronInfo{CronEntry: *e}
	if keys.ValidQueue(e.Queue) == nil {
		next, err := c.rdb.ZScore(ctx, c.ks.Queue(e.Queue).Cron(), name).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read cron %s: %w", name, err)
		}
		ci.NextMS = int64(next)
	}
	return ci, nil
}

// CronList lists every entry, by name, with its next tick.
func (c *Client) CronList(ctx context.Context) ([]CronInfo, error) {
	h, err := c.rdb.HGetAll(ctx, c.ks.Cron()).Result()
	if err != nil {
		return nil, fmt.Errorf("list cron: %w", err)
	}
	out := make([]CronInfo, 0, len(h))
	for name, raw := range h {
		e, err := DecodeCron(name, raw)
		ci := CronInfo{CronEntry: e}
		if err != nil {
			ci.Error = err.Error()
		}
		out = append(out, ci)
	}
	slices.SortFunc(out, func(a, b CronInfo) int { return strings.Compare(a.Name, b.Name) })
	scores := make([]*redis.FloatCmd, len(out))
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range out {
			if keys.ValidQueue(out[i].Queue) == nil && keys.ValidCronName(out[i].Name) == nil {
				scores[i] = p.ZScore(ctx, c.ks.Queue(out[i].Queue).Cron(), out[i].Name)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list cron: %w", err)
	}
	for i, s := range scores {
		if s != nil && s.Err() == nil {
			out[i].NextMS = int64(s.Val())
		}
	}
	return out, nil
}

// RemoveCron deletes an entry; the tasks it enqueued stay.
func (c *Client) RemoveCron(ctx context.Context, name string) error {
	e, err := c.readCron(ctx, name)
	if err != nil && !strings.Contains(err.Error(), "malformed definition") {
		return err
	}
	if err := c.rdb.HDel(ctx, c.ks.Cron(), name).Err(); err != nil {
		return fmt.Errorf("remove cron %s: %w", name, err)
	}
	if e != nil && keys.ValidQueue(e.Queue) == nil {
		if err := c.rdb.ZRem(ctx, c.ks.Queue(e.Queue).Cron(), name).Err(); err != nil {
			return fmt.Errorf("remove cron %s: %w", name, err)
		}
	}
	return nil
}

// PauseCron stops an entry firing until ResumeCron; pausing a paused entry does nothing.
func (c *Client) PauseCron(ctx context.Context, name string) error {
	return c.setPaused(ctx, name, true)
}

// ResumeCron lets a paused entry fire again, from its first tick after now (the ticks
// of the pause are not run).
func (c *Client) ResumeCron(ctx context.Context, name string) error {
	return c.setPaused(ctx, name, false)
}

func (c *Client) setPaused(ctx context.Context, name string, paused bool) error {
	e, err := c.readCron(ctx, name)
	if err != nil {
		return err
	}
	sched, err := ParseCron(e.Spec)
	if err != nil {
		return fmt.Errorf("cron entry %s: %w", name, err)
	}
	if err := keys.ValidQueue(e.Queue); err != nil {
		return fmt.Errorf("cron entry %s: %w: %v", name, ErrInvalid, err)
	}
	q := c.ks.Queue(e.Queue)
	now := c.now()
	if e.Paused != paused {
		e.Paused = paused
		e.UpdatedMS = now.UnixMilli()
		def, _ := json.Marshal(e)
		if err := c.rdb.HSet(ctx, c.ks.Cron(), name, def).Err(); err != nil {
			return fmt.Errorf("cron %s: %w", name, err)
		}
	}
	if paused {
		err = c.rdb.ZRem(ctx, q.Cron(), name).Err()
	} else {
		err = c.rdb.ZAddNX(ctx, q.Cron(), redis.Z{Score: float64(nextTick(sched, now)), Member: name}).Err()
	}
	if err != nil {
		return fmt.Errorf("cron %s: %w", name, err)
	}
	return nil
}
