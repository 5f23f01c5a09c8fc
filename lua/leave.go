package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed leave.lua
var leaveSrc string

// Leave ends Consumer's hand-off registration on a queue and replies, deleting its
// inbox, what was handed to it and not read (leave.lua). For LeftTTL, claims that carry
// the same tag (the same process) do not register it again.
var Leave = newScript("leave.lua", withPrelude(leaveSrc), leaveKV, decodeLeave)

// LeaveArgs is one leave call.
type LeaveArgs struct {
	Queue      keys.Queue
	Consumer   string
	Tag        string // the leaving process's tag
	MaxPayload int    // the payload limit the worker registered with
}

// Left is a hand-off a leaving worker had not read: a started task (ID set) or a
// delivered entry (ID empty). Either is in the worker's PEL: hand it back.
type Left struct {
	Band    int
	Entry   string
	ID      string
	Attempt int64
}

func leaveKV(a LeaveArgs) ([]string, []any, error) {
	q := a.Queue
	return []string{q.Waiting(), q.Inbox(a.Consumer), q.Left(a.Consumer), q.Handed()},
		[]any{keys.Group, a.Consumer, WaitingMember(a.MaxPayload, a.Consumer), a.Tag, LeftTTL.Milliseconds()}, nil
}

func decodeLeave(a LeaveArgs, cmd *redis.Cmd) ([]Left, error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("leave %s: %w", a.Queue.Name, err)
	}
	var out []Left
	for _, row := range rows(v) {
		if len(row) == 4 {
			out = append(out, Left{Band: int(num(row[0])), Entry: str(row[1]), ID: str(row[2]), Attempt: num(row[3])})
		}
	}
	return out, nil
}
