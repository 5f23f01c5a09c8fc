package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply of Redis.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// A reply to one command while Redis refuses the worker's own (an ACL user's PING
// answered, its EVALSHA refused) is not the answer Run waits for: it says "started"
// once the refusal healed, and never when it became final.
func TestAwaitRedisWaitsOutARefusal(t *testing.T) {
	ctx := context.Background()
	noperm := replyError("NOPERM this user has no permissions to run the 'evalsha' command")
	for _, heal := range []bool{false, true} {
		pw := newPassWorker(t, "default", "DTQ_REDIS_FATAL_AFTER_S", "0.3")
		w := pw.Worker
		w.redis.Observe(redis.NewStatusCmd(ctx, "ping"), nil)
		w.redis.Observe(redis.NewCmd(ctx, "evalsha"), noperm)
		if !w.redis.Refusing() {
			t.Fatal("the refused EVALSHA left no refusal under way")
		}
		if heal {
			go func() {
				time.Sleep(20 * time.Millisecond)
				w.redis.Observe(redis.NewCmd(ctx, "evalsha"), nil)
			}()
		}
		got := w.awaitRedis(ctx)
		if got != heal {
			t.Fatalf("heal %v: awaitRedis = %v", heal, got)
		}
		if !heal && w.redis.Err() == nil {
			t.Fatal("awaitRedis returned before the refusal was final")
		}
	}
}
