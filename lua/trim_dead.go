package lua

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed trim_dead.lua
var trimDeadSrc string

const trimDeadName = "trim_dead.lua"

// TrimDead deletes, oldest first and at most Limit, the dead tasks of a queue beyond the
// retention bounds (trim_dead.lua): each one's dead-set member, its record and its
// unique key when the key still names it; it counts them in the queue's stats hash.
//
// It is not among the scripts Load loads: its flags line needs Redis 7, and a server
// before it refusing the trim must not refuse the rest (LoadTrimDead loads it).
var TrimDead = newScript(trimDeadName, plain(trimDeadSrc), trimDeadKV, decodeTrimDead)

// LoadTrimDead loads trim_dead.lua into the script cache of c, for pipelined TrimDead
// calls. It fails on a Redis before 7.0, which does not know script flags.
func LoadTrimDead(ctx context.Context, c redis.Scripter) error {
	return load(ctx, c, TrimDead.ref())
}

// TrimDeadMaxLimit bounds TrimDeadArgs.Limit: one call holds Redis for about a
// millisecond per couple of hundred tasks it deletes.
const TrimDeadMaxLimit = 1000

// TrimDeadArgs are the retention bounds of one trim call.
type TrimDeadArgs struct {
	Queue keys.Queue
	NowMS int64
	Max   int64 // dead tasks kept at most (0: no count bound)
	TTLMS int64 // dead tasks older than this go (0: no age bound)
	Limit int   // most dead tasks this call deletes, 1..TrimDeadMaxLimit
}

// TrimDeadResult is what a trim call did.
type TrimDeadResult struct {
	Trimmed int64 // dead tasks deleted
	Kept    int64 // dead tasks left
	More    bool  // some left are still beyond a bound: the call stopped at its limit
}

func trimDeadKV(a TrimDeadArgs) ([]string, []any, error) {
	q := a.Queue
	if a.Limit < 1 || a.Limit > TrimDeadMaxLimit || a.Max < 0 || a.TTLMS < 0 {
		return nil, nil, fmt.Errorf("trim dead %s: limit %d not 1..%d, or a negative bound", q.Name, a.Limit, TrimDeadMaxLimit)
	}
	return []string{q.Dead(), q.TaskPrefix(), q.UniquePrefix(), q.Stats()},
		[]any{a.NowMS, a.Max, a.TTLMS, a.Limit}, nil
}

func decodeTrimDead(a TrimDeadArgs, cmd *redis.Cmd) (TrimDeadResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return TrimDeadResult{}, fmt.Errorf("trim dead %s: %w", a.Queue.Name, err)
	}
	if len(v) != 3 {
		return TrimDeadResult{}, fmt.Errorf("trim dead %s: unexpected reply of %d values", a.Queue.Name, len(v))
	}
	return TrimDeadResult{Trimmed: num(v[0]), Kept: num(v[1]), More: num(v[2]) == 1}, nil
}
