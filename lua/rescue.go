package lua

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed rescue.lua
var rescueSrc string

// Rescue puts back on their streams the tasks of hand-offs made at or before CutoffMS
// that their worker never read (rescue.lua), up to Limit notes, and replies their ids.
var Rescue = newScript("rescue.lua", withPrelude(rescueSrc), rescueKV, decodeRescue)

// RescueAge is how long a hand-off may stay unread before the scheduler leader puts its
// task back on the stream: a live worker blocked on its inbox reads it in milliseconds.
const RescueAge = time.Second

// RescueArgs is one rescue call.
type RescueArgs struct {
	Queue    keys.Queue
	NowMS    int64
	CutoffMS int64
	Limit    int
}

func rescueKV(a RescueArgs) ([]string, []any, error) {
	q := a.Queue
	ks := make([]string, 0, 13)
	ks = append(ks, q.Handed(), q.TaskPrefix(), q.InboxPrefix())
	ks = append(ks, q.Streams[:]...)
	return ks, []any{keys.Group, a.NowMS, a.CutoffMS, a.Limit, RescueRowsPerNote}, nil
}

func decodeRescue(a RescueArgs, cmd *redis.Cmd) ([]string, error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("rescue %s: %w", a.Queue.Name, err)
	}
	return strs(v), nil
}
