package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/keys"
)

// scalerResult is one run of the scaler mode.
type scalerResult struct {
	Reps             int     `json:"reps"`
	Queues           int     `json:"queues"`
	Bands            int     `json:"bands"`
	GetmetricsP50MS  float64 `json:"getmetrics_p50_ms"`
	GetmetricsP99MS  float64 `json:"getmetrics_p99_ms"`
	PushReps         int     `json:"push_reps"`
	PushP50MS        float64 `json:"push_p50_ms"`
	PushP99MS        float64 `json:"push_p99_ms"`
	PushMaxMS        float64 `json:"push_max_ms"`
	PushEnqueueP99MS float64 `json:"push_enqueue_p99_ms"`
}

func (r scalerResult) figures() []figure {
	return []figure{
		fig("getmetrics_p50_ms", r.GetmetricsP50MS), fig("getmetrics_p99_ms", r.GetmetricsP99MS),
		fig("push_p50_ms", r.PushP50MS), fig("push_p99_ms", r.PushP99MS), fig("push_max_ms", r.PushMaxMS),
		fig("push_enqueue_p99_ms", r.PushEnqueueP99MS),
	}
}

// runScaler measures a real `dtq scaler` process through KEDA's gRPC client:
// GetMetrics over 10 queues × 10 bands (cache off: each call is a Redis read), and the
// push latency from the XADD of a first task on an idle queue to StreamIsActive
// delivering true.
func runScaler(ctx context.Context, e *benchEnv, o options) (scalerResult, error) {
	reps := o.reps
	if reps == 0 {
		reps = 1000
	}
	prefix := e.prefix()
	defer e.drop(prefix)
	c := e.client(prefix)
	var qs []string
	var seed []client.Task
	for i := 0; i < 10; i++ {
		q := fmt.Sprintf("q%02d", i)
		qs = append(qs, q)
		for p := 0; p < 10; p++ {
			for k := 0; k < 3; k++ {
				seed = append(seed, client.Task{Queue: q, Function: "noop", Priority: p})
			}
		}
	}
	if _, err := c.EnqueueMany(ctx, seed); err != nil {
		return scalerResult{}, err
	}
	grpcPort, err := freePort()
	if err != nil {
		return scalerResult{}, err
	}
	httpPort, err := freePort()
	if err != nil {
		return scalerResult{}, err
	}
	cmd := exec.Command(e.dtq, "scaler")
	cmd.Env = append(os.Environ(), "DTQ_REDIS_URL="+e.url, "DTQ_KEY_PREFIX="+prefix,
		"DTQ_SCALER_ADDR=127.0.0.1:"+strconv.Itoa(grpcPort), "PORT="+strconv.Itoa(httpPort),
		"DTQ_SCALER_CACHE_TTL_MS=0", "DTQ_LOG_LEVEL=error")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return scalerResult{}, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return scalerResult{}, err
	}
	defer conn.Close()
	cli := pb.NewExternalScalerClient(conn)
	ref := &pb.ScaledObjectRef{Name: "bench", Namespace: "bench", ScalerMetadata: map[string]string{
		"queues": strings.Join(qs, ","), "priorities": "all", "targetPerReplica": "16"}}
	var spec *pb.GetMetricSpecResponse
	deadline := time.Now().Add(10 * time.Second)
	for {
		spec, err = cli.GetMetricSpec(ctx, ref)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return scalerResult{}, fmt.Errorf("scaler not answering: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	req := &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: spec.MetricSpecs[0].MetricName}
	lat := make([]float64, 0, reps)
	pr := newProgress("getmetrics", int64(reps))
	for i := 0; i < reps; i++ {
		t0 := time.Now()
		res, err := cli.GetMetrics(ctx, req)
		if err != nil {
			return scalerResult{}, err
		}
		lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		if v := res.MetricValues[0].MetricValue; v != 300 {
			return scalerResult{}, fmt.Errorf("GetMetrics = %d, want 300 (10 queues × 10 bands × 3)", v)
		}
		pr.set(int64(i + 1))
	}
	pr.done()

	// Push: an idle queue; enqueue one task; time until the stream says true. Then the
	// task is consumed (XDEL) and the stream says false again. 200 pushes by default, so
	// that the p99 is not simply the slowest one (the max is reported beside it).
	pushReps := max(reps/5, 20)
	wake := &pb.ScaledObjectRef{Name: "wake", Namespace: "bench", ScalerMetadata: map[string]string{"queues": "wake"}}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cli.StreamIsActive(sctx, wake)
	if err != nil {
		return scalerResult{}, err
	}
	if r, err := stream.Recv(); err != nil || r.Result {
		return scalerResult{}, fmt.Errorf("first push on an idle queue = %v, %v", r, err)
	}
	q := keys.New(prefix).Queue("wake")
	// enq: the producer's own enqueue round trip in the same pushes, to tell a slow
	// scaler from a slow machine
	var push, enq []float64
	for i := 0; i < pushReps; i++ {
		time.Sleep(20 * time.Millisecond) // idle: the scaler's reader is back in its blocking read
		t0 := time.Now()
		id, _, err := c.Enqueue(ctx, client.Task{Queue: "wake", Function: "noop", Priority: 9})
		if err != nil {
			return scalerResult{}, err
		}
		enq = append(enq, float64(time.Since(t0).Microseconds())/1000)
		r, err := stream.Recv()
		if err != nil || !r.Result {
			return scalerResult{}, fmt.Errorf("push after enqueue = %v, %v", r, err)
		}
		push = append(push, float64(time.Since(t0).Microseconds())/1000)
		ti, err := c.Get(ctx, "wake", id)
		if err != nil {
			return scalerResult{}, err
		}
		_ = ti
		entries, err := e.rdb.XRange(ctx, q.Stream(9), "-", "+").Result()
		if err != nil {
			return scalerResult{}, err
		}
		for _, en := range entries {
			e.rdb.XDel(ctx, q.Stream(9), en.ID)
		}
		if r, err := stream.Recv(); err != nil || r.Result {
			return scalerResult{}, fmt.Errorf("push after drain = %v, %v", r, err)
		}
	}
	sort.Float64s(lat)
	sort.Float64s(push)
	sort.Float64s(enq)
	return scalerResult{Reps: reps, Queues: 10, Bands: 10,
		GetmetricsP50MS: round(pct(lat, 0.5), 3), GetmetricsP99MS: round(pct(lat, 0.99), 3),
		PushReps: pushReps, PushP50MS: round(pct(push, 0.5), 3), PushP99MS: round(pct(push, 0.99), 3),
		PushMaxMS: round(push[len(push)-1], 3), PushEnqueueP99MS: round(pct(enq, 0.99), 3)}, nil
}
