package client_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dtq/dtq/client"
)

// Enqueue a task, as README shows it (compiled, not run: it needs a Redis).
func ExampleClient_Enqueue() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	body, userID := []byte(`{"to":"a@b.c"}`), "42"

	c := client.New(rdb, client.Options{})
	id, created, err := c.Enqueue(ctx, client.Task{Queue: "emails", Function: "send", Payload: body,
		Priority: 9, MaxRetries: client.Retries(5), Timeout: 30 * time.Second, Unique: "welcome:" + userID})
	fmt.Println(id, created, err)
}
