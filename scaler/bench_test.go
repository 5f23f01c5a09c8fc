package scaler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
)

// seedGrid puts entries on every band of n queues (some delivered) and returns the
// trigger watching them all.
func seedGrid(b *testing.B, f *fixture, n int) *pb.ScaledObjectRef {
	s := f.seed(b)
	var qs []string
	for i := 0; i < n; i++ {
		q := fmt.Sprintf("bench%02d", i)
		qs = append(qs, q)
		for p := 0; p < 10; p++ {
			s.add(q, p, 3)
			s.deliver(q, p, 1)
		}
	}
	return ref("queues", strings.Join(qs, ","), "scheduledLead", "30s")
}

// BenchmarkGetMetrics10x10 is one KEDA poll's GetMetrics over 10 queues × 10 bands
// through gRPC, with the cache off: every call is a pipelined Redis read.
func BenchmarkGetMetrics10x10(b *testing.B) {
	f := setup(b, nil, nil)
	r := seedGrid(b, f, 10)
	req := &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: ParseMust(r).Metrics()[0].Name}
	ctx := context.Background()
	for b.Loop() {
		res, err := f.cli.GetMetrics(ctx, req)
		if err != nil || res.MetricValues[0].MetricValue != 10*10*3 {
			b.Fatalf("GetMetrics = %v, %v", res, err)
		}
	}
}

// BenchmarkGetMetrics10x10Cached is the same poll answered from the cache (the
// IsActive that follows every GetMetrics, and every other ScaledObject on these queues).
func BenchmarkGetMetrics10x10Cached(b *testing.B) {
	f := setup(b, nil, func(c *Config) { c.CacheTTL = time.Minute })
	r := seedGrid(b, f, 10)
	req := &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: ParseMust(r).Metrics()[0].Name}
	ctx := context.Background()
	for b.Loop() {
		if _, err := f.cli.GetMetrics(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPushLatency is the time from XADD of the first task on an idle queue to the
// StreamIsActive client receiving true.
func BenchmarkPushLatency(b *testing.B) {
	f := setup(b, nil, func(c *Config) { c.PushPoll = time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := f.cli.StreamIsActive(ctx, ref("queues", "wake"))
	if err != nil {
		b.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.Result {
		b.Fatalf("first = %v, %v", r, err)
	}
	s := f.seed(b)
	blocked := make(chan struct{}, 1)
	hook := func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	f.s.watch.beforeBlock.Store(&hook)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Idle: the watcher is in (or entering) its blocking read.
		b.StopTimer()
		<-blocked
		b.StartTimer()
		ids := s.add("wake", 9, 1)
		if r, err := stream.Recv(); err != nil || !r.Result {
			b.Fatalf("after XADD = %v, %v", r, err)
		}
		b.StopTimer()
		f.c.XDel(ctx, f.ks.Queue("wake").Stream(9), ids...)
		if r, err := stream.Recv(); err != nil || r.Result {
			b.Fatalf("after XDEL = %v, %v", r, err)
		}
	}
}

// ParseMust parses a ref's metadata for benchmarks.
func ParseMust(r *pb.ScaledObjectRef) Metadata {
	m, err := ParseMetadata(r.ScalerMetadata)
	if err != nil {
		panic(err)
	}
	return m
}

// flood sends n GetMetrics calls, each naming 256 made-up queues, as an unauthenticated
// caller can; their answers (all zero) are checked, so a flood that fails fails the
// caller.
func flood(tb testing.TB, f *fixture, n int) {
	tb.Helper()
	for i := 0; i < n; i++ {
		qs := make([]string, 256)
		for j := range qs {
			qs[j] = fmt.Sprintf("junk-%d-%d", i, j)
		}
		r := ref("queues", strings.Join(qs, ","))
		res, err := f.cli.GetMetrics(context.Background(), &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: ParseMust(r).Metrics()[0].Name})
		if err != nil || res.MetricValues[0].MetricValue != 0 {
			tb.Fatalf("flood GetMetrics = %v, %v", res, err)
		}
	}
}

// BenchmarkGetMetrics10x10Flooded is BenchmarkGetMetrics10x10 after 20 callers named
// 256 made-up queues each.
func BenchmarkGetMetrics10x10Flooded(b *testing.B) {
	f := setup(b, nil, nil)
	r := seedGrid(b, f, 10)
	req := &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: ParseMust(r).Metrics()[0].Name}
	ctx := context.Background()
	if _, err := f.cli.GetMetrics(ctx, req); err != nil {
		b.Fatal(err)
	}
	flood(b, f, 20)
	for b.Loop() {
		res, err := f.cli.GetMetrics(ctx, req)
		if err != nil || res.MetricValues[0].MetricValue != 10*10*3 {
			b.Fatalf("GetMetrics = %v, %v", res, err)
		}
	}
}
