package manifesttest

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	pb "github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-envconfig"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dtq/dtq/client"
	"github.com/dtq/dtq/internal/redistest"
	"github.com/dtq/dtq/scaler"
)

// The scaler's HTTP paths. TestScalerServesWhatManifestsUse proves them on a running
// scaler, so the literals cannot drift from the binary.
const (
	scalerHealthz = "/healthz"
	scalerReadyz  = "/readyz"
	scalerMetrics = "/metrics"
)

// scalerConfig loads env with the scaler's own loader. TLS files, which a Secret
// provides in the cluster, are stood in for by empty files (the loader only checks that
// they exist; the test checks separately that they are mounted from a Secret).
func scalerConfig(t *testing.T, what string, env map[string]string, p *podRef) scaler.Config {
	t.Helper()
	var names []string
	for _, v := range scaler.EnvVars() {
		names = append(names, v.Name)
	}
	checkKnownVars(t, what, env, names)
	env = mapsClone(env)
	for _, v := range []string{"DTQ_SCALER_TLS_CERT_FILE", "DTQ_SCALER_TLS_KEY_FILE", "DTQ_SCALER_TLS_CLIENT_CA_FILE", "DTQ_REDIS_CA_FILE"} {
		if env[v] == "" {
			continue
		}
		f := filepath.Join(t.TempDir(), filepath.Base(env[v]))
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		env[v] = f
	}
	cfg, err := scaler.LoadConfig(context.Background(), envconfig.MapLookuper(env))
	if err != nil {
		t.Fatalf("%s: the scaler would refuse to start: %v", what, err)
	}
	return cfg
}

func mapsClone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// liveScaler runs the real scaler, configured from a build's scaler container, on
// loopback against a real redis-server.
type liveScaler struct {
	grpcAddr, httpAddr string
	redisURL           string
	rdb                *redis.Client
	cl                 *client.Client
}

// startScaler runs the scaler of the keda build.
func startScaler(t *testing.T) liveScaler {
	t.Helper()
	return startScalerFor(t, filepath.Join(deployDir, "kubernetes", "keda"), nil)
}

// startScalerFor runs the scaler of the build of dir, with the variables in set
// changed from the manifest's.
func startScalerFor(t *testing.T, dir string, set map[string]string) liveScaler {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	objs := build(t, dir)
	p := scalerPod(t, objs)
	env := effectiveEnv(t, objs, p, p.container(t))
	env["DTQ_REDIS_URL"] = srv.URL()
	for k, v := range set {
		env[k] = v
	}
	cfg := scalerConfig(t, p.what, env, &p)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s, err := scaler.New(cfg, rdb, scaler.Options{})
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
	return liveScaler{grpcAddr: s.GRPCAddr(), httpAddr: s.HTTPAddr(), redisURL: srv.URL(), rdb: rdb,
		cl: client.New(rdb, client.Options{Prefix: cfg.KeyPrefix})}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}

// TestScalerServesWhatManifestsUse runs the real scaler with the manifests' settings
// and checks, against it: the probe paths answer, every metric and label the Cloud Run
// PromQL queries name is on /metrics, and each ScaledObject's and ScaledJob's trigger
// metadata is accepted over gRPC (GetMetricSpec), yields the metrics the scaler's
// parser derives from it (a ScaledObject: one for the backlog, one per priority group;
// a ScaledJob: the backlog alone, see scaledjob.yaml), and reports the waiting task.
func TestScalerServesWhatManifestsUse(t *testing.T) {
	t.Parallel()
	ls := startScaler(t)
	// A task in every queue a trigger watches.
	enqueued := map[string]bool{}
	for _, dir := range kustomizations(t) {
		for _, o := range scaled(build(t, dir)) {
			for _, q := range strings.Split(externalTrigger(t, o.String(), o.triggers).Metadata["queues"], ",") {
				q = strings.TrimSpace(q)
				if enqueued[q] {
					continue
				}
				enqueued[q] = true
				if _, _, err := ls.cl.Enqueue(context.Background(), client.Task{Queue: q, Function: "noop", Priority: 9}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	if code, body := get(t, "http://"+ls.httpAddr+scalerHealthz); code != http.StatusOK {
		t.Errorf("GET %s: %d %s", scalerHealthz, code, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, "http://"+ls.httpAddr+scalerReadyz)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s after 10 s", scalerReadyz, code, body)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}

	code, body := get(t, "http://"+ls.httpAddr+scalerMetrics)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d", scalerMetrics, code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]map[string]bool{} // metric → label names
	for name, mf := range families {
		served[name] = map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				served[name][lp.GetName()] = true
			}
		}
	}
	cc := cloudRun[*cremaConfig](t, "crema-config.yaml")
	queries := 0
	for _, so := range cc.Spec.ScaledObjects {
		for _, tr := range so.Spec.Triggers {
			for _, sel := range selectors(tr.Metadata["query"]) {
				queries++
				labelsServed, ok := served[sel.metric]
				if !ok {
					t.Errorf("crema-config.yaml: trigger %s queries %s, which the scaler does not serve", tr.Name, sel.metric)
					continue
				}
				for _, l := range sel.labels {
					if !labelsServed[l] {
						t.Errorf("crema-config.yaml: trigger %s matches %s on label %q, which it does not have", tr.Name, sel.metric, l)
					}
				}
			}
		}
	}
	if queries == 0 {
		t.Fatal("no metric selectors found in crema-config.yaml's queries")
	}

	conn, err := grpc.NewClient(ls.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	es := pb.NewExternalScalerClient(conn)
	checked, jobs := 0, 0
	for _, dir := range kustomizations(t) {
		for _, o := range scaled(build(t, dir)) {
			checked++
			tr := externalTrigger(t, o.String(), o.triggers)
			md, err := scaler.ParseMetadata(tr.Metadata)
			if err != nil {
				t.Errorf("%v: the scaler rejects the trigger metadata: %v", o, err)
				continue
			}
			ref := &pb.ScaledObjectRef{Name: o.name, Namespace: o.namespace, ScalerMetadata: tr.Metadata}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			spec, err := es.GetMetricSpec(ctx, ref)
			if err != nil {
				cancel()
				t.Errorf("%v: GetMetricSpec: %v", o, err)
				continue
			}
			var got, want []string
			for _, m := range spec.MetricSpecs {
				got = append(got, m.MetricName)
			}
			for _, m := range md.Metrics() {
				want = append(want, m.Name)
			}
			switch {
			case !slices.Equal(got, want):
				t.Errorf("%v: GetMetricSpec names %v, want %v (what the scaler's parser derives)", o, got, want)
			case o.kind == "ScaledJob" && len(got) != 1:
				// KEDA sizes a ScaledJob by its trigger's first metric divided by the
				// average target of all its metrics (pkg/scaling/scaledjob).
				t.Errorf("%v: GetMetricSpec names %v: a ScaledJob's trigger must yield the backlog metric alone (no bandTargets)", o, got)
			case o.kind == "ScaledObject" && len(got) < 2:
				t.Errorf("%v: GetMetricSpec names %v, want the backlog and at least one priority group", o, got)
			}
			if o.kind == "ScaledJob" {
				jobs++
			}
			active, err := es.IsActive(ctx, ref)
			cancel()
			if err != nil || !active.Result {
				t.Errorf("%v: IsActive = %v, %v with a task waiting in its queue", o, active, err)
			}
		}
	}
	if checked < 4 || jobs < 1 {
		t.Fatalf("checked %d ScaledObjects and ScaledJobs (%d ScaledJobs) against the scaler, want at least 4 (1)", checked, jobs)
	}
}

// scaledObj is a ScaledObject or a ScaledJob of a build, with its triggers.
type scaledObj struct {
	object
	triggers []kedav1alpha1.ScaleTriggers
}

// scaled returns the ScaledObjects and ScaledJobs of a build.
func scaled(objs []object) []scaledObj {
	var out []scaledObj
	for _, o := range objs {
		switch v := o.value.(type) {
		case *kedav1alpha1.ScaledObject:
			out = append(out, scaledObj{o, v.Spec.Triggers})
		case *kedav1alpha1.ScaledJob:
			out = append(out, scaledObj{o, v.Spec.Triggers})
		}
	}
	return out
}

// selector is one metric selector of a PromQL query: the metric and the label names it
// matches on.
type selector struct {
	metric string
	labels []string
}

var (
	selectorRE = regexp.MustCompile(`\b(dtq_[a-zA-Z0-9_]+)\s*(\{[^}]*\})?`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
)

func selectors(q string) []selector {
	var out []selector
	for _, m := range selectorRE.FindAllStringSubmatch(q, -1) {
		s := selector{metric: m[1]}
		for _, lm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			s.labels = append(s.labels, lm[1])
		}
		out = append(out, s)
	}
	return out
}
