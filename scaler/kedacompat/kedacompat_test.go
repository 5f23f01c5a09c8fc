// Package kedacompat drives dtq's external scaler through KEDA's own client code: the
// external and external-push scalers of github.com/kedacore/keda/v2/pkg/scalers, built
// as the KEDA operator builds them, against an in-process scaler and a real
// redis-server. It is a module of its own because pkg/scalers takes a quarter of an
// hour to compile cold; run it with ./run.sh.
package kedacompat

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/kedacore/keda/v2/pkg/scalers"
	"github.com/kedacore/keda/v2/pkg/scalers/scalersconfig"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dtq/dtq/internal/keys"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/internal/testcert"
	"github.com/dtq/dtq/lua"
	"github.com/dtq/dtq/scaler"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// KEDA's packages start these at init; they are not the scaler's.
		if err := goleak.Find(
			goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
			goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
			goleak.IgnoreAnyFunction("github.com/kedacore/keda/v2/pkg/metricscollector.init.0.func1"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

type env struct {
	srv *redistest.Server
	c   *redis.Client
	ks  keys.Space
	sc  *scaler.Scaler
}

// start runs a dedicated redis-server (AOF, so it survives a kill) and a scaler on it.
func start(t *testing.T, tweak func(*scaler.Config)) *env {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	prefix := redistest.Prefix(t)
	cfg := scaler.Config{RedisURL: srv.URL(), KeyPrefix: prefix, Addr: "127.0.0.1:0", RedisTimeout: time.Second,
		CacheTTL: 0, PushPoll: 20 * time.Millisecond, PushMaxBlock: 2 * time.Second, ShutdownTimeout: 5 * time.Second, LogFormat: "text", LogLevel: "info"}
	if tweak != nil {
		tweak(&cfg)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	sc, err := scaler.New(cfg, c, scaler.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc.Serve(l, nil)
	t.Cleanup(func() { _ = sc.Stop(context.Background()) })
	if err := lua.Load(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, c: c, ks: keys.New(prefix), sc: sc}
}

// config builds a ScalerConfig the way KEDA's scaleHandler.buildScalers does for
// trigger 0 of a ScaledObject.
func (e *env) config(triggerType string, md map[string]string, auth map[string]string) *scalersconfig.ScalerConfig {
	meta := map[string]string{"scalerAddress": e.sc.GRPCAddr()}
	for k, v := range md {
		meta[k] = v
	}
	if auth == nil {
		auth = map[string]string{}
	}
	so := &v1alpha1.WithTriggers{
		TypeMeta:   metav1.TypeMeta{Kind: "ScaledObject", APIVersion: "keda.sh/v1alpha1"},
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: "default"},
		Spec:       v1alpha1.WithTriggersSpec{Triggers: []v1alpha1.ScaleTriggers{{Type: triggerType, Metadata: meta}}},
	}
	return &scalersconfig.ScalerConfig{
		ScalableObjectName:      so.Name,
		ScalableObjectNamespace: so.Namespace,
		ScalableObjectType:      so.Kind,
		TriggerName:             "",
		TriggerMetadata:         meta,
		TriggerType:             triggerType,
		TriggerUseCachedMetrics: false,
		ResolvedEnv:             map[string]string{},
		AuthParams:              auth,
		GlobalHTTPTimeout:       3 * time.Second,
		TriggerIndex:            0,
		MetricType:              "",
		AsMetricSource:          false,
		ScaledObject:            so,
		TriggerUniqueKey:        fmt.Sprintf("%s-%s-%s-%d", so.Kind, so.Namespace, so.Name, 0),
	}
}

func (e *env) external(t *testing.T, md map[string]string) scalers.Scaler {
	t.Helper()
	s, err := scalers.NewExternalScaler(e.config("external", md, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// enqueue runs the real enqueue script; runAt in the future schedules the task.
func (e *env) enqueue(t *testing.T, queue string, prio int, id string, runAt time.Time) {
	t.Helper()
	now := time.Now().UnixMilli()
	rs, err := lua.Enqueue.Run(context.Background(), e.c, lua.EnqueueArgs{Queue: e.ks.Queue(queue), NowMS: now,
		Tasks: []lua.NewTask{{ID: id, Function: "noop", Priority: prio, RunAtMS: runAt.UnixMilli(), MaxRetries: 3}}})
	if err == nil {
		err = rs[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
}

// deliver reads n entries as a worker does, leaving them pending.
func (e *env) deliver(t *testing.T, queue string, prio, n int) []string {
	t.Helper()
	res, err := e.c.XReadGroup(context.Background(), &redis.XReadGroupArgs{Group: keys.Group, Consumer: "w1",
		Streams: []string{e.ks.Queue(queue).Stream(prio), ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	if len(ids) != n {
		t.Fatalf("delivered %d, want %d", len(ids), n)
	}
	return ids
}

// finish acknowledges and deletes entries, as a worker does when a task is done.
func (e *env) finish(t *testing.T, queue string, prio int, ids ...string) {
	t.Helper()
	s := e.ks.Queue(queue).Stream(prio)
	if err := e.c.XAck(context.Background(), s, keys.Group, ids...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.c.XDel(context.Background(), s, ids...).Err(); err != nil {
		t.Fatal(err)
	}
}

// values asks KEDA's scaler for every metric of its spec, as the metrics adapter does.
func values(t *testing.T, s scalers.Scaler) (map[string]float64, bool) {
	t.Helper()
	specs := s.GetMetricSpecForScaling(ctxT(t))
	if len(specs) == 0 {
		t.Fatal("no metric specs")
	}
	out := map[string]float64{}
	var active bool
	for _, sp := range specs {
		name := sp.External.Metric.Name
		ms, act, err := s.GetMetricsAndActivity(ctxT(t), name)
		if err != nil {
			t.Fatalf("GetMetricsAndActivity(%s): %v", name, err)
		}
		if len(ms) != 1 {
			t.Fatalf("%s: %d values", name, len(ms))
		}
		out[name] = ms[0].Value.AsApproximateFloat64()
		active = act
	}
	return out, active
}

func TestMetricSpecThroughKEDA(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	s := e.external(t, map[string]string{"queues": "emails", "targetPerReplica": "2.5", "bandTargets": "9-8:0.5"})
	specs := s.GetMetricSpecForScaling(ctxT(t))
	if len(specs) != 2 {
		t.Fatalf("specs = %+v", specs)
	}
	for i, want := range []struct {
		name   string
		target float64
	}{{"s0-dtq-emails", 2.5}, {"s0-dtq-emails-p9-8", 0.5}} {
		sp := specs[i]
		if sp.Type != v2.ExternalMetricSourceType || sp.External.Metric.Name != want.name ||
			sp.External.Target.Type != v2.AverageValueMetricType || sp.External.Target.AverageValue.AsApproximateFloat64() != want.target {
			t.Errorf("spec %d = %s %s %v, want %s AverageValue %v", i, sp.External.Metric.Name,
				sp.External.Target.Type, sp.External.Target.AverageValue, want.name, want.target)
		}
	}
}

func TestValuesThroughKEDA(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	now := time.Now()
	// emails: 5 on band 9 (2 delivered, 1 of them done), 3 on band 6, 4 on band 1.
	for i := 0; i < 5; i++ {
		e.enqueue(t, "emails", 9, fmt.Sprintf("e9-%d", i), now)
	}
	for i := 0; i < 3; i++ {
		e.enqueue(t, "emails", 6, fmt.Sprintf("e6-%d", i), now)
	}
	for i := 0; i < 4; i++ {
		e.enqueue(t, "emails", 1, fmt.Sprintf("e1-%d", i), now)
	}
	got := e.deliver(t, "emails", 9, 2)
	e.finish(t, "emails", 9, got[0])
	// reports: 2 on band 8, both delivered; one retry due now, one in 30 s, one in 2 h.
	e.enqueue(t, "reports", 8, "r8-0", now)
	e.enqueue(t, "reports", 8, "r8-1", now)
	e.deliver(t, "reports", 8, 2)
	e.enqueue(t, "reports", 8, "soon", now.Add(30*time.Second))
	e.enqueue(t, "reports", 8, "later", now.Add(2*time.Hour))
	// A retry that fell due while no worker ran the scheduler.
	e.c.ZAdd(context.Background(), e.ks.Queue("reports").Schedule(), redis.Z{Score: float64(now.Add(-time.Second).UnixMilli()), Member: "late"})

	s := e.external(t, map[string]string{"queues": "emails,reports,absent", "priorities": "9-5",
		"bandTargets": "9-8:1", "scheduledLead": "1m"})
	vals, active := values(t, s)
	// band 9: lag 3, pending 1; band 6: lag 3; band 8: pending 2; due within 1 m: 2.
	want := map[string]float64{"s0-dtq-emails-reports-absent": 3 + 1 + 3 + 2 + 2, "s0-dtq-emails-reports-absent-p9-8": 3 + 1 + 2}
	for k, v := range want {
		if vals[k] != v {
			t.Errorf("%s = %v, want %v (all %v)", k, vals[k], v, vals)
		}
	}
	if !active {
		t.Error("not active with a backlog")
	}

	// Workers consume everything: ACK and XDEL each entry.
	e.finish(t, "emails", 9, got[1])
	e.finish(t, "emails", 9, e.deliver(t, "emails", 9, 3)...)
	e.finish(t, "emails", 6, e.deliver(t, "emails", 6, 3)...)
	res, _ := e.c.XRange(context.Background(), e.ks.Queue("reports").Stream(8), "-", "+").Result()
	for _, m := range res {
		e.finish(t, "reports", 8, m.ID)
	}
	e.c.ZRem(context.Background(), e.ks.Queue("reports").Schedule(), "late", "soon")
	vals, active = values(t, s)
	for k, v := range vals {
		if v != 0 {
			t.Errorf("after consumption %s = %v, want 0", k, v)
		}
	}
	if active {
		t.Error("active with nothing left")
	}
}

func TestActivationOnOneMessageThroughKEDA(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	s := e.external(t, map[string]string{"queues": "single"})
	if _, active := values(t, s); active {
		t.Fatal("active on an empty queue")
	}
	e.enqueue(t, "single", 0, "only", time.Now())
	vals, active := values(t, s)
	if !active || vals["s0-dtq-single"] != 1 {
		t.Fatalf("after one enqueue: %v active=%v, want 1 and active", vals, active)
	}
}

func TestNullLagFallbackThroughKEDA(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for i := 0; i < 4; i++ {
		e.enqueue(t, "cancelled", 3, fmt.Sprintf("c%d", i), time.Now())
	}
	e.deliver(t, "cancelled", 3, 1)
	// Delete an undelivered entry, as cancel does: Redis reports lag as null.
	res, _ := e.c.XRange(context.Background(), e.ks.Queue("cancelled").Stream(3), "-", "+").Result()
	if err := e.c.XDel(context.Background(), e.ks.Queue("cancelled").Stream(3), res[2].ID).Err(); err != nil {
		t.Fatal(err)
	}
	g, _ := e.c.XInfoGroups(context.Background(), e.ks.Queue("cancelled").Stream(3)).Result()
	if g[0].Lag != -1 {
		t.Fatalf("precondition: lag %d, want null", g[0].Lag)
	}
	s := e.external(t, map[string]string{"queues": "cancelled", "includePending": "false"})
	if vals, _ := values(t, s); vals["s0-dtq-cancelled"] != 2 {
		t.Errorf("lag = %v, want 2 (XLEN 3 − pending 1)", vals)
	}
}

func TestBadMetadataThroughKEDA(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	s := e.external(t, map[string]string{"queues": "q", "priorities": "urgent"})
	_, _, err := s.GetMetricsAndActivity(ctxT(t), "s0-dtq-q")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"priorities"`) {
		t.Fatalf("err = %v, want InvalidArgument naming priorities", err)
	}
	if specs := s.GetMetricSpecForScaling(ctxT(t)); len(specs) != 0 {
		t.Errorf("specs for bad metadata = %v", specs)
	}
}

// push runs KEDA's push scaler as the scale loop does and returns its activity channel.
func (e *env) push(t *testing.T, md, auth map[string]string) (scalers.PushScaler, <-chan bool) {
	t.Helper()
	s, err := scalers.NewExternalPushScaler(e.config("external-push", md, auth))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan bool)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, ch)
	}()
	t.Cleanup(func() {
		cancel()
		for range ch { // Run closes ch when it returns
		}
		<-done
		_ = s.Close(context.Background())
	})
	return s, ch
}

func next(t *testing.T, ch <-chan bool) bool {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatal("push scaler stopped")
		}
		return v
	case <-ctxT(t).Done():
		t.Fatal("no push")
	}
	return false
}

func TestPushThroughKEDA(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	s, ch := e.push(t, map[string]string{"queues": "pushed", "bandTargets": "9:1"}, nil)
	if next(t, ch) {
		t.Fatal("first push: active on an empty queue")
	}
	e.enqueue(t, "pushed", 5, "first", time.Now())
	if !next(t, ch) {
		t.Fatal("second push: not active after the first enqueue")
	}
	e.finish(t, "pushed", 5, e.deliver(t, "pushed", 5, 1)...)
	if next(t, ch) {
		t.Fatal("third push: still active after the drain")
	}
	// StreamMetricSpec reached KEDA too, as the scale handler reads it.
	streamer, ok := s.(scalers.MetricSpecStreamer)
	if !ok {
		t.Fatal("KEDA's push scaler is not a MetricSpecStreamer")
	}
	select {
	case specs := <-streamer.MetricSpecChan():
		if len(specs) != 2 || specs[1].External.Metric.Name != "s0-dtq-pushed-p9" {
			t.Errorf("streamed specs = %v", specs)
		}
	case <-ctxT(t).Done():
		t.Error("no streamed metric spec")
	}
}

// KEDA's push scaler hands each repeat of true to the scale loop (which scales from zero
// on a true when its cached Deployment shows 0 replicas): three after the activation,
// then the drain's false.
func TestPushRepeatThroughKEDA(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *scaler.Config) { c.PushRepeat = 50 * time.Millisecond })
	_, ch := e.push(t, map[string]string{"queues": "repeated"}, nil)
	if next(t, ch) {
		t.Fatal("first push: active on an empty queue")
	}
	e.enqueue(t, "repeated", 0, "one", time.Now())
	for i := range 4 {
		if !next(t, ch) {
			t.Fatalf("push %d after the enqueue: false, want true (the activation and three repeats)", i+1)
		}
	}
	e.finish(t, "repeated", 0, e.deliver(t, "repeated", 0, 1)...)
	if next(t, ch) {
		t.Fatal("after the drain: true, want false")
	}
}

func TestRedisRestartUnderPushThroughKEDA(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	ext := e.external(t, map[string]string{"queues": "restart"})
	_, ch := e.push(t, map[string]string{"queues": "restart"}, nil)
	if next(t, ch) {
		t.Fatal("active on an empty queue")
	}
	e.enqueue(t, "restart", 2, "a", time.Now())
	e.enqueue(t, "restart", 2, "b", time.Now())
	if !next(t, ch) {
		t.Fatal("not active after enqueue")
	}
	e.srv.Kill()
	if _, _, err := ext.GetMetricsAndActivity(ctxT(t), "s0-dtq-restart"); status.Code(err) != codes.Unavailable {
		t.Fatalf("with Redis down: %v, want Unavailable", err)
	}
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.Ping(ctxT(t), e.c); err != nil {
		t.Fatal(err)
	}
	for {
		vals, _, err := ext.GetMetricsAndActivity(ctxT(t), "s0-dtq-restart")
		if err == nil {
			if v := vals[0].Value.AsApproximateFloat64(); v != 2 {
				t.Fatalf("after restart: %v, want 2", v)
			}
			break
		}
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("after restart: %v", err)
		}
	}
	e.finish(t, "restart", 2, e.deliver(t, "restart", 2, 2)...)
	for next(t, ch) { // a reconnected stream may repeat true first
	}
}

func TestMutualTLSThroughKEDA(t *testing.T) {
	t.Parallel()
	certs := testcert.New(t)
	e := start(t, func(c *scaler.Config) {
		c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = certs.ServerCertFile, certs.ServerKeyFile, certs.CAFile
	})
	// KEDA takes caCert, tlsClientCert and tlsClientKey from a TriggerAuthentication.
	auth := map[string]string{"caCert": certs.CAPEM, "tlsClientCert": certs.ClientCertPEM, "tlsClientKey": certs.ClientKeyPEM}
	s, err := scalers.NewExternalScaler(e.config("external", map[string]string{"queues": "secure"}, auth))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if specs := s.GetMetricSpecForScaling(ctxT(t)); len(specs) != 1 {
		t.Fatalf("specs over mTLS = %v", specs)
	}
	// Without a client certificate the scaler refuses.
	plain, err := scalers.NewExternalScaler(e.config("external", map[string]string{"queues": "secure", "enableTLS": "true"},
		map[string]string{"caCert": certs.CAPEM}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close(context.Background()) })
	if _, _, err := plain.GetMetricsAndActivity(ctxT(t), "s0-dtq-secure"); err == nil {
		t.Fatal("accepted a client without a certificate")
	}
}
