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
// it still held it.
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

func decodeTouch(a TouchArgs, cmd *redis.Cmd) ([]bool, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("touch %s: %w", a.Queue.Name, err)
	}
	out := make([]bool, len(v))
	for i, x := range v {
		out[i] = x == 1
	}
	return out, nil
}
