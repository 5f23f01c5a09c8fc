package lua

import (
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed claim.lua
var claimSrc string

// Claim reads (or reclaims) entries of one queue and starts their tasks atomically
// (claim.lua).
var Claim = newScript("claim.lua", withPrelude(claimSrc), claimKV, decodeClaimCmd)

// ClaimArgs says what one claim call takes.
type ClaimArgs struct {
	Queue      keys.Queue
	Consumer   string
	NowMS      int64
	Reclaim    bool // XAUTOCLAIM entries idle >= MinIdleMS instead of reading new ones
	Want       int  // most entries to read or reclaim
	MaxPayload int
	MinIdleMS  int64
	Delivered  []Delivered // entries a blocking XREADGROUP already delivered
	// Holds (reclaim mode): the entries the caller runs now, which a reclaim never takes
	// back from it however idle they look
	Holds []Delivered
	// RegisterUntilMS (read mode): when the call starts nothing, the worker waits for
	// a hand-off from the enqueue until then (unix ms); 0: it does not.
	RegisterUntilMS int64
	Tag             string     // the calling process's tag (see Leave)
	Received        []Received // hand-offs the worker's blocking read got from its inbox
	// Reread (read mode): the worker's idle read failed without Redis's reply (its
	// connection dropped), so the inbox rows pending for it and not among Received
	// were delivered to a read it never heard back from: they are taken now, each
	// task started only while still current for the worker.
	Reread bool
	// KeepMS: how long the record (and unique key) of a task a reclaim ends cancelled
	// is kept, the worker's retention of finished tasks; 0: kept for good.
	KeepMS int64
	// Call names this call for its receipt (a resent call gets the same reply) and
	// Previous the caller's previous call on the queue (its receipt is deleted). Empty
	// Call: a random one.
	Call, Previous string
}

// Delivered names an entry already delivered to the consumer.
type Delivered struct {
	Band  int
	Entry string
}

// Received names a hand-off read from the worker's inbox: its inbox entry and task.
type Received struct {
	InboxEntry string
	ID         string
}

// WaitingMember is a worker's member in a queue's waiting zset.
func WaitingMember(maxPayload int, consumer string) string {
	return strconv.Itoa(maxPayload) + " " + consumer
}

// Started is a task the claim started: the caller must run it.
type Started struct {
	Entry      string
	Band       int
	ID         string
	Attempt    int64
	Function   string
	Payload    string
	TimeoutMS  int64
	MaxRetries int
	Failures   int
	CreatedMS  int64
	// HasUnique: the task was given a unique key, which it may hold still
	// (Completion.Unique); false: it holds none.
	HasUnique bool
	Reclaimed bool
	HandedOff bool // started by the enqueue for this worker (a hand-off)
	// Slots: the concurrency-limit scopes ("q", "f:NAME", space separated) whose slot
	// the task holds; "" none. Completion.Slots gives them back.
	Slots string
	// Epoch: the queue's fence epoch the claim that started the task replied
	// (ClaimResult.Epoch); Completion.Epoch carries it. "" unknown (a hand-off read from
	// the inbox outside a claim).
	Epoch string
}

// Held is the execution's entry and attempt, as touch.lua fences them.
func (s Started) Held() Held {
	return Held{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt}
}

// Absorbed is an entry the claim ACKed without running.
type Absorbed struct {
	Entry  string
	Band   int
	ID     string
	Status keys.Status // the task's status; "dead" when the claim killed the task
}

// Invalid is a malformed entry the claim moved to a dead record.
type Invalid struct {
	Entry  string
	Band   int
	DeadID string
	Reason string
}

// Returned is an entry delivered while its queue was paused, put back unstarted as a
// new entry.
type Returned struct {
	Entry string
	Band  int
	ID    string // the entry's task field
	New   string // the entry that took its place
}

// ClaimResult is the decoded reply of a claim.
type ClaimResult struct {
	Started  []Started
	Absorbed []Absorbed
	Invalid  []Invalid
	Paused   bool
	Returned []Returned
	// Broken: bands whose key is not a stream, skipped by a read (the others were read)
	Broken []int
	// ThrottledUntilMS (read mode): the queue's rate or concurrency limit lets nothing
	// start before this time (unix ms); 0: not throttled.
	ThrottledUntilMS int64
	// RecheckMS: entries set aside by a limit may start from this time (unix ms): the
	// worker claims again then, as no new entry need wake it; 0: none waits.
	RecheckMS int64
	// Epoch: the queue's fence epoch when the call ended (claim.lua's top), at which
	// every start of the reply was current; "" when the key holds no count.
	Epoch string
}

func claimKV(a ClaimArgs) ([]string, []any, error) {
	q := a.Queue
	if a.Call == "" {
		a.Call = randomCall()
	}
	prev := a.Previous
	if prev == "" {
		prev = a.Call
	}
	ks := make([]string, 0, 24)
	ks = append(ks, q.Streams[:]...)
	ks = append(ks, q.Paused(), q.TaskPrefix(), q.Dead(), q.Receipt(a.Call), q.Receipt(prev),
		q.Waiting(), q.Inbox(a.Consumer), q.Left(a.Consumer), q.Handed(), q.Limits(), q.LimitPrefix(),
		q.Waiters(), q.UniquePrefix(), q.Epoch())
	mode := "read"
	if a.Reclaim {
		mode = "reclaim"
	} else if a.Reread {
		mode = "reread"
	}
	args := make([]any, 0, 18+2*len(a.Delivered)+2*len(a.Received)+2*len(a.Holds))
	args = append(args, keys.Group, a.Consumer, a.NowMS, mode, a.Want, a.MaxPayload, a.MinIdleMS, q.Name,
		a.RegisterUntilMS, a.Tag, ReceiptTTL.Milliseconds(), InboxTTL.Milliseconds(),
		MaxEntryTaskID, LapsedPerCall, len(a.Received))
	for _, r := range a.Received {
		args = append(args, r.InboxEntry, r.ID)
	}
	args = append(args, len(a.Delivered))
	for _, d := range a.Delivered {
		args = append(args, d.Band, d.Entry)
	}
	args = append(args, len(a.Holds))
	for _, d := range a.Holds {
		args = append(args, d.Band, d.Entry)
	}
	args = append(args, a.KeepMS)
	return ks, args, nil
}

func randomCall() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func decodeClaimCmd(a ClaimArgs, cmd *redis.Cmd) (ClaimResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return ClaimResult{}, fmt.Errorf("claim %s: %w", a.Queue.Name, err)
	}
	return decodeClaim(v)
}

// ParseSpec reads a task record's spec field as enqueue.lua packs it (prelude.lua's
// pack_spec): "TIMEOUT_MS MAX_RETRIES CREATED_AT UNIQUE FUNCTION" (the function last, so
// that it may hold spaces; UNIQUE 1 or 0). A number that does not parse reads as zero.
func ParseSpec(spec string) (fn string, timeoutMS, maxRetries, createdMS int64, unique bool) {
	var n [4]int64
	for i := range n {
		f, rest, _ := strings.Cut(spec, " ")
		n[i], _ = strconv.ParseInt(f, 10, 64)
		spec = rest
	}
	return spec, n[0], n[1], n[2], n[3] != 0
}

// decodeHead reads a start's head, "ENTRY{BAND{ATTEMPT{HOW{ID" (the id last: it may
// hold braces in a hand-off).
func decodeHead(head string) (Started, error) {
	var s Started
	// "ENTRY{BAND{ATTEMPT{HOW{ID", cut in place: a split's slice cost every start 80 bytes
	var p [5]string
	rest, ok := head, false
	for i := range 4 {
		if p[i], rest, ok = strings.Cut(rest, "{"); !ok {
			return s, fmt.Errorf("claim: malformed start head %q", head)
		}
	}
	p[4] = rest
	band, err := strconv.Atoi(p[1])
	if err != nil || band < 0 || band > keys.MaxPriority {
		return s, fmt.Errorf("claim: start head %q: bad band", head)
	}
	s.Entry, s.Band, s.ID = p[0], band, p[4]
	s.Attempt, _ = strconv.ParseInt(p[2], 10, 64)
	s.Reclaimed, s.HandedOff = p[3] == "1", p[3] == "2"
	return s, nil
}

// decodeStartedRow reads a start as a whole row, as receipts written by earlier
// releases replay them.
func decodeStartedRow(row []any) (Started, error) {
	var s Started
	switch len(row) {
	case 6, 8, 9: // {entry, band, id, attempt, spec, payload[, failures, how[, slots]]}
		fn, tmo, maxr, created, unique := ParseSpec(str(row[4]))
		s = Started{Function: fn, Payload: str(row[5]), TimeoutMS: tmo, MaxRetries: int(maxr),
			CreatedMS: created, HasUnique: unique}
		if len(row) > 6 {
			s.Failures = int(num(row[6]))
		}
	case 12, 13: // a hand-off's row, and rows of receipts written by earlier releases
		s = Started{Function: str(row[4]), Payload: str(row[5]), TimeoutMS: num(row[6]),
			MaxRetries: int(num(row[7])), Failures: int(num(row[8])), CreatedMS: num(row[10]),
			HasUnique: str(row[9]) != ""}
	default:
		return s, fmt.Errorf("claim: started row of %d fields", len(row))
	}
	var how int64
	if len(row) != 6 {
		how = num(row[len(row)-1])
	}
	if len(row) == 9 || len(row) == 13 {
		s.Slots, how = str(row[len(row)-1]), num(row[len(row)-2])
	}
	s.Entry, s.Band, s.ID, s.Attempt = str(row[0]), int(num(row[1])), str(row[2]), num(row[3])
	s.Reclaimed, s.HandedOff = how == 1, how == 2
	return s, nil
}

func decodeClaim(v []any) (ClaimResult, error) {
	var r ClaimResult
	if len(v) < 4 || len(v) > 9 { // 4 to 6: receipts written by earlier releases
		return r, fmt.Errorf("claim: unexpected reply of %d elements", len(v))
	}
	list, _ := v[0].([]any)
	for i := 0; i < len(list); {
		if row, ok := list[i].([]any); ok {
			s, err := decodeStartedRow(row)
			if err != nil {
				return r, err
			}
			r.Started = append(r.Started, s)
			i++
			continue
		}
		// head, spec, payload[, failures, slots] (claim.lua's top)
		head, ok := list[i].(string)
		if !ok || i+2 >= len(list) {
			return r, fmt.Errorf("claim: started value %d is not a start's head", i)
		}
		s, err := decodeHead(head)
		if err != nil {
			return r, err
		}
		fn, tmo, maxr, created, unique := ParseSpec(str(list[i+1]))
		s.Function, s.Payload, s.TimeoutMS, s.MaxRetries, s.CreatedMS, s.HasUnique =
			fn, str(list[i+2]), tmo, int(maxr), created, unique
		i += 3
		if i < len(list) {
			if f, ok := list[i].(int64); ok {
				if i+1 >= len(list) {
					return r, fmt.Errorf("claim: start %s has failures but no slots", s.ID)
				}
				s.Failures, s.Slots = int(f), str(list[i+1])
				i += 2
			}
		}
		r.Started = append(r.Started, s)
	}
	for _, row := range rows(v[1]) {
		if len(row) == 4 {
			r.Absorbed = append(r.Absorbed, Absorbed{Entry: str(row[0]), Band: int(num(row[1])), ID: str(row[2]), Status: keys.Status(str(row[3]))})
		}
	}
	for _, row := range rows(v[2]) {
		if len(row) == 4 {
			r.Invalid = append(r.Invalid, Invalid{Entry: str(row[0]), Band: int(num(row[1])), DeadID: str(row[2]), Reason: str(row[3])})
		}
	}
	r.Paused = num(v[3]) == 1
	if len(v) >= 6 {
		if bs, ok := v[5].([]any); ok {
			for _, b := range bs {
				r.Broken = append(r.Broken, int(num(b)))
			}
		}
	}
	if len(v) >= 8 {
		r.ThrottledUntilMS, r.RecheckMS = num(v[6]), num(v[7])
	}
	if len(v) >= 9 {
		r.Epoch = str(v[8])
		for i := range r.Started {
			r.Started[i].Epoch = r.Epoch
		}
	}
	if len(v) >= 5 {
		for _, row := range rows(v[4]) {
			if len(row) == 4 {
				r.Returned = append(r.Returned, Returned{Entry: str(row[0]), Band: int(num(row[1])), ID: str(row[2]), New: str(row[3])})
			}
		}
	}
	return r, nil
}
