package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/internal/keys"
)

// blocker owns the connection of the idle blocking read. On a single node it is a
// dedicated connection whose CLIENT ID lets a drain CLIENT UNBLOCK it at once, so an
// idle worker exits promptly however long the block.
type blocker struct {
	rdb    redis.UniversalClient
	single *redis.Client

	mu   sync.Mutex
	conn *redis.Conn
	id   int64
}

func newBlocker(rdb redis.UniversalClient) *blocker {
	b := &blocker{rdb: rdb}
	if c, ok := rdb.(*redis.Client); ok {
		b.single = c
	}
	return b
}

func (b *blocker) read(ctx context.Context, consumer string, streams []string, block time.Duration) ([]redis.XStream, error) {
	ids := make([]string, len(streams))
	for i := range ids {
		ids[i] = ">"
	}
	args := &redis.XReadGroupArgs{Group: keys.Group, Consumer: consumer, Streams: append(streams, ids...), Count: 1, Block: block}
	if b.single == nil {
		args.Block = min(block, 500*time.Millisecond) // no CLIENT UNBLOCK across a cluster's nodes
		res, err := b.rdb.XReadGroup(ctx, args).Result()
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return res, err
	}
	conn, err := b.connection(ctx)
	if err != nil {
		if ctx.Err() == nil && isRedisError(err) {
			// The server refuses CLIENT ID (an ACL without it, a proxy, an embedded
			// server): block on the pool with a short block instead, as on a cluster.
			b.mu.Lock()
			b.single = nil
			b.mu.Unlock()
			return b.read(ctx, consumer, streams, block)
		}
		return nil, err
	}
	res, err := conn.XReadGroup(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		b.reset() // a broken connection gets a new one (and a new CLIENT ID)
	}
	return res, err
}

// isRedisError reports whether err is an error reply from the server (not a network
// or context error).
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func (b *blocker) connection(ctx context.Context) (*redis.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		return b.conn, nil
	}
	conn := b.single.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	b.conn, b.id = conn, id
	return conn, nil
}

func (b *blocker) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		_ = b.conn.Close()
		b.conn, b.id = nil, 0
	}
}

// unblockUntil sends CLIENT UNBLOCK to the blocked read until done is closed.
func (b *blocker) unblockUntil(done <-chan struct{}) {
	for {
		b.mu.Lock()
		id := b.id
		b.mu.Unlock()
		if id != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			_ = b.rdb.ClientUnblock(ctx, id).Err()
			cancel()
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (b *blocker) close() { b.reset() }
