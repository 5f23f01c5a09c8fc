package lua

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

// QueueError is a script or command of one queue that Redis refused: the error names
// the queue, and the keys of the queue whose type is not the one dtq writes, when that
// is the cause. Other queues are not affected by it.
type QueueError struct {
	Queue string
	Op    string      // what failed: "claim", "reclaim", "read", "schedule", …
	Wrong []WrongType // the keys of the queue found of another type than dtq writes
	Err   error
}

// WrongType is a key holding another type than dtq writes it as.
type WrongType struct{ Key, Type, Want string }

func (w WrongType) String() string {
	return fmt.Sprintf("%s is a %s, want a %s", w.Key, w.Type, w.Want)
}

func (e *QueueError) Error() string {
	if len(e.Wrong) > 0 {
		ws := make([]string, len(e.Wrong))
		for i, w := range e.Wrong {
			ws[i] = w.String()
		}
		return fmt.Sprintf("queue %s: %s: %s (%v)", e.Queue, e.Op, strings.Join(ws, "; "), e.Err)
	}
	return fmt.Sprintf("queue %s: %s: %v", e.Queue, e.Op, e.Err)
}

func (e *QueueError) Unwrap() error { return e.Err }

// IsKeyError reports whether err is an error reply that belongs to the keys a script or
// command touched — a key of the wrong type, or a script that failed on what it read —
// and not to the server as a whole (a network or timeout error, LOADING, READONLY,
// OOM, a lost script cache): another queue's keys are not affected by it.
func IsKeyError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || IsNoScript(err) {
		return false
	}
	msg := re.Error()
	// a script's own error reads "ERR user_script:L: … on @user_script:L."; a server-wide
	// refusal inside a script keeps its own prefix (OOM, READONLY, BUSY, …)
	return strings.HasPrefix(msg, "WRONGTYPE") || (strings.HasPrefix(msg, "ERR ") && strings.Contains(msg, "@user_script"))
}

// wantTypes lists the keys of queue q (and of consumer, when not "") with the type dtq
// writes them as. The paused flag is read with EXISTS, so any type will do.
func wantTypes(q keys.Queue, consumer string) [][2]string {
	out := make([][2]string, 0, 20)
	for _, s := range q.Streams {
		out = append(out, [2]string{s, "stream"})
	}
	out = append(out,
		[2]string{q.Schedule(), "zset"}, [2]string{q.Claimed(), "zset"}, [2]string{q.Dead(), "zset"},
		[2]string{q.Waiting(), "zset"}, [2]string{q.Handed(), "zset"}, [2]string{q.Stats(), "hash"}, [2]string{q.Limits(), "hash"})
	if consumer != "" {
		out = append(out, [2]string{q.Inbox(consumer), "stream"}, [2]string{q.Left(consumer), "string"})
	}
	return out
}

// Diagnose wraps err, a failure of op on queue q, in a *QueueError naming the keys of q
// (and of consumer's, when not "") that hold another type than dtq writes. It looks
// (one pipelined TYPE a key) only for a key error (IsKeyError); others come back as
// they are.
func Diagnose(ctx context.Context, c redis.Cmdable, q keys.Queue, consumer, op string, err error) error {
	if err == nil || !IsKeyError(err) {
		return err
	}
	return &QueueError{Queue: q.Name, Op: op, Err: err, Wrong: WrongTypes(ctx, c, q, consumer)}
}

// WrongTypes lists the keys of q (and of consumer's, when not "") that hold another
// type than dtq writes them as: one pipelined TYPE a key.
func WrongTypes(ctx context.Context, c redis.Cmdable, q keys.Queue, consumer string) []WrongType {
	want := wantTypes(q, consumer)
	cmds := make([]*redis.StatusCmd, len(want))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, w := range want {
			cmds[i] = p.Type(ctx, w[0])
		}
		return nil
	})
	var out []WrongType
	for i, w := range want {
		got, terr := cmds[i].Result()
		if terr != nil || got == "none" || got == w[1] {
			continue
		}
		out = append(out, WrongType{Key: w[0], Type: got, Want: w[1]})
	}
	return out
}
