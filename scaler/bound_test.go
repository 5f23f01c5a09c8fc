package scaler

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dtq/dtq/internal/redistest"
)

// junkRef is a trigger naming 256 made-up queues, as any gRPC caller may send.
func junkRef(i int) *pb.ScaledObjectRef {
	qs := make([]string, MaxQueues)
	for j := range qs {
		qs[j] = fmt.Sprintf("junk-%d-%d", i, j)
	}
	return ref("queues", strings.Join(qs, ","))
}

func scrape(t *testing.T, f *fixture) string {
	t.Helper()
	res, err := http.Get("http://" + f.s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics = %d, %v", res.StatusCode, err)
	}
	return string(b)
}

var queueLabel = regexp.MustCompile(`(?m)^dtq_queue_\w+\{[^}]*queue="([^"]+)"`)

// metricQueues lists the distinct queues the dtq_queue_* series of a scrape name.
func metricQueues(body string) []string {
	var out []string
	for _, m := range queueLabel.FindAllStringSubmatch(body, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return out
}

// metricValue is the value of one series line of a scrape ("" when absent).
func metricValue(body, series string) string {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestFloodOfMadeUpQueuesStaysBounded: callers naming made-up queues through the real
// gRPC API (GetMetricSpec, GetMetrics, IsActive, StreamIsActive) add nothing to the
// shared read nor to /metrics, get zeros, and a real trigger keeps its exact values and
// its push while they do.
func TestFloodOfMadeUpQueuesStaysBounded(t *testing.T) {
	t.Parallel()
	const max = 300
	f := setup(t, nil, func(c *Config) { c.MaxQueues = max })
	s := f.seed(t)
	// real: band 9 — 5 entries, 2 delivered; band 3 — 4 undelivered; one scheduled task due.
	s.add("real", 9, 5)
	s.deliver("real", 9, 2)
	s.add("real", 3, 4)
	s.schedule("real", time.Now().Add(-time.Minute), "late")
	f.c.SAdd(context.Background(), f.ks.Queues(), "real")
	real := ref("queues", "real", "bandTargets", "9-8:2")
	want := map[string]float64{"dtq-real": 5 + 4 + 1, "dtq-real-p9-8": 5}
	check := func() {
		t.Helper()
		if got := metricValues(t, f, real); len(got) != 2 || got["dtq-real"] != want["dtq-real"] || got["dtq-real-p9-8"] != want["dtq-real-p9-8"] {
			t.Errorf("real trigger = %v, want %v", got, want)
		}
		if res, err := f.cli.IsActive(ctxT(t), real); err != nil || !res.Result {
			t.Errorf("real IsActive = %v, %v", res, err)
		}
	}
	check()
	// A push trigger open before the flood, on an idle queue.
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	push, err := f.cli.StreamIsActive(ctx, ref("queues", "wake"))
	if err != nil {
		t.Fatal(err)
	}
	recvUntil(t, push, false)
	before := scrape(t, f)

	const callers = 20
	var wg sync.WaitGroup
	var refused, opened atomic.Int64
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := junkRef(i)
			spec, err := f.cli.GetMetricSpec(ctx, r)
			if err != nil {
				t.Errorf("junk GetMetricSpec: %v", err)
				return
			}
			for _, ms := range spec.MetricSpecs {
				res, err := f.cli.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: ms.MetricName})
				if err != nil || res.MetricValues[0].MetricValue != 0 {
					t.Errorf("junk GetMetrics = %v, %v", res, err)
				}
			}
			if res, err := f.cli.IsActive(ctx, r); err != nil || res.Result {
				t.Errorf("junk IsActive = %v, %v", res, err)
			}
			// A push stream: the bound takes one of 256 made-up queues beside wake's,
			// and refuses the rest.
			st, err := f.cli.StreamIsActive(ctx, r)
			if err == nil {
				var res *pb.IsActiveResponse
				res, err = st.Recv()
				if err == nil {
					opened.Add(1)
					if res.Result {
						t.Errorf("junk stream active")
					}
				}
			}
			if err != nil {
				if c, reason := errReason(err); c != codes.ResourceExhausted || reason != ReasonTooManyQueues ||
					!strings.Contains(err.Error(), "DTQ_SCALER_MAX_QUEUES") {
					t.Errorf("junk stream: %v (%v %s), want ResourceExhausted %s naming DTQ_SCALER_MAX_QUEUES", err, c, reason, ReasonTooManyQueues)
				}
				refused.Add(1)
			}
			check() // while the others flood
		}()
	}
	wg.Wait()
	check()
	if opened.Load() != 1 || refused.Load() != callers-1 {
		t.Errorf("junk streams opened %d, refused %d; want 1 and %d (%d queues fit beside wake's)", opened.Load(), refused.Load(), callers-1, max-1)
	}
	if n := f.s.watch.queueCount(); n > max {
		t.Errorf("push streams watch %d queues, more than %d", n, max)
	}
	if got := f.s.sig.watched(); !slices.Equal(got, []string{"real"}) {
		t.Errorf("shared read holds %d queues (%v…), want [real]", len(got), got[:min(5, len(got))])
	}

	after := scrape(t, f)
	if got := metricQueues(after); !slices.Equal(got, []string{"real"}) {
		t.Errorf("/metrics reports %d queues (%v…), want [real]", len(got), got[:min(5, len(got))])
	}
	if strings.Contains(after, "junk-") {
		t.Error("/metrics names a made-up queue")
	}
	if len(after) > 2*len(before) {
		t.Errorf("/metrics grew from %d to %d bytes", len(before), len(after))
	}
	// Every made-up queue of every GetMetrics and IsActive (one each) was answered by
	// one EXISTS.
	if got, want := metricValue(after, `dtq_scaler_unwatched_queue_reads_total{reason="absent"}`), strconv.Itoa(callers*MaxQueues*2); got != want {
		t.Errorf("absent reads = %s, want %s", got, want)
	}
	if got := metricValue(after, `dtq_scaler_watched_queues`); got != "1" {
		t.Errorf("dtq_scaler_watched_queues = %s, want 1", got)
	}

	// The push trigger still wakes on its first task.
	s.add("wake", 9, 1)
	recvUntil(t, push, true)
	check()
}

// errReason is a gRPC error's code and ErrorInfo reason.
func errReason(err error) (codes.Code, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), ei.Reason
		}
	}
	return st.Code(), ""
}

// TestMadeUpQueueIsWatchedOnceItExists: a queue with no key reads as zero without
// joining the shared read, and joins it with its first task, counted at once.
func TestMadeUpQueueIsWatchedOnceItExists(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, nil)
	r := ref("queues", "later", "scheduledLead", "1h")
	if got := metricValues(t, f, r); got["dtq-later"] != 0 {
		t.Fatalf("absent queue = %v", got)
	}
	if got := f.s.sig.watched(); len(got) != 0 {
		t.Fatalf("shared read holds %v before the queue exists", got)
	}
	// A scheduled task alone makes the queue exist (its schedule key).
	f.seed(t).schedule("later", time.Now().Add(time.Minute), "soon")
	if got := metricValues(t, f, r); got["dtq-later"] != 1 {
		t.Fatalf("after a scheduled task within the lead = %v, want 1", got)
	}
	if got := f.s.sig.watched(); !slices.Equal(got, []string{"later"}) {
		t.Fatalf("shared read holds %v, want [later]", got)
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRealQueuesBeyondTheBound: existing queues past the bound are read for their
// caller alone with exact values, leave the shared read at the bound and /metrics at
// the bound (the rest counted as omitted); queues unused for the forget time make room.
func TestRealQueuesBeyondTheBound(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	cfg := testConfig(redistest.Prefix(t))
	cfg.MaxQueues = 4
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	clock := &fakeClock{t: time.Now()}
	f := serveWith(t, c, cfg, Options{Now: clock.now})
	f.c = c
	s := f.seed(t)
	for i := 0; i < 6; i++ {
		q := fmt.Sprintf("q%d", i)
		s.add(q, 5, i+1)
		c.SAdd(context.Background(), f.ks.Queues(), q)
	}
	a := ref("queues", "q0,q1,q2,q3")
	b := ref("queues", "q4,q5")
	if got := metricValues(t, f, a); got["dtq-q0-q1-q2-q3"] != 1+2+3+4 {
		t.Fatalf("a = %v", got)
	}
	if got := metricValues(t, f, b); got["dtq-q4-q5"] != 5+6 {
		t.Fatalf("b, read alone = %v", got)
	}
	if got := sorted(f.s.sig.watched()); !slices.Equal(got, []string{"q0", "q1", "q2", "q3"}) {
		t.Fatalf("shared read = %v", got)
	}
	body := scrape(t, f)
	if got := metricQueues(body); !slices.Equal(got, []string{"q0", "q1", "q2", "q3"}) {
		t.Errorf("/metrics reports %v, want the first 4 by name", got)
	}
	if got := metricValue(body, "dtq_scaler_metrics_queues_omitted"); got != "2" {
		t.Errorf("omitted = %s, want 2", got)
	}
	if got := metricValue(body, `dtq_scaler_unwatched_queue_reads_total{reason="limit"}`); got != "2" {
		t.Errorf("limit reads = %s, want 2", got)
	}
	// b's queues keep being read alone, and correct as they change.
	s.add("q5", 5, 10)
	if got := metricValues(t, f, b); got["dtq-q4-q5"] != 5+16 {
		t.Errorf("b after more tasks = %v", got)
	}
	// a's trigger goes away; past the forget time b's queues take its place.
	clock.add(11 * time.Minute)
	if got := metricValues(t, f, b); got["dtq-q4-q5"] != 5+16 {
		t.Errorf("b after the forget time = %v", got)
	}
	if got := sorted(f.s.sig.watched()); !slices.Equal(got, []string{"q4", "q5"}) {
		t.Errorf("shared read after the forget time = %v, want [q4 q5]", got)
	}
}

// TestLeadsPerQueueBounded: callers with ever new scheduledLeads on one queue add at
// most maxLeads of them to the shared read; the others are read alone, exactly.
func TestLeadsPerQueueBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	cfg := testConfig(redistest.Prefix(t))
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	clock := &fakeClock{t: time.Now()}
	f := serveWith(t, c, cfg, Options{Now: clock.now})
	f.c = c
	s := f.seed(t)
	// A task due every minute from +1m to +20m.
	for i := 1; i <= 20; i++ {
		s.schedule("sched", clock.now().Add(time.Duration(i)*time.Minute), "t"+strconv.Itoa(i))
	}
	for lead := 1; lead <= 20; lead++ {
		r := ref("queues", "sched", "scheduledLead", fmt.Sprintf("%dm30s", lead))
		if got := metricValues(t, f, r); got["dtq-sched"] != float64(lead) {
			t.Errorf("lead %dm30s = %v, want %d", lead, got, lead)
		}
	}
	f.s.sig.mu.Lock()
	n := len(f.s.sig.entries["sched"].leads)
	f.s.sig.mu.Unlock()
	if n != f.s.sig.maxLeads {
		t.Errorf("shared read holds %d leads of sched, want %d", n, f.s.sig.maxLeads)
	}
	if got := metricValue(scrape(t, f), `dtq_scaler_unwatched_queue_reads_total{reason="limit"}`); got != strconv.Itoa(20-f.s.sig.maxLeads) {
		t.Errorf("limit reads = %s, want %d", got, 20-f.s.sig.maxLeads)
	}
}

// TestPushBoundFreesOnClose: a stream refused for the bound fits once the streams
// holding the queues close; a stream on queues already watched adds none.
func TestPushBoundFreesOnClose(t *testing.T) {
	t.Parallel()
	f := setup(t, nil, func(c *Config) { c.MaxQueues = 2 })
	open := func(queues string) (context.CancelFunc, error) {
		ctx, cancel := context.WithCancel(ctxT(t))
		st, err := f.cli.StreamIsActive(ctx, ref("queues", queues))
		if err == nil {
			_, err = st.Recv()
		}
		if err != nil {
			cancel()
		}
		return cancel, err
	}
	closed := make(chan struct{}, 2)
	h := func() { closed <- struct{}{} }
	f.s.watch.afterUnsubscribe.Store(&h)

	closeFirst, err := open("a,b")
	if err != nil {
		t.Fatal(err)
	}
	closeSame, err := open("b,a") // the same queues add none
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open("c"); func() bool { c, r := errReason(err); return c != codes.ResourceExhausted || r != ReasonTooManyQueues }() {
		t.Fatalf("third stream: %v, want ResourceExhausted %s", err, ReasonTooManyQueues)
	}
	closeFirst()
	<-closed
	if n := f.s.watch.queueCount(); n != 2 {
		t.Fatalf("after one of two streams on a,b closed: %d queues, want 2", n)
	}
	closeSame()
	<-closed
	if n := f.s.watch.queueCount(); n != 0 {
		t.Fatalf("after both closed: %d queues, want 0", n)
	}
	closeC, err := open("c")
	if err != nil {
		t.Fatalf("after both closed: %v", err)
	}
	closeC()
}

func sorted(s []string) []string {
	slices.Sort(s)
	return s
}
