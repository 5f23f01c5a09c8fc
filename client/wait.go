package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// WaitLease is how long one registration of a waiter lasts; the waiter renews it every
// WaitRenew while it waits. A waiter that vanishes (its process killed, its connection
// lost) is forgotten WaitLease after its last renewal at the latest.
const (
	WaitLease = 30 * time.Second
	WaitRenew = 10 * time.Second
)

// Wait blocks until the task ends (succeeded, dead or cancelled) and returns its final
// record, or until ctx ends. It is woken by a push, not a poll: it subscribes to the
// task's channel, then registers (wait.lua), and the script that ends the task publishes
// on the channel when a waiter is registered (complete.lua, cancel.lua). A task nobody
// waits on costs nothing extra. A retry is not an end: Wait goes on waiting.
//
// The registration is renewed every WaitRenew while Wait waits, and ended when it
// returns; a waiter that vanishes leaves a registration that lapses after WaitLease,
// and the key holding registrations expires with its latest one. After a lost
// connection Wait registers again, which reports an end it missed.
//
// ErrNotFound when there is no such task (or its record was deleted while Wait waited).
func (c *Client) Wait(ctx context.Context, queue, id string) (*TaskInfo, error) {
	return c.wait(ctx, queue, id, WaitLease, WaitRenew)
}

func (c *Client) wait(ctx context.Context, queue, id string, lease, renew time.Duration) (*TaskInfo, error) {
	if err := keys.ValidQueue(queue); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if id == "" {
		return nil, fmt.Errorf("%w: empty task id", ErrInvalid)
	}
	q := c.ks.Queue(queue)
	ps := c.rdb.Subscribe(ctx, q.Done(id))
	defer ps.Close()
	// the subscription is in place before the first registration reads the status
	if _, err := ps.Receive(ctx); err != nil {
		return nil, fmt.Errorf("wait %s: subscribe: %w", id, err)
	}
	// a blocked receive does not watch ctx: closing the subscription ends it
	defer context.AfterFunc(ctx, func() { _ = ps.Close() })()
	var until int64
	defer func() {
		if until == 0 {
			return
		}
		// best effort: a registration left behind lapses by itself
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = lua.Wait.Run(ctx, c.rdb, lua.WaitArgs{Queue: q, ID: id, NowMS: c.now().UnixMilli(), EndMS: until})
	}()
	for {
		now := c.now()
		until = now.Add(lease).UnixMilli()
		status, err := lua.Wait.Run(ctx, c.rdb, lua.WaitArgs{Queue: q, ID: id, NowMS: now.UnixMilli(), UntilMS: until})
		if err != nil {
			return nil, err
		}
		if status == "" {
			until = 0
			return nil, fmt.Errorf("wait %s in %s: %w", id, queue, ErrNotFound)
		}
		if ended(Status(status)) {
			until = 0
			return c.Get(ctx, queue, id)
		}
		next := time.Now().Add(renew)
		for {
			msg, err := ps.ReceiveTimeout(ctx, time.Until(next))
			if err == nil {
				if _, ok := msg.(*redis.Message); !ok {
					continue // a subscription confirmation or a pong
				}
				ti, err := c.Get(ctx, queue, id)
				if err != nil {
					return nil, err
				}
				if ended(ti.Status) {
					until = 0 // the ending script removed the registration
					return ti, nil
				}
				continue
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break // renew
			}
			// The connection was lost: go-redis subscribes again on the next receive.
			// A message published meanwhile is lost: register again, which reads the
			// status, after a short pause so a Redis that is gone is not spun on.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			break
		}
	}
}

// ended reports whether s is an end (succeeded, dead, cancelled).
func ended(s Status) bool {
	return s == StatusSucceeded || s == StatusDead || s == StatusCancelled
}
