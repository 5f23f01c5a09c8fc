package scaler

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

type fixture struct {
	s   *Scaler
	c   *redis.Client
	ks  keys.Space
	cli pb.ExternalScalerClient
	cc  *grpc.ClientConn
	cfg Config
}

func testConfig(prefix string) Config {
	return Config{RedisURL: "redis://unused", LogFormat: "text", LogLevel: "info", KeyPrefix: prefix, RedisTimeout: 2 * time.Second, CacheTTL: 0, PushPoll: 10 * time.Millisecond,
		PushMaxBlock: 2 * time.Second, ShutdownTimeout: 5 * time.Second, Addr: "127.0.0.1:0", MaxQueues: 1024}
}

// setup starts a scaler over srv (the shared server when nil) on loopback listeners
// and a gRPC client of it; both stop when t ends.
func setup(t testing.TB, srv *redistest.Server, tweak func(*Config)) *fixture {
	t.Helper()
	if srv == nil {
		srv = redistest.Shared(t)
	}
	prefix := redistest.Prefix(t)
	cfg := testConfig(prefix)
	if tweak != nil {
		tweak(&cfg)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	f := serve(t, c, cfg)
	f.c = c
	return f
}

// serve starts a scaler of cfg over c on loopback listeners and a gRPC client of it;
// both stop when t ends.
func serve(t testing.TB, c redis.UniversalClient, cfg Config) *fixture {
	t.Helper()
	return serveWith(t, c, cfg, Options{})
}

// serveWith is serve with options (a clock).
func serveWith(t testing.TB, c redis.UniversalClient, cfg Config, o Options) *fixture {
	t.Helper()
	s, err := New(cfg, c, o)
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(gl, hl)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &fixture{s: s, ks: keys.New(cfg.KeyPrefix), cli: pb.NewExternalScalerClient(cc), cc: cc, cfg: cfg}
}

func ref(kv ...string) *pb.ScaledObjectRef {
	md := map[string]string{"scalerAddress": "dtq-scaler:6000"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	return &pb.ScaledObjectRef{Name: "workers", Namespace: "default", ScalerMetadata: md}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// seed writes Redis state as workers and producers leave it.
type seed struct {
	t  testing.TB
	c  redis.UniversalClient
	ks keys.Space
}

func (f *fixture) seed(t testing.TB) seed { return seed{t, f.c, f.ks} }

func (s seed) add(queue string, band, n int) []string {
	s.t.Helper()
	ctx := context.Background()
	stream := s.ks.Queue(queue).Stream(band)
	_ = s.c.XGroupCreateMkStream(ctx, stream, keys.Group, "0").Err() // exists already is fine
	var ids []string
	for i := 0; i < n; i++ {
		id, err := s.c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"task", "t", "attempt", 0}}).Result()
		if err != nil {
			s.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func (s seed) deliver(queue string, band, n int) []string {
	s.t.Helper()
	res, err := s.c.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w",
		Streams: []string{s.ks.Queue(queue).Stream(band), ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	return ids
}

func (s seed) finish(queue string, band int, ids ...string) {
	s.t.Helper()
	stream := s.ks.Queue(queue).Stream(band)
	if err := s.c.XAck(context.Background(), stream, keys.Group, ids...).Err(); err != nil {
		s.t.Fatal(err)
	}
	if err := s.c.XDel(context.Background(), stream, ids...).Err(); err != nil {
		s.t.Fatal(err)
	}
}

func (s seed) schedule(queue string, due time.Time, id string) {
	s.t.Helper()
	if err := s.c.ZAdd(context.Background(), s.ks.Queue(queue).Schedule(), redis.Z{Score: float64(due.UnixMilli()), Member: id}).Err(); err != nil {
		s.t.Fatal(err)
	}
}

func metricValues(t *testing.T, f *fixture, r *pb.ScaledObjectRef) map[string]float64 {
	t.Helper()
	spec, err := f.cli.GetMetricSpec(ctxT(t), r)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, ms := range spec.MetricSpecs {
		res, err := f.cli.GetMetrics(ctxT(t), &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: ms.MetricName})
		if err != nil {
			t.Fatalf("GetMetrics %s: %v", ms.MetricName, err)
		}
		if len(res.MetricValues) != 1 || res.MetricValues[0].MetricName != ms.MetricName {
			t.Fatalf("GetMetrics %s = %v", ms.MetricName, res.MetricValues)
		}
		v := res.MetricValues[0]
		if v.MetricValueFloat != float64(v.MetricValue) {
			t.Fatalf("GetMetrics %s: float %v, int %d", ms.MetricName, v.MetricValueFloat, v.MetricValue)
		}
		out[ms.MetricName] = v.MetricValueFloat
	}
	return out
}

func TestGetMetricSpec(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	res, err := f.cli.GetMetricSpec(ctxT(t), ref("queues", "default", "targetPerReplica", "2.5", "bandTargets", "9-8:0.5"))
	if err != nil {
		t.Fatal(err)
	}
	got := res.MetricSpecs
	if len(got) != 2 || got[0].MetricName != "dtq-default" || got[0].TargetSizeFloat != 2.5 || got[0].TargetSize != 3 ||
		got[1].MetricName != "dtq-default-p9-8" || got[1].TargetSizeFloat != 0.5 {
		t.Errorf("specs = %v", got)
	}
}

func TestGetMetricsMatchesTheQueues(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	s := f.seed(t)
	// emails: band 9 — 4 added, 2 delivered, 1 of them done: lag 2, pending 1.
	ids := s.add("emails", 9, 4)
	s.finish("emails", 9, s.deliver("emails", 9, 2)[:1]...)
	_ = ids
	// emails: band 5 — 3 undelivered. band 2 — 7, not watched.
	s.add("emails", 5, 3)
	s.add("emails", 2, 7)
	// reports: band 8 — 2 delivered (pending), 1 undelivered.
	s.add("reports", 8, 3)
	s.deliver("reports", 8, 2)
	// scheduled: one due, one due within a minute, one in an hour.
	now := time.Now()
	s.schedule("emails", now.Add(-time.Second), "due")
	s.schedule("reports", now.Add(30*time.Second), "soon")
	s.schedule("reports", now.Add(time.Hour), "later")

	r := ref("queues", "emails,reports,missing", "priorities", "9-5", "bandTargets", "9-8:1", "scheduledLead", "1m")
	got := metricValues(t, f, r)
	want := map[string]float64{
		"dtq-emails-reports-missing":      2 + 1 + 3 + 1 + 2 + 1 + 1, // lag+pending of 9..5, plus 2 due within the lead
		"dtq-emails-reports-missing-p9-8": 2 + 1 + 1 + 2,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}

	// Without pending and scheduled: lag alone.
	r2 := ref("queues", "emails,reports", "includePending", "false", "includeScheduled", "false")
	if got := metricValues(t, f, r2)["dtq-emails-reports"]; got != 2+3+7+1 {
		t.Errorf("lag only = %v, want 13", got)
	}
}

func TestNonexistentQueueIsZeroAndInactive(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	r := ref("queues", "never-used")
	if v := metricValues(t, f, r)["dtq-never-used"]; v != 0 {
		t.Errorf("value = %v, want 0", v)
	}
	act, err := f.cli.IsActive(ctxT(t), r)
	if err != nil || act.Result {
		t.Errorf("IsActive = %v, %v; want false", act, err)
	}
}

func TestIsActiveOnOneMessage(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	r := ref("queues", "one")
	act, err := f.cli.IsActive(ctxT(t), r)
	if err != nil || act.Result {
		t.Fatalf("IsActive on an empty queue = %v, %v", act, err)
	}
	f.seed(t).add("one", 0, 1)
	if act, err = f.cli.IsActive(ctxT(t), r); err != nil || !act.Result {
		t.Fatalf("IsActive after one XADD = %v, %v; want true", act, err)
	}
	r = ref("queues", "one", "activationThreshold", "1")
	if act, err = f.cli.IsActive(ctxT(t), r); err != nil || act.Result {
		t.Fatalf("IsActive with threshold 1 and one message = %v, %v; want false", act, err)
	}
}

func TestBadMetadataIsInvalidArgument(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	bad := ref("queues", "q", "targetPerReplica", "0")
	check := func(name string, err error, key string) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), key) {
			t.Errorf("%s: %v, want InvalidArgument naming %s", name, err, key)
			return
		}
		var field string
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.FieldViolations) > 0 {
				field = br.FieldViolations[0].Field
			}
		}
		if field != key {
			t.Errorf("%s: BadRequest field %q, want %q", name, field, key)
		}
	}
	_, err := f.cli.GetMetricSpec(ctxT(t), bad)
	check("GetMetricSpec", err, "targetPerReplica")
	_, err = f.cli.GetMetrics(ctxT(t), &pb.GetMetricsRequest{ScaledObjectRef: ref("queues", "q", "bogus", "1"), MetricName: "dtq-q"})
	check("GetMetrics", err, "bogus")
	_, err = f.cli.IsActive(ctxT(t), ref("priorities", "9"))
	check("IsActive", err, "queues")
	stream, err := f.cli.StreamIsActive(ctxT(t), bad)
	if err == nil {
		_, err = stream.Recv()
	}
	check("StreamIsActive", err, "targetPerReplica")

	_, err = f.cli.GetMetrics(ctxT(t), &pb.GetMetricsRequest{ScaledObjectRef: ref("queues", "q"), MetricName: "dtq-other"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "metricName") {
		t.Errorf("unknown metric: %v, want InvalidArgument naming metricName", err)
	}
}

// grepLines is the lines of text that start with prefix.
func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// recvUntil reads the stream until it sends want; it fails when the stream ends first.
func recvUntil(t *testing.T, s grpc.ServerStreamingClient[pb.IsActiveResponse], want bool) {
	t.Helper()
	for {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("stream ended waiting for %v: %v", want, err)
		}
		if r.Result == want {
			return
		}
	}
}

func TestStreamIsActivePushes(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	s := f.seed(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := f.cli.StreamIsActive(ctx, ref("queues", "push", "priorities", "9-5"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.Result {
		t.Fatalf("first message = %v, %v; want false at once", first, err)
	}
	s.add("push", 2, 1) // a band not watched: no message
	ids := s.add("push", 7, 1)
	r, err := stream.Recv()
	if err != nil || !r.Result {
		t.Fatalf("after the first task: %v, %v; want true", r, err)
	}
	// The push woken by that entry is timed (the unwatched band's entry woke nothing).
	if m := scrape(t, f); !strings.Contains(m, "\ndtq_scaler_push_seconds_count 1\n") {
		t.Errorf("/metrics lacks one timed push:\n%s", grepLines(m, "dtq_scaler_push_seconds"))
	}
	s.finish("push", 7, s.deliver("push", 7, 1)...)
	_ = ids
	r, err = stream.Recv()
	if err != nil || r.Result {
		t.Fatalf("after the backlog drained: %v, %v; want false", r, err)
	}
	// Due scheduled work wakes it too, at its due time.
	s.schedule("push", time.Now().Add(50*time.Millisecond), "delayed")
	recvUntil(t, stream, true)
}

func TestStreamIsActiveManyClientsOneReader(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	s := f.seed(t)
	var streams []grpc.ServerStreamingClient[pb.IsActiveResponse]
	for i := 0; i < 20; i++ {
		q := []string{"m1", "m2"}[i%2]
		st, err := f.cli.StreamIsActive(ctxT(t), ref("queues", q))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := st.Recv(); err != nil || r.Result {
			t.Fatalf("stream %d first message: %v, %v", i, r, err)
		}
		streams = append(streams, st)
	}
	s.add("m2", 3, 1)
	for i := 1; i < len(streams); i += 2 {
		recvUntil(t, streams[i], true)
	}
	s.add("m1", 3, 1)
	for i := 0; i < len(streams); i += 2 {
		recvUntil(t, streams[i], true)
	}
}

func TestStreamsEndCleanlyOnStop(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	active, err := f.cli.StreamIsActive(ctxT(t), ref("queues", "stop"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := active.Recv(); err != nil {
		t.Fatal(err)
	}
	specs, err := f.cli.StreamMetricSpec(ctxT(t), ref("queues", "stop"))
	if err != nil {
		t.Fatal(err)
	}
	sp, err := specs.Recv()
	if err != nil || len(sp.MetricSpecs) != 1 || sp.MetricSpecs[0].MetricName != "dtq-stop" {
		t.Fatalf("StreamMetricSpec first message = %v, %v", sp, err)
	}
	_ = f.s.Stop(context.Background())
	if _, err := active.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("StreamIsActive after Stop: %v, want io.EOF (a nil return)", err)
	}
	if _, err := specs.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("StreamMetricSpec after Stop: %v, want io.EOF", err)
	}
	_ = f.s.Stop(context.Background()) // twice is fine
}

func TestClientGoingAwayLeavesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	gone := make(chan struct{}, 5)
	hook := func() { gone <- struct{}{} }
	f.s.watch.afterUnsubscribe.Store(&hook)
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(ctxT(t))
		st, err := f.cli.StreamIsActive(ctx, ref("queues", "gone"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	for i := 0; i < 5; i++ {
		select {
		case <-gone:
		case <-ctxT(t).Done():
			t.Fatalf("%d of 5 cancelled streams left their subscription", 5-i)
		}
	}
	if n := f.s.watch.count(); n != 0 {
		t.Errorf("%d subscriptions left", n)
	}
}

func TestCoalescedReads(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, func(c *Config) { c.CacheTTL = time.Minute })
	var mu sync.Mutex
	reads := 0
	obs := f.s.sig.observe
	f.s.sig.mu.Lock()
	f.s.sig.observe = func(d time.Duration, err error) {
		mu.Lock()
		reads++
		mu.Unlock()
		obs(d, err)
	}
	f.s.sig.mu.Unlock()
	f.seed(t).add("hot", 9, 3)
	r := ref("queues", "hot")
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.cli.GetMetrics(context.Background(), &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: "dtq-hot"})
			if err == nil && res.MetricValues[0].MetricValue != 3 {
				err = errors.New("wrong value")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if reads < 1 || reads > 2 {
		t.Errorf("50 concurrent polls made %d Redis reads, want 1 (2 if one was already running)", reads)
	}
}

func TestReplicasAgree(t *testing.T) {
	t.Parallel()
	a := setup(t, nil, nil)
	srv := redistest.Shared(t)
	c2 := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c2.Close() })
	b, err := New(a.cfg, c2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	b.Serve(gl, nil)
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	cc, _ := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	t.Cleanup(func() { _ = cc.Close() })
	s := a.seed(t)
	s.add("shared", 4, 5)
	s.deliver("shared", 4, 2)
	r := ref("queues", "shared", "bandTargets", "4:1")
	va := metricValues(t, a, r)
	vb := metricValues(t, &fixture{cli: pb.NewExternalScalerClient(cc)}, r)
	if len(va) != 2 || va["dtq-shared"] != 5 || va["dtq-shared-p4"] != 5 {
		t.Errorf("replica a: %v", va)
	}
	for k, v := range va {
		if vb[k] != v {
			t.Errorf("%s: replica a %v, replica b %v", k, v, vb[k])
		}
	}
}

func TestRedisDownThenBack(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	f := setup(t, srv, func(c *Config) { c.RedisTimeout = 500 * time.Millisecond })
	s := f.seed(t)
	s.add("q", 1, 2)
	r := ref("queues", "q")
	stream, err := f.cli.StreamIsActive(ctxT(t), r)
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, stream, true)

	passes := make(chan error, 100)
	hook := func(err error) {
		select {
		case passes <- err:
		default:
		}
	}
	f.s.watch.afterPass.Store(&hook)

	srv.Kill()
	_, err = f.cli.GetMetrics(ctxT(t), &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: "dtq-q"})
	st := status.Convert(err)
	reason := ""
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			reason = ei.Reason
		}
	}
	if st.Code() != codes.Unavailable || (reason != ReasonRedisUnavailable && reason != ReasonRedisTimeout) {
		t.Fatalf("GetMetrics with Redis down: %v (reason %q), want Unavailable with a Redis reason", err, reason)
	}
	// The push loop fails, and keeps the stream open.
	for err := range passes {
		if err != nil {
			break
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.Ping(ctxT(t), f.c); err != nil {
		t.Fatal(err)
	}
	// Same values as before (AOF), and a drain is pushed on the same stream.
	for {
		res, err := f.cli.GetMetrics(ctxT(t), &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: "dtq-q"})
		if err == nil {
			if res.MetricValues[0].MetricValue != 2 {
				t.Fatalf("after restart: %v, want 2", res.MetricValues[0])
			}
			break
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("after restart: %v", err)
		}
	}
	s.finish("q", 1, s.deliver("q", 1, 2)...)
	recvUntil(t, stream, false)
}

func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	s := f.seed(t)
	s.add("web", 9, 3)
	s.deliver("web", 9, 1)
	s.schedule("web", time.Now().Add(-time.Minute), "late")
	f.c.ZAdd(context.Background(), f.ks.Queue("web").Dead(), redis.Z{Score: 1, Member: "x"})
	f.c.SAdd(context.Background(), f.ks.Queues(), "web")
	// a concurrency limit of 1: of the backlog of 3, 2 wait for the limit
	f.c.HSet(context.Background(), f.ks.Queue("web").Limits(), "", "conc=1")
	f.c.SAdd(context.Background(), f.ks.Workers(), "w1")
	f.c.HSet(context.Background(), f.ks.Worker("w1"), "worker_id", "w1", "status", "busy",
		"last_heartbeat", time.Now().UnixMilli(), "heartbeat_interval_ms", 5000)
	f.s.probeOnce(context.Background())

	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get("http://" + f.s.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d %s", code, body)
	}
	_, body := get("/metrics")
	for _, line := range []string{
		`dtq_queue_lag{priority="9",queue="web"} 2`,
		`dtq_queue_pending{priority="9",queue="web"} 1`,
		`dtq_queue_lag{priority="0",queue="web"} 0`,
		`dtq_queue_scheduled_due{queue="web"} 1`,
		`dtq_queue_dead{queue="web"} 1`,
		`dtq_scaler_limited_backlog{queue="web"} 2`,
		`dtq_workers{liveness="live"} 1`,
		`dtq_workers{liveness="stale"} 0`,
		`dtq_scaler_redis_up 1`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}

	hc := healthpb.NewHealthClient(f.cc)
	res, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: ServiceName})
	if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of %s = %v, %v", ServiceName, res, err)
	}
	_ = f.s.Stop(context.Background())
	if f.s.ready.Load() {
		t.Error("ready after Stop")
	}
}

func TestStartStopStress(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	for i := 0; i < 20; i++ {
		s, err := New(testConfig(redistest.Prefix(t)), c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		gl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.Serve(gl, nil)
		if i%2 == 0 { // with a stream open, and without
			cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			st, err := pb.NewExternalScalerClient(cc).StreamIsActive(ctxT(t), ref("queues", "stress"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
			_ = s.Stop(context.Background())
			if _, err := st.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("round %d: stream after Stop: %v", i, err)
			}
			_ = cc.Close()
		}
		_ = s.Stop(context.Background())
		_ = s.Stop(context.Background())
	}
}

// TestPushWithoutClientCommands: a locked-down Redis user may not run CLIENT ID or
// CLIENT UNBLOCK; push still works, new streams are picked up within the poll interval.
func TestPushWithoutClientCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	admin := srv.Client(t)
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "scaler", "on", ">pw", "~*", "&*", "+@all", "-client").Err(); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "scaler", Password: "pw"})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.ClientID(context.Background()).Err(); err == nil {
		t.Fatal("precondition: CLIENT ID allowed")
	}
	s, err := New(testConfig(prefix), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(gl, nil)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	cc, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	cli := pb.NewExternalScalerClient(cc)
	sd := seed{t, c, keys.New(prefix)}
	blocked := make(chan struct{}, 1)
	hook := func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}
	s.watch.beforeBlock.Store(&hook)
	for _, q := range []string{"acl1", "acl2"} { // the second opens while the first blocks
		st, err := cli.StreamIsActive(ctxT(t), ref("queues", q))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := st.Recv(); err != nil || r.Result {
			t.Fatalf("%s first = %v, %v", q, r, err)
		}
		select { // it blocks on the streams rather than retrying the connection
		case <-blocked:
		case <-ctxT(t).Done():
			t.Fatal("the push loop never reached its blocking read")
		}
		sd.add(q, 9, 1)
		recvUntil(t, st, true)
	}
}
