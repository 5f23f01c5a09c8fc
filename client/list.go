package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/queuestat"
)

// The states List reads, each from where the task lives in that state: the task
// statuses that have a structure to list them from.
const (
	StateQueued    = StatusQueued    // band stream entries not yet delivered to a worker
	StateRunning   = StatusRunning   // band stream entries delivered and not finished (the PEL)
	StateScheduled = StatusScheduled // the schedule zset, retries excepted
	StateRetrying  = StatusRetrying  // the schedule zset, retries only
	StateDead      = StatusDead      // the dead zset
	StateSucceeded = StatusSucceeded // the succeeded list: about the newest lua.SucceededKept, newest first
)

// ListStates are the states List accepts.
var ListStates = []Status{StateQueued, StateRunning, StateScheduled, StateRetrying, StateDead, StateSucceeded}

// Listing limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ErrBadCursor is returned by List for a cursor it did not make (or made for another
// state or band).
var ErrBadCursor = errors.New("bad cursor")

// ValidID reports whether id is an acceptable task id: [A-Za-z0-9_.:-]{1,128}.
func ValidID(id string) error {
	if id == "" || len(id) > 128 || !keys.NameChars(id, "_.:-") {
		return fmt.Errorf("%w: id %q must match [A-Za-z0-9_.:-]{1,128}", ErrInvalid, id)
	}
	return nil
}

// ListOptions say what List reads.
type ListOptions struct {
	State Status // one of ListStates
	// Band restricts queued and running to one priority band; -1 reads every band,
	// 9 first. The zset states ignore it.
	Band   int
	Cursor string // "" for the first page, else a Page.Next of the same state and band
	Limit  int    // 1..MaxListLimit; 0 means DefaultListLimit
}

// ListItem is one task of a listing, with a summary of its record (empty fields when
// the record is gone).
type ListItem struct {
	ID         string `json:"id"`
	Priority   int    `json:"priority"`
	Status     Status `json:"status"` // from the record: may differ from the state listed, since the task moved on
	Function   string `json:"function"`
	Attempt    int64  `json:"attempt"`
	Failures   int64  `json:"failures"`
	Error      string `json:"error,omitempty"`
	EntryID    string `json:"entry_id,omitempty"`   // queued, running: the stream entry
	Consumer   string `json:"consumer,omitempty"`   // running: the worker holding the entry
	IdleMS     int64  `json:"idle_ms,omitempty"`    // running: since the entry was last delivered or touched
	Deliveries int64  `json:"deliveries,omitempty"` // running: times the entry was delivered
	AtMS       int64  `json:"at_ms,omitempty"`      // scheduled, retrying: due time; dead: when it died; succeeded: when it finished
	Missing    bool   `json:"missing,omitempty"`    // the task's record no longer exists
	Malformed  bool   `json:"malformed,omitempty"`  // a stream entry naming no task
	Deleted    bool   `json:"entry_gone,omitempty"` // running: the PEL names an entry the stream no longer holds
}

// Page is one page of a listing. Next is "" at the end; otherwise it continues the
// listing after the last item. Pages are read from Redis as they are: a task that moves
// between reads may show on two pages or on none, but one that stays put is listed once.
type Page struct {
	Items []ListItem `json:"items"`
	Next  string     `json:"next_cursor,omitempty"`
}

// List reads one page of the tasks of queue in a state, straight from the structures
// that hold them: the band streams from the cursor (XRANGE), their pending entries
// (XPENDING), the schedule and dead zsets by rank, the succeeded list by index. It never
// scans the key space.
func (c *Client) List(ctx context.Context, queue string, o ListOptions) (*Page, error) {
	if err := keys.ValidQueue(queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if o.Limit == 0 {
		o.Limit = DefaultListLimit
	}
	if o.Limit < 1 || o.Limit > MaxListLimit {
		return nil, fmt.Errorf("%w: limit %d must be 1..%d", ErrInvalid, o.Limit, MaxListLimit)
	}
	q := c.ks.Queue(queue)
	switch o.State {
	case StateQueued, StateRunning:
		if o.Band < -1 || o.Band > keys.MaxPriority {
			return nil, fmt.Errorf("%w: band %d must be 0..%d", ErrInvalid, o.Band, keys.MaxPriority)
		}
		return c.listStream(ctx, q, o)
	case StateScheduled, StateRetrying:
		return c.listZSet(ctx, q, q.Schedule(), o)
	case StateDead:
		return c.listZSet(ctx, q, q.Dead(), o)
	case StateSucceeded:
		return c.listSucceeded(ctx, q, o)
	}
	names := make([]string, len(ListStates))
	for i, st := range ListStates {
		names[i] = string(st)
	}
	return nil, fmt.Errorf("%w: state %q must be one of %s", ErrInvalid, o.State, strings.Join(names, ", "))
}

// Cursors are opaque to callers: base64 of "state|band|position".
func encodeCursor(state Status, band int, pos string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(string(state) + "|" + strconv.Itoa(band) + "|" + pos))
}

func decodeCursor(cur string, state Status, band int) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(cur)
	if err != nil {
		return "", ErrBadCursor
	}
	st, rest, ok := strings.Cut(string(b), "|")
	if !ok || st != string(state) {
		return "", fmt.Errorf("%w: not a cursor of state %s", ErrBadCursor, state)
	}
	bs, pos, ok := strings.Cut(rest, "|")
	if !ok || bs != strconv.Itoa(band) {
		return "", fmt.Errorf("%w: not a cursor of this band", ErrBadCursor)
	}
	return pos, nil
}

// validEntryID reports whether s is a stream id ms-seq.
func validEntryID(s string) bool {
	_, ok := keys.ParseEntryID(s)
	return ok
}

// listStream pages through the entries of the band streams, band 9 first and by entry
// id within a band. Stream cursor position: "BAND ENTRYID" of the last item returned.
func (c *Client) listStream(ctx context.Context, q keys.Queue, o ListOptions) (*Page, error) {
	from, after := keys.MaxPriority, ""
	if o.Cursor != "" {
		pos, err := decodeCursor(o.Cursor, o.State, o.Band)
		if err != nil {
			return nil, err
		}
		bs, id, ok := strings.Cut(pos, " ")
		b, err := strconv.Atoi(bs)
		if !ok || err != nil || b < 0 || b > keys.MaxPriority || !validEntryID(id) || (o.Band >= 0 && b != o.Band) {
			return nil, ErrBadCursor
		}
		from, after = b, id
	}
	var bands []int
	for p := from; p >= 0; p-- {
		if o.Band < 0 || p == o.Band {
			bands = append(bands, p)
		}
	}
	var items []ListItem
	var err error
	if o.State == StateQueued {
		items, err = c.queuedEntries(ctx, q, bands, after, o.Limit+1)
	} else {
		items, err = c.pendingEntries(ctx, q, bands, after, o.Limit+1)
	}
	if err != nil {
		return nil, err
	}
	page := &Page{Items: items}
	if page.Items == nil {
		page.Items = []ListItem{}
	}
	if len(items) > o.Limit {
		page.Items = items[:o.Limit]
		last := page.Items[o.Limit-1]
		page.Next = encodeCursor(o.State, o.Band, strconv.Itoa(last.Priority)+" "+last.EntryID)
	}
	if err := c.summarise(ctx, q, page.Items); err != nil {
		return nil, err
	}
	return page, nil
}

// queuedEntries reads up to n undelivered entries of bands, in order, the first band
// from after "after": the entries past the group's last delivered id (every entry up to
// it was delivered: dtq deletes an entry when it acknowledges it).
func (c *Client) queuedEntries(ctx context.Context, q keys.Queue, bands []int, after string, n int) ([]ListItem, error) {
	groups := make([]*redis.XInfoGroupsCmd, len(bands))
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range bands {
			groups[i] = p.XInfoGroups(ctx, q.Stream(b))
		}
		return nil
	}); err != nil && !isServerError(err) {
		return nil, fmt.Errorf("list queued: %w", err)
	}
	ranges := make([]*redis.XMessageSliceCmd, len(bands))
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range bands {
			start := "-"
			if i == 0 && after != "" {
				start = after
			}
			if gs, err := groups[i].Result(); err == nil {
				for _, g := range gs {
					if g.Name == keys.Group && compareIDs(g.LastDeliveredID, start) > 0 {
						start = g.LastDeliveredID
					}
				}
			} else if !isServerError(err) {
				return err
			}
			if start != "-" {
				start = "(" + start
			}
			ranges[i] = p.XRangeN(ctx, q.Stream(b), start, "+", int64(n))
		}
		return nil
	}); err != nil && !isServerError(err) {
		return nil, fmt.Errorf("list queued: %w", err)
	}
	var out []ListItem
	for i, b := range bands {
		msgs, err := ranges[i].Result()
		if err != nil {
			if errors.Is(err, redis.Nil) {
				continue
			}
			return nil, fmt.Errorf("list queued: band %d: %w", b, err)
		}
		for _, m := range msgs {
			out = append(out, entryItem(b, m))
			if len(out) == n {
				return out, nil
			}
		}
	}
	return out, nil
}

// pendingEntries reads up to n pending entries of bands, in order, the first band from
// after "after", with the task each names.
func (c *Client) pendingEntries(ctx context.Context, q keys.Queue, bands []int, after string, n int) ([]ListItem, error) {
	pend := make([]*redis.XPendingExtCmd, len(bands))
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range bands {
			start := "-"
			if i == 0 && after != "" {
				start = "(" + after
			}
			pend[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: q.Stream(b), Group: keys.Group, Start: start, End: "+", Count: int64(n)})
		}
		return nil
	}); err != nil && !isServerError(err) {
		return nil, fmt.Errorf("list running: %w", err)
	}
	var out []ListItem
	for i, b := range bands {
		ps, err := pend[i].Result()
		if err != nil {
			if redis.HasErrorPrefix(err, "NOGROUP") { // no stream, or no group yet
				continue
			}
			return nil, fmt.Errorf("list running: band %d: %w", b, err)
		}
		for _, pe := range ps {
			out = append(out, ListItem{Priority: b, EntryID: pe.ID, Consumer: pe.Consumer,
				IdleMS: pe.Idle.Milliseconds(), Deliveries: pe.RetryCount})
			if len(out) == n {
				break
			}
		}
		if len(out) == n {
			break
		}
	}
	// The task of each entry is in the entry's fields.
	msgs := make([]*redis.XMessageSliceCmd, len(out))
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range out {
			msgs[i] = p.XRange(ctx, q.Stream(it.Priority), it.EntryID, it.EntryID)
		}
		return nil
	}); err != nil && !isServerError(err) {
		return nil, fmt.Errorf("list running: %w", err)
	}
	for i := range out {
		ms, err := msgs[i].Result()
		if err != nil && !isServerError(err) {
			return nil, fmt.Errorf("list running: %w", err)
		}
		if len(ms) == 0 {
			out[i].Deleted = true
			continue
		}
		e := entryItem(out[i].Priority, ms[0])
		out[i].ID, out[i].Malformed = e.ID, e.Malformed
	}
	return out, nil
}

func entryItem(band int, m redis.XMessage) ListItem {
	it := ListItem{Priority: band, EntryID: m.ID}
	if id, ok := m.Values["task"].(string); ok && id != "" {
		it.ID = id
	} else {
		it.Malformed = true
	}
	return it
}

// compareIDs orders stream ids; "-" is before every id.
func compareIDs(a, b string) int {
	if a == b {
		return 0
	}
	if a == "-" {
		return -1
	}
	if b == "-" {
		return 1
	}
	ai, _ := keys.ParseEntryID(a)
	bi, _ := keys.ParseEntryID(b)
	return ai.Compare(bi)
}

// listZSet pages through a zset by score, then member (the zset's own order). Zset
// cursor position: "SCORE MEMBER" of the last item returned. It finds where to resume
// by the member's rank when it is still there with that score, else after every member
// of a lower score, skipping the equal-score members that sort before it.
func (c *Client) listZSet(ctx context.Context, q keys.Queue, key string, o ListOptions) (*Page, error) {
	var start int64
	var curScore float64
	var curMember string
	resume := o.Cursor != ""
	if resume {
		pos, err := decodeCursor(o.Cursor, o.State, -1)
		if err != nil {
			return nil, err
		}
		ss, m, ok := strings.Cut(pos, " ")
		s, err := strconv.ParseFloat(ss, 64)
		if !ok || err != nil || math.IsNaN(s) || m == "" {
			return nil, ErrBadCursor
		}
		curScore, curMember = s, m
		var score *redis.FloatCmd
		var rank, lower *redis.IntCmd
		if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			score = p.ZScore(ctx, key, m)
			rank = p.ZRank(ctx, key, m)
			lower = p.ZCount(ctx, key, "-inf", "("+ss)
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("list %s: %w", o.State, err)
		}
		if sc, err := score.Result(); err == nil && sc == s {
			start, resume = rank.Val()+1, false
		} else {
			start = lower.Val()
		}
	}
	// Read in batches until the page and one more item are found (so Next is "" at the
	// end), examining at most a bounded number of members per call.
	want := o.Limit + 1
	budget := int64(20 * want)
	batch := int64(want)
	var found []ListItem
	var scores []float64
	lastPos := "" // of the last member examined, while the zset may hold more
	for budget > 0 && len(found) < want {
		zs, err := c.rdb.ZRangeWithScores(ctx, key, start, start+batch-1).Result()
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", o.State, err)
		}
		start += int64(len(zs))
		budget -= int64(len(zs))
		cands := make([]ListItem, 0, len(zs))
		candScores := make([]float64, 0, len(zs))
		for _, z := range zs {
			m, _ := z.Member.(string)
			lastPos = zpos(z.Score, m)
			if resume {
				if z.Score < curScore || z.Score == curScore && m <= curMember {
					continue
				}
				resume = false
			}
			cands = append(cands, ListItem{ID: m, AtMS: int64(z.Score)})
			candScores = append(candScores, z.Score)
		}
		if err := c.summarise(ctx, q, cands); err != nil {
			return nil, err
		}
		for i, it := range cands {
			if o.State == StateRetrying && it.Status != StateRetrying || o.State == StateScheduled && it.Status == StateRetrying {
				continue
			}
			found = append(found, it)
			scores = append(scores, candScores[i])
			if len(found) == want {
				break
			}
		}
		if int64(len(zs)) < batch {
			lastPos = "" // the end of the zset
			break
		}
		batch = min(2*batch, 4096)
	}
	page := &Page{Items: found}
	switch {
	case len(found) > o.Limit:
		page.Items = found[:o.Limit]
		page.Next = encodeCursor(o.State, -1, zpos(scores[o.Limit-1], page.Items[o.Limit-1].ID))
	case lastPos != "":
		// The budget ran out before the page filled: resume after the last member examined.
		page.Next = encodeCursor(o.State, -1, lastPos)
	}
	if page.Items == nil {
		page.Items = []ListItem{}
	}
	return page, nil
}

// listSucceeded pages through the succeeded list, newest first. An entry is one
// completion call's successes, "MS ID1 ID2 …" (entries written before hold one id),
// listed last id first. Cursor position: the entry of the last item returned, then "\n"
// and how many of its ids were returned (a cursor of an earlier release: the entry
// alone, all of them); the next page starts there, wherever LPOS finds the entry now
// (new successes are pushed at the other end). An entry no longer there was cut off the
// old end with everything older: the listing is over.
func (c *Client) listSucceeded(ctx context.Context, q keys.Queue, o ListOptions) (*Page, error) {
	key := q.Succeeded()
	var start int64
	skip := 0
	if o.Cursor != "" {
		pos, err := decodeCursor(o.Cursor, o.State, -1)
		if err != nil {
			return nil, err
		}
		entry, n, partial := strings.Cut(pos, "\n")
		if entry == "" {
			return nil, ErrBadCursor
		}
		if partial {
			if skip, err = strconv.Atoi(n); err != nil || skip < 1 {
				return nil, ErrBadCursor
			}
		}
		i, err := c.rdb.LPos(ctx, key, entry, redis.LPosArgs{}).Result()
		if errors.Is(err, redis.Nil) {
			return &Page{Items: []ListItem{}}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", o.State, err)
		}
		start = i
		if !partial {
			start = i + 1
		}
	}
	// every entry lists at least one item: Limit+1 entries fill a page and tell whether
	// another follows (one more past an entry the cursor is part way through)
	end := start + int64(o.Limit)
	if skip > 0 {
		end++
	}
	vals, err := c.rdb.LRange(ctx, key, start, end).Result()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", o.State, err)
	}
	page := &Page{Items: make([]ListItem, 0, o.Limit)}
	// the entry of the last item listed, and how many of its ids were listed
	var last string
	var listed, of int
list:
	for j, v := range vals {
		ms, ids, ok := succeededEntry(v)
		if !ok {
			ids = []string{""} // one malformed item
		}
		from := 0
		if j == 0 {
			from = skip
		}
		for k := from; k < len(ids); k++ {
			if len(page.Items) == o.Limit {
				// another item follows the page: the next page starts after the last
				pos := last
				if listed < of {
					pos = last + "\n" + strconv.Itoa(listed)
				}
				page.Next = encodeCursor(o.State, -1, pos)
				break list
			}
			if !ok {
				page.Items = append(page.Items, ListItem{Malformed: true})
			} else {
				page.Items = append(page.Items, ListItem{ID: ids[k], AtMS: ms})
			}
			last, listed, of = v, k+1, len(ids)
		}
	}
	if err := c.summarise(ctx, q, page.Items); err != nil {
		return nil, err
	}
	return page, nil
}

// succeededEntry splits an entry of the succeeded list, "MS ID1 ID2 …", its ids last
// first (the order they are listed in).
func succeededEntry(v string) (ms int64, ids []string, ok bool) {
	s, rest, found := strings.Cut(v, " ")
	ms, err := strconv.ParseInt(s, 10, 64)
	ids = strings.Fields(rest)
	if !found || err != nil || len(ids) == 0 {
		return 0, nil, false
	}
	slices.Reverse(ids)
	return ms, ids, true
}

func zpos(score float64, member string) string {
	return strconv.FormatFloat(score, 'f', -1, 64) + " " + member
}

// summarise fills the record fields of items from their task hashes, in one round trip.
func (c *Client) summarise(ctx context.Context, q keys.Queue, items []ListItem) error {
	if len(items) == 0 {
		return nil
	}
	cmds := make([]*redis.SliceCmd, len(items))
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, it := range items {
			if it.ID != "" {
				cmds[i] = p.HMGet(ctx, q.Task(it.ID), "status", "function", "attempt", "failures", "error", "priority")
			}
		}
		return nil
	}); err != nil && !isServerError(err) {
		return fmt.Errorf("read tasks: %w", err)
	}
	str := func(v any) string { s, _ := v.(string); return s }
	num := func(v any) int64 { n, _ := strconv.ParseInt(str(v), 10, 64); return n }
	for i := range items {
		if cmds[i] == nil {
			continue
		}
		v, err := cmds[i].Result()
		if err != nil || len(v) < 6 || v[0] == nil {
			items[i].Missing = true
			continue
		}
		it := &items[i]
		it.Status, it.Function, it.Attempt, it.Failures, it.Error = Status(str(v[0])), str(v[1]), num(v[2]), num(v[3]), str(v[4])
		if it.EntryID == "" {
			it.Priority = int(num(v[5]))
		}
	}
	return nil
}

func isServerError(err error) bool { return queuestat.IsServerError(err) }
