// Package blockread is dtq's one interruptible blocking read of Redis streams: the
// worker's idle XREADGROUP and the scaler's push XREAD both block through a Reader.
//
// On a single node a Reader blocks on a dedicated connection whose CLIENT ID it knows,
// so ending the read's context sends CLIENT UNBLOCK and the read returns at once,
// however long its block. Where that cannot work it blocks on the client's pool
// instead, no longer than a short block, so an ended context is noticed within it:
//
//   - on a cluster (a *redis.ClusterClient, or any client but *redis.Client): one
//     connection cannot reach every node;
//   - once the server refused CLIENT ID or CLIENT UNBLOCK (an ACL without them, a
//     proxy, an embedded server): from then on, for good.
//
// A nil reply (redis.Nil: nothing arrived within the block) is no error: the read
// returns no streams and a nil error. A read whose context ended before entries came
// returns no streams and the context's error. An error on the dedicated connection
// closes it; the next read opens another (with a new CLIENT ID).
package blockread

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultShortBlock = 500 * time.Millisecond
	DefaultTimeout    = 500 * time.Millisecond
)

// Options tune a Reader; the zero value takes the defaults.
type Options struct {
	// ShortBlock bounds every block that nothing can interrupt: on a cluster, and after
	// the server refused CLIENT ID or CLIENT UNBLOCK. 0: DefaultShortBlock.
	ShortBlock time.Duration
	// Timeout bounds the CLIENT ID of a new connection and each CLIENT UNBLOCK.
	// 0: DefaultTimeout.
	Timeout time.Duration
}

// Reader reads streams with a block that its context interrupts. One read runs at a
// time: a read started while another runs waits for it.
type Reader struct {
	rdb     redis.UniversalClient
	short   time.Duration
	timeout time.Duration

	// single is the client of the dedicated connection; nil on a cluster and once the
	// server refused the CLIENT commands.
	single atomic.Pointer[redis.Client]

	readMu sync.Mutex // held by a read, and by Close; guards conn and id
	conn   *redis.Conn
	id     int64
}

// New returns a Reader over rdb. It opens nothing: the first read does.
func New(rdb redis.UniversalClient, o Options) *Reader {
	if o.ShortBlock <= 0 {
		o.ShortBlock = DefaultShortBlock
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	r := &Reader{rdb: rdb, short: o.ShortBlock, timeout: o.Timeout}
	if c, ok := rdb.(*redis.Client); ok {
		r.single.Store(c)
	}
	return r
}

// Interruptible reports whether reads block on the dedicated connection, which an
// ended context interrupts at once: true on a single node until the server refused
// the CLIENT commands, false on a cluster. When false, each read spans one node (one
// hash slot on a cluster) and blocks at most the short block.
func (r *Reader) Interruptible() bool { return r.single.Load() != nil }

// XReadGroup is XREADGROUP with a.Block as the block (see XRead).
func (r *Reader) XReadGroup(ctx context.Context, a *redis.XReadGroupArgs) ([]redis.XStream, error) {
	args := *a
	return r.read(ctx, args.Block, func(ctx context.Context, c redis.Cmdable, block time.Duration) ([]redis.XStream, error) {
		args.Block = block
		return c.XReadGroup(ctx, &args).Result()
	})
}

// XRead is XREAD with a.Block as the block: 0 blocks until an entry comes or ctx ends
// (on the pool: at most the short block), a negative block does not block.
//
// It returns the streams read; none and a nil error when the block ran out; none and
// ctx's error when ctx ended first (before the read was sent, or during it). A read
// that got its entries as ctx ended returns them: the caller decides what to do with
// them.
func (r *Reader) XRead(ctx context.Context, a *redis.XReadArgs) ([]redis.XStream, error) {
	args := *a
	return r.read(ctx, args.Block, func(ctx context.Context, c redis.Cmdable, block time.Duration) ([]redis.XStream, error) {
		args.Block = block
		return c.XRead(ctx, &args).Result()
	})
}

type readFunc func(ctx context.Context, c redis.Cmdable, block time.Duration) ([]redis.XStream, error)

func (r *Reader) read(ctx context.Context, block time.Duration, do readFunc) ([]redis.XStream, error) {
	r.readMu.Lock()
	defer r.readMu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if block > 0 && block < time.Millisecond {
		block = time.Millisecond // BLOCK counts whole milliseconds, and 0 is forever
	}
	single := r.single.Load()
	if single == nil {
		return settle(ctx)(do(ctx, r.rdb, r.shorten(block)))
	}
	conn, id, err := r.connection(ctx, single)
	if err != nil {
		if ctx.Err() == nil && refused(err) {
			r.single.Store(nil)
			return settle(ctx)(do(ctx, r.rdb, r.shorten(block)))
		}
		return settle(ctx)(nil, err)
	}
	// An ended ctx interrupts the read; the read waits for the interruption to be over,
	// so no CLIENT UNBLOCK of it can reach a later read on the same connection.
	ended := make(chan struct{})
	interrupted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(interrupted)
		r.interrupt(id, ended)
	})
	res, err := do(context.WithoutCancel(ctx), conn, block)
	close(ended)
	if !stop() {
		<-interrupted
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		r.resetLocked()
	}
	return settle(ctx)(res, err)
}

// shorten bounds a block nothing can interrupt.
func (r *Reader) shorten(block time.Duration) time.Duration {
	if block < 0 {
		return block
	}
	if block == 0 || block > r.short {
		return r.short
	}
	return block
}

// settle gives a read's answer: a nil reply is no streams and no error; no streams
// once ctx ended (an interrupted block, or go-redis giving up on the ended ctx) is ctx's
// error.
func settle(ctx context.Context) func([]redis.XStream, error) ([]redis.XStream, error) {
	return func(res []redis.XStream, err error) ([]redis.XStream, error) {
		if errors.Is(err, redis.Nil) {
			res, err = nil, nil
		}
		if len(res) == 0 && ctx.Err() != nil &&
			(err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return nil, ctx.Err()
		}
		return res, err
	}
}

// connection returns the dedicated connection and its CLIENT ID, opening it if need
// be. The one round trip that learns the id also checks that CLIENT UNBLOCK is allowed
// (of client 0, which does not exist), so a server that would refuse the interruption
// is found before a read relies on it.
func (r *Reader) connection(ctx context.Context, single *redis.Client) (*redis.Conn, int64, error) {
	if r.conn != nil {
		return r.conn, r.id, nil
	}
	conn := single.Conn()
	conn.AddHook(sendOnce{})
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var id *redis.IntCmd
	_, err := conn.Pipelined(cctx, func(p redis.Pipeliner) error {
		id = p.ClientID(cctx)
		p.ClientUnblock(cctx, 0)
		return nil
	})
	if err != nil {
		_ = conn.Close()
		return nil, 0, err
	}
	r.conn, r.id = conn, id.Val()
	return r.conn, r.id, nil
}

// sendOnce marks each command of the dedicated connection not to be resent (see the
// package's doc): innermost of the connection's hooks, so the caller's hooks see the
// command itself.
type sendOnce struct{}

func (sendOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (sendOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return next(ctx, onceCmd{cmd}) }
}

func (sendOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// onceCmd is a command go-redis does not resend; the reply is read into the command
// it wraps.
type onceCmd struct{ redis.Cmder }

func (onceCmd) NoRetry() bool { return true }

// interrupt sends CLIENT UNBLOCK to connection id until the read on it has ended (it
// may not have reached the server yet) or the server unblocked it.
func (r *Reader) interrupt(id int64, ended <-chan struct{}) {
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-ended:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		n, err := r.rdb.ClientUnblock(ctx, id).Result()
		cancel()
		if n == 1 || (err != nil && refused(err)) {
			return // unblocked; or refused, and the read ends with its block
		}
		pause.Reset(time.Millisecond)
		select {
		case <-ended:
			return
		case <-pause.C:
		}
	}
}

// Close releases the dedicated connection, after the read under way if any; a later
// read opens another.
func (r *Reader) Close() {
	r.readMu.Lock()
	defer r.readMu.Unlock()
	r.resetLocked()
}

func (r *Reader) resetLocked() {
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn, r.id = nil, 0
	}
}

// refused reports whether err is an error reply of the server that says no (NOPERM,
// an unknown command), not one saying it cannot answer yet.
func refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return false
	}
	code, _, _ := strings.Cut(re.Error(), " ")
	switch code {
	case "LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY":
		return false
	}
	return true
}
