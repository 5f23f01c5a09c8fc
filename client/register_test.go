package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
)

// A client adds the queues it enqueues to the queue set again every RegisterEvery, so
// a set lost under it heals (it used to add each queue once in the client's life).
func TestQueueSetHealsFromTheProducer(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.Prefix(t)
	var mu sync.Mutex
	now := time.Now()
	c := client.New(rdb, client.Options{Prefix: prefix, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	ctx := context.Background()
	set := keys.New(prefix).Queues()
	enqueue := func() {
		t.Helper()
		if _, err := c.EnqueueMany(ctx, []client.Task{{Queue: "mail", Function: "noop"}}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Enqueue(ctx, client.Task{Queue: "sms", Function: "noop"}); err != nil {
			t.Fatal(err)
		}
	}
	enqueue()
	if n := rdb.SCard(ctx, set).Val(); n != 2 {
		t.Fatalf("queue set holds %d, want 2", n)
	}
	rdb.Del(ctx, set)
	enqueue() // within RegisterEvery: no round trip spent on the set
	if n := rdb.SCard(ctx, set).Val(); n != 0 {
		t.Fatalf("queue set holds %d within RegisterEvery, want 0 (one SADD per queue per period)", n)
	}
	mu.Lock()
	now = now.Add(client.RegisterEvery)
	mu.Unlock()
	enqueue()
	if got := rdb.SMembers(ctx, set).Val(); len(got) != 2 {
		t.Fatalf("queue set after RegisterEvery = %v, want both queues back", got)
	}
}
