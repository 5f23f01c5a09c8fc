package runtime_test

import (
	"context"
	"testing"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/lua"
)

// BenchmarkWorkerNoop is the whole hot path in one process: b.N no-op tasks enqueued,
// then one worker (concurrency 64) runs them all; ns/op is per task.
func BenchmarkWorkerNoop(b *testing.B) {
	e := setupB(b)
	ctx := context.Background()
	var tasks []client.Task
	for i := 0; i < b.N; i++ {
		tasks = append(tasks, client.Task{Queue: "default", Function: "noop"})
	}
	for lo := 0; lo < len(tasks); lo += 1000 {
		if _, err := e.c.EnqueueMany(ctx, tasks[lo:min(lo+1000, len(tasks))]); err != nil {
			b.Fatal(err)
		}
	}
	q := keys.New(e.prefix).Queue("default")
	rec := newRecorder()
	b.ResetTimer()
	r := startWorkerB(b, e, rec)
	for {
		n, err := e.rdb.XLen(ctx, q.Stream(0)).Result()
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		waitTick()
	}
	b.StopTimer()
	r.stop()
}

// BenchmarkEnqueue is one task per call, unpipelined (the Go API's Enqueue).
func BenchmarkEnqueue(b *testing.B) {
	e := setupB(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := e.c.Enqueue(ctx, client.Task{Queue: "default", Function: "noop"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimComplete is the Redis work per task without a worker: claim 32, record 32.
func BenchmarkClaimComplete(b *testing.B) {
	e := setupB(b)
	ctx := context.Background()
	var tasks []client.Task
	for i := 0; i < b.N; i++ {
		tasks = append(tasks, client.Task{Queue: "default", Function: "noop"})
	}
	for lo := 0; lo < len(tasks); lo += 1000 {
		if _, err := e.c.EnqueueMany(ctx, tasks[lo:min(lo+1000, len(tasks))]); err != nil {
			b.Fatal(err)
		}
	}
	q := keys.New(e.prefix).Queue("default")
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		r, err := lua.Claim.Run(ctx, e.rdb, lua.ClaimArgs{Queue: q, Consumer: "b", Want: 32, MaxPayload: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		items := make([]lua.Completion, len(r.Started))
		for i, s := range r.Started {
			items[i] = lua.Completion{ID: s.ID, Entry: s.Entry, Band: s.Band, Attempt: s.Attempt, Unique: s.HasUnique, Outcome: lua.Succeeded}
		}
		if _, err := lua.Complete.Run(ctx, e.rdb, lua.CompleteArgs{Queue: q, NowMS: 0, KeepMS: 60000, Items: items}); err != nil {
			b.Fatal(err)
		}
		done += len(r.Started)
	}
}

// BenchmarkEnqueueMany is the pipelined enqueue of b.N tasks in batches of 1000.
func BenchmarkEnqueueMany(b *testing.B) {
	e := setupB(b)
	ctx := context.Background()
	tasks := make([]client.Task, 1000)
	for i := range tasks {
		tasks[i] = client.Task{Queue: "default", Function: "noop"}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += len(tasks) {
		if _, err := e.c.EnqueueMany(ctx, tasks[:min(len(tasks), b.N-done)]); err != nil {
			b.Fatal(err)
		}
	}
}
