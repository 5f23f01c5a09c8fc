package lua

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

//go:embed touch.lua
var touchSrc string

// Touch resets (idle 0) or hands back (Handback, idle = the visibility timeout) the PEL
// idle clock of entries Consumer still holds (touch.lua), and replies, per item, whether
// it still held it and whether the task's cancel was requested.
var Touch = newScript("touch.lua", withPrelude(touchSrc), touchKV, decodeTouch)

// TouchArgs is one touch call.
type TouchArgs struct {
	Queue    keys.Queue
	Consumer string
	IdleMS   int64
	Handback bool
	Items    []Held
}

// Held is an execution a worker holds: its entry and attempt.
type Held struct {
	ID      string
	Entry   string
	Band    int
	Attempt int64
}

func touchKV(a TouchArgs) ([]string, []any, error) {
	ks := make([]string, 0, 2*len(a.Items))
	args := make([]any, 0, 5+2*len(a.Items))
	hb := "0"
	if a.Handback {
		hb = "1"
	}
	args = append(args, keys.Group, a.Consumer, a.IdleMS, hb, len(a.Items))
	for _, it := range a.Items {
		ks = append(ks, a.Queue.Task(it.ID), a.Queue.Stream(it.Band))
		args = append(args, it.Entry, it.Attempt)
	}
	return ks, args, nil
}

// Touched is touch.lua's answer for one held execution.
type Touched byte

// Answers of touch.lua.
const (
	NotHeld       Touched = 0 // no longer this execution's (reclaimed, finished)
	StillHeld     Touched = 1
	StopRequested Touched = 2 // still held, and the task's cancel was requested
)

// Held reports whether the execution was still the task's current one.
func (t Touched) Held() bool { return t != NotHeld }

func decodeTouch(a TouchArgs, cmd *redis.Cmd) ([]Touched, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("touch %s: %w", a.Queue.Name, err)
	}
	if len(v) != len(a.Items) {
		return nil, fmt.Errorf("touch %s: %d answers for %d items", a.Queue.Name, len(v), len(a.Items))
	}
	out := make([]Touched, len(v))
	for i, x := range v {
		if x < 0 || x > int64(StopRequested) {
			return nil, fmt.Errorf("touch %s: unexpected answer %d", a.Queue.Name, x)
		}
		out[i] = Touched(x)
	}
	return out, nil
}
