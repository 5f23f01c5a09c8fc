package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed sched_claim.lua
var schedClaimSrc string

// SchedClaim moves up to Limit due tasks from the schedule to the claimed set and
// replies them, with the claims made at or before StaleMS and the next due time
// (sched_claim.lua).
var SchedClaim = newScript("sched_claim.lua", plain(schedClaimSrc), schedClaimKV, decodeSchedClaim)

// SchedClaimArgs is one scheduler claim.
type SchedClaimArgs struct {
	Queue   keys.Queue
	NowMS   int64
	Limit   int
	StaleMS int64
}

// SchedClaimResult is the reply of a scheduler claim.
type SchedClaimResult struct {
	Due, Stale []string
	NextMS     int64 // -1: nothing scheduled
}

func schedClaimKV(a SchedClaimArgs) ([]string, []any, error) {
	return []string{a.Queue.Schedule(), a.Queue.Claimed()}, []any{a.NowMS, a.Limit, a.StaleMS}, nil
}

func decodeSchedClaim(a SchedClaimArgs, cmd *redis.Cmd) (SchedClaimResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return SchedClaimResult{}, fmt.Errorf("scheduler claim %s: %w", a.Queue.Name, err)
	}
	if len(v) != 3 {
		return SchedClaimResult{}, fmt.Errorf("scheduler claim %s: unexpected reply", a.Queue.Name)
	}
	return SchedClaimResult{Due: strs(v[0]), Stale: strs(v[1]), NextMS: num(v[2])}, nil
}
