package manifesttest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/observer"
	"github.com/dtq/dtq/runtime"
)

var (
	alertsFile    = filepath.Join(deployDir, "prometheus", "alerts.yaml")
	alertsTest    = filepath.Join(deployDir, "prometheus", "alerts_test.yaml")
	dashboardFile = filepath.Join(deployDir, "grafana", "dtq.json")
)

// promtool finds Prometheus's promtool: $DTQ_PROMTOOL, or on PATH (Debian's prometheus
// package; .ci/run extracts it from the package without installing the service).
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DTQ_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("DTQ_SKIP_PROMTOOL") == "1" {
			t.Skip("DTQ_SKIP_PROMTOOL=1: promtool checks not run")
		}
		t.Fatal("promtool not found: set DTQ_PROMTOOL or put Debian's prometheus package's promtool on PATH (or DTQ_SKIP_PROMTOOL=1)")
	}
	return p
}

// TestAlertRules: the rules parse as Prometheus parses them, and their unit tests (alerts
// firing and staying quiet on given series) pass in Prometheus's own rule evaluator.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	pt := promtool(t)
	for _, args := range [][]string{{"check", "rules", alertsFile}, {"test", "rules", alertsTest}} {
		out, err := exec.Command(pt, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every rule carries a runbook line and a severity.
	rules := alertRules(t)
	for _, r := range rules {
		if r.Annotations["runbook"] == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
			t.Errorf("alert %s: needs summary and runbook annotations and a severity", r.Alert)
		}
	}
	if len(rules) < 5 {
		t.Errorf("%d alert rules, want at least the five the deploy README lists", len(rules))
	}
}

// alertRule is one rule of alerts.yaml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules reads every rule of alerts.yaml, all groups together.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var rf struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range rf.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// loadDashboard decodes the Grafana dashboard with the types of Grafana's schema (the
// foundation SDK): strictly for the dashboard's own fields and variables (an unknown or
// missing field fails), and its panels with their Prometheus queries.
func loadDashboard(t *testing.T) dashboard.Dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	cog.NewRuntime().RegisterDataqueryVariant(prometheus.VariantConfig())
	var d dashboard.Dashboard
	if err := sdkErr(d.UnmarshalJSONStrict(data)); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	// The SDK's strict decoders of panels and queries stop at the first nested value,
	// whose empty error list they take for an error: the panels are decoded with the
	// SDK's plain decoder, which reads each query into its data source's type.
	var plain dashboard.Dashboard
	if err := json.Unmarshal(data, &plain); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	d.Panels = plain.Panels
	if err := sdkErr(d.Validate()); err != nil {
		t.Fatalf("%s: invalid: %v", dashboardFile, err)
	}
	return d
}

// sdkErr is err, except the empty cog.BuildErrors the SDK's decoders return (as a
// non-nil error) when they found nothing wrong.
func sdkErr(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

// dashboardExprs is every panel query of the dashboard, by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	var raw struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range raw.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	return out
}

func TestGrafanaDashboardLoads(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.Uid == nil || *d.Uid == "" || d.Title == nil || *d.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	panels := 0
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue
		}
		panels++
		if len(p.Panel.Targets) == 0 {
			t.Errorf("panel %v: no targets", *p.Panel.Title)
		}
		for _, tg := range p.Panel.Targets {
			if q, ok := tg.(*prometheus.Dataquery); !ok || q.Expr == "" {
				t.Errorf("panel %v: a target that is not a Prometheus query: %T", *p.Panel.Title, tg)
			}
		}
	}
	// The list: backlog per queue and band, pending, due, dead, throughput,
	// failures, attempt durations, live/stale workers, replicas against backlog, push latency.
	exprs := dashboardExprs(t)
	for _, want := range []string{"Backlog per queue", "Backlog per band", "In flight (pending)", "Scheduled due and dead",
		"Throughput by outcome", "Failures by function", "Attempt duration", "Workers by liveness",
		"Replicas against backlog", "Scaler push latency"} {
		if _, ok := exprs[want]; !ok {
			t.Errorf("no panel %q", want)
		}
	}
	if panels != len(exprs) {
		t.Errorf("%d panels decoded, %d read raw", panels, len(exprs))
	}
}

// groupingRE finds the label names of by (...), without (...), on (...) and ignoring (...).
var groupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)

// TestObservabilityNamesExportedMetrics scrapes a real worker that ran a task that
// succeeded and one that died, the real scaler with the manifests' settings after a
// GetMetrics call and a push, and the real observer after a request; every metric the
// alert rules and the dashboard name must be on one of those /metrics pages, with every
// label they match or group on.
func TestObservabilityNamesExportedMetrics(t *testing.T) {
	t.Parallel()
	ls := startScaler(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The scaler: one pushed StreamIsActive (a task on an idle queue) and a GetMetrics.
	conn, err := grpc.NewClient(ls.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	es := pb.NewExternalScalerClient(conn)
	ref := &pb.ScaledObjectRef{Name: "obs", Namespace: "dtq", ScalerMetadata: map[string]string{"queues": "obs", "targetPerReplica": "4"}}
	stream, err := es.StreamIsActive(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.Result {
		t.Fatalf("first push: %v %v, want false", r, err)
	}
	ok, _, err := ls.cl.Enqueue(ctx, client.Task{Queue: "obs", Function: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || !r.Result {
		t.Fatalf("push after the enqueue: %v %v, want true", r, err)
	}
	spec, err := es.GetMetricSpec(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := es.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: ref, MetricName: spec.MetricSpecs[0].MetricName}); err != nil {
		t.Fatal(err)
	}

	// A worker that runs one task to success and one to its death.
	reg := runtime.NewRegistry()
	reg.Register("ok", func(context.Context, *runtime.Task) ([]byte, error) { return nil, nil }, runtime.FuncOptions{})
	reg.Register("boom", func(context.Context, *runtime.Task) ([]byte, error) { return nil, errors.New("boom") }, runtime.FuncOptions{})
	cfg := loadWorker(t, "worker", map[string]string{"DTQ_REDIS_URL": ls.redisURL, "DTQ_QUEUES": "obs", "DTQ_LOG_LEVEL": "error"})
	w, err := runtime.New(runtime.Options{Config: cfg, Redis: ls.rdb, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	dead, _, err := ls.cl.Enqueue(ctx, client.Task{Queue: "obs", Function: "boom", MaxRetries: client.Retries(0)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ok, dead} {
		if _, err := ls.cl.WaitFor(ctx, "obs", id, 10*time.Millisecond, client.StatusSucceeded, client.StatusDead); err != nil {
			t.Fatalf("task %s: %v", id, err)
		}
	}
	ws := httptest.NewServer(w.Handler())
	defer ws.Close()

	// The observer, after one request.
	obs := httptest.NewServer(observer.New(observer.Options{Config: observer.Config{KeyPrefix: cfg.KeyPrefix, ReadOpen: true}, Redis: ls.rdb}).Handler())
	defer obs.Close()
	if code, body := get(t, obs.URL+"/api/v1/queues"); code != http.StatusOK {
		t.Fatalf("observer /api/v1/queues: %d %s", code, body)
	}

	served := map[string]map[string]bool{} // metric (and its _bucket/_count/_sum series) → label names
	for _, url := range []string{ws.URL + "/metrics", "http://" + ls.httpAddr + scalerMetrics, obs.URL + "/metrics"} {
		code, body := get(t, url)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", url, code)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		for name, mf := range families {
			names := []string{name}
			if mf.GetType().String() == "HISTOGRAM" {
				names = append(names, name+"_bucket", name+"_count", name+"_sum")
			}
			for _, n := range names {
				if served[n] == nil {
					served[n] = map[string]bool{}
				}
				for _, m := range mf.GetMetric() {
					for _, lp := range m.GetLabel() {
						served[n][lp.GetName()] = true
					}
				}
				if strings.HasSuffix(n, "_bucket") {
					served[n]["le"] = true
				}
			}
		}
	}

	var exprs []struct{ where, expr string }
	for title, es := range dashboardExprs(t) {
		for _, e := range es {
			exprs = append(exprs, struct{ where, expr string }{"dashboard panel " + title, e})
		}
	}
	for _, r := range alertRules(t) {
		exprs = append(exprs, struct{ where, expr string }{"alert " + r.Alert, r.Expr})
	}
	checked := 0
	for _, x := range exprs {
		sels := selectors(x.expr)
		if len(sels) == 0 {
			t.Errorf("%s: names no dtq metric: %s", x.where, x.expr)
		}
		labelsOf := map[string]bool{"instance": true} // added by Prometheus to every scraped series
		for _, s := range sels {
			checked++
			ls, ok := served[s.metric]
			if !ok {
				t.Errorf("%s: %s is on no /metrics page", x.where, s.metric)
				continue
			}
			for l := range ls {
				labelsOf[l] = true
			}
			for _, l := range s.labels {
				if !ls[l] {
					t.Errorf("%s: %s has no label %q", x.where, s.metric, l)
				}
			}
		}
		for _, m := range groupingRE.FindAllStringSubmatch(x.expr, -1) {
			for _, l := range strings.Split(m[1], ",") {
				if l = strings.TrimSpace(l); l != "" && !labelsOf[l] {
					t.Errorf("%s: groups on %q, a label none of its metrics has", x.where, l)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d metric selectors checked", checked)
	}
}
