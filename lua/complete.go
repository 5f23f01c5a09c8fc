package lua

import (
	_ "embed"
	"fmt"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed complete.lua
var completeSrc string

// Complete records the outcomes of executions of one queue in one call (complete.lua)
// and replies, per completion, what it did with it: CompleteApplied, or CompleteFenced
// (no longer the task's current execution: nothing changed, no ACK), or CompleteRefused.
var Complete = newScript("complete.lua", withPrelude(completeSrc), completeKV, decodeComplete)

// CompleteArgs is one complete call: executions of queue Queue that ended, recorded at
// NowMS; finished tasks are kept KeepMS (0: for ever).
type CompleteArgs struct {
	Queue  keys.Queue
	NowMS  int64
	KeepMS int64
	Items  []Completion
	// Consumer: the worker recording them (its consumer name in the streams' group).
	// complete.lua's short path gives it back an entry it acked for a record it then
	// found gone.
	Consumer string
}

// Outcome is how an execution ended.
type Outcome byte

// Outcomes of an execution.
const (
	Succeeded Outcome = 's'
	Retry     Outcome = 'r'
	Dead      Outcome = 'd'
	// Cancelled: the worker stopped the function on a cancel request (cancel.lua on a
	// running task). complete.lua also records a Retry of a task with a pending cancel
	// request as cancelled.
	Cancelled Outcome = 'c'
)

// Completion is the outcome of one execution.
type Completion struct {
	ID      string
	Entry   string
	Band    int
	Attempt int64
	// Unique: the task may hold a unique key (Started.HasUnique): a success or cancel
	// gives the key the record's retention. False: the key is not looked up.
	Unique  bool
	Outcome Outcome
	Text    string // result on success, error otherwise
	RetryMS int64  // when to run again (Retry)
	Slots   string // the concurrency slots the execution holds (Started.Slots), given back when applied
	// Epoch: the fence epoch of the claim that started the execution (Started.Epoch).
	// A call whose items all carry the epoch the queue still holds records its plain
	// successes without reading their records (complete.lua's short path); "" never.
	Epoch string
}

// CompleteCode is what complete.lua did with one completion.
type CompleteCode int64

// What complete.lua did with each item.
const (
	CompleteFenced  CompleteCode = 0 // no longer the task's current execution: nothing written
	CompleteApplied CompleteCode = 1
	CompleteRefused CompleteCode = 2 // the schedule or the dead set is of another type: nothing written, not ACKed
)

func completeKV(a CompleteArgs) ([]string, []any, error) {
	q := a.Queue
	hour, processed, failed := keys.ThroughputFields(a.NowMS)
	ks := []string{q.Schedule(), q.Dead(), q.Throughput(hour), q.Succeeded(), q.Retrying(),
		q.Waiters(), q.LimitPrefix() + "run:", q.TaskPrefix(), q.StreamPrefix(), q.UniquePrefix(), q.Epoch()}
	args := make([]any, 0, 10+3*len(a.Items)+5*len(a.Items))
	args = append(args, keys.Group, a.NowMS, a.KeepMS, len(a.Items), processed, failed,
		ThroughputTTL.Milliseconds(), SucceededKept, batchEpoch(a.Items), a.Consumer)
	// the items in groups of one band each (see completeOrder): the band, its count of
	// plain successes and of the others, then the plain ones in three values each, the
	// others in five
	order := completeOrder(a.Items)
	for i := 0; i < len(order); {
		band := a.Items[order[i]].Band
		j, p := i, i
		for j < len(order) && a.Items[order[j]].Band == band {
			if a.Items[order[j]].plain() {
				p++
			}
			j++
		}
		args = append(args, band, p-i, j-p)
		for _, k := range order[i:p] {
			it := a.Items[k]
			args = append(args, it.ID, it.Entry, it.Attempt)
		}
		for _, k := range order[p:j] {
			it := a.Items[k]
			o := it.Outcome
			if it.Unique {
				o -= 'a' - 'A' // the outcome's capital: the task may hold a unique key
			}
			outcome := string(rune(o))
			if it.Outcome == Retry {
				outcome += " " + strconv.FormatInt(it.RetryMS, 10)
			}
			if it.Slots != "" {
				outcome += " " + it.Slots
			}
			args = append(args, it.ID, it.Entry, it.Attempt, outcome, it.Text)
		}
		i = j
	}
	return ks, args, nil
}

// batchEpoch is the fence epoch every item carries, or "" when they do not carry one
// and the same (complete.lua's ARGV[9]).
func batchEpoch(items []Completion) string {
	if len(items) == 0 {
		return ""
	}
	e := items[0].Epoch
	for _, it := range items[1:] {
		if it.Epoch != e {
			return ""
		}
	}
	return e
}

// plain reports whether the completion is a plain success: succeeded, no result, no
// unique key, no slots. complete.lua gets those in three values, not five.
func (c Completion) plain() bool {
	return c.Outcome == Succeeded && !c.Unique && c.Text == "" && c.Slots == ""
}

// completeOrder is the order complete.lua gets items in: by band, within a band the plain
// successes first, and otherwise as given. The script replies in that order.
func completeOrder(items []Completion) []int {
	order := make([]int, len(items))
	sorted := true
	for i := range order {
		order[i] = i
		if i > 0 && completeBefore(items[i], items[i-1]) {
			sorted = false
		}
	}
	if !sorted {
		sort.SliceStable(order, func(x, y int) bool { return completeBefore(items[order[x]], items[order[y]]) })
	}
	return order
}

// completeBefore orders completions by band, then plain successes first.
func completeBefore(a, b Completion) bool {
	if a.Band != b.Band {
		return a.Band < b.Band
	}
	return a.plain() && !b.plain()
}

func decodeComplete(a CompleteArgs, cmd *redis.Cmd) ([]CompleteCode, error) {
	// every item applied: complete.lua replies their count alone
	if n, ok := cmd.Val().(int64); ok && cmd.Err() == nil {
		if n != int64(len(a.Items)) {
			return nil, fmt.Errorf("complete %s: %d items applied of %d", a.Queue.Name, n, len(a.Items))
		}
		out := make([]CompleteCode, n)
		for i := range out {
			out[i] = CompleteApplied
		}
		return out, nil
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("complete %s: %w", a.Queue.Name, err)
	}
	if len(v) != len(a.Items) {
		return nil, fmt.Errorf("complete %s: unexpected reply of %d values for %d items", a.Queue.Name, len(v), len(a.Items))
	}
	out := make([]CompleteCode, len(v))
	for i, k := range completeOrder(a.Items) {
		out[k] = CompleteCode(v[i])
	}
	return out, nil
}
