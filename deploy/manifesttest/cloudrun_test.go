package manifesttest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/sethvargo/go-envconfig"
	runv1 "google.golang.org/api/run/v1"

	"github.com/dtq/dtq/observer"
)

// cloudRunGrace is Cloud Run's SIGTERM-to-SIGKILL time, fixed by the platform.
const cloudRunGrace = 10 * time.Second

// cloudRunDrainMargin: what the worker needs after the drain deadline (hand the
// cancelled entries back, the final heartbeat); Cloud Run leaves no more than this.
const cloudRunDrainMargin = 2 * time.Second

// cloudRun decodes one file of deploy/cloudrun.
func cloudRun[T any](t *testing.T, file string) T {
	t.Helper()
	p := filepath.Join(deployDir, "cloudrun", file)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	docs := splitDocs(data)
	if len(docs) != 1 {
		t.Fatalf("%s: %d documents, want 1", p, len(docs))
	}
	o, err := decodeStrict(p, docs[0], cloudRunTypes)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := o.value.(T)
	if !ok {
		t.Fatalf("%s: a %s, not the expected type", p, o.kind)
	}
	return v
}

// runEnv is a Cloud Run container's environment; the secret Redis URL becomes a
// placeholder.
func runEnv(t *testing.T, what string, c *runv1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil && e.Name == "DTQ_REDIS_URL":
			env[e.Name] = redisURLPlaceholder
		default:
			t.Errorf("%s: %s: an env source the tests do not resolve", what, e.Name)
		}
	}
	return env
}

// checkRunProbes: a Cloud Run container's startup and liveness probes are HTTP GETs of
// /healthz on the port its binary serves.
func checkRunProbes(t *testing.T, what string, c *runv1.Container, port int) {
	t.Helper()
	for name, pr := range map[string]*runv1.Probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe} {
		if pr == nil || pr.HttpGet == nil {
			t.Errorf("%s: no HTTP %s", what, name)
			continue
		}
		if pr.HttpGet.Path != scalerHealthz || int(pr.HttpGet.Port) != port {
			t.Errorf("%s: %s on %s:%d, the binary serves %s on %d", what, name, pr.HttpGet.Path, pr.HttpGet.Port, scalerHealthz, port)
		}
	}
}

func onlyContainer(t *testing.T, what string, spec *runv1.RevisionSpec, name string) *runv1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("%s: no container %q", what, name)
	return nil
}

// TestCloudRunWorkerPool: the worker pool's workers start with their environment and
// drain within Cloud Run's fixed SIGTERM grace.
func TestCloudRunWorkerPool(t *testing.T) {
	t.Parallel()
	wp := cloudRun[*runv1.WorkerPool](t, "worker-pool.yaml")
	const what = "cloudrun/worker-pool.yaml"
	c := onlyContainer(t, what, wp.Spec.Template.Spec, "worker")
	if !slices.Equal(c.Args, []string{"worker"}) {
		t.Errorf("%s: args %q, want [worker]", what, c.Args)
	}
	cfg := workerConfig(t, what, runEnv(t, what, c))
	if cfg.DrainTimeout+cloudRunDrainMargin > cloudRunGrace {
		t.Errorf("%s: DTQ_DRAIN_TIMEOUT_S %v + %v exceeds Cloud Run's fixed %v SIGTERM grace", what, cfg.DrainTimeout, cloudRunDrainMargin, cloudRunGrace)
	}
	if wp.Metadata.Annotations["run.googleapis.com/scalingMode"] != "manual" {
		t.Errorf("%s: scalingMode is not manual, so CREMA cannot set the instance count", what)
	}

	cc := cloudRun[*cremaConfig](t, "crema-config.yaml")
	if len(cc.Spec.ScaledObjects) != 1 {
		t.Fatalf("crema-config.yaml: %d scaled objects, want 1", len(cc.Spec.ScaledObjects))
	}
	so := cc.Spec.ScaledObjects[0].Spec
	if ref := so.ScaleTargetRef; ref == nil || !strings.HasSuffix(ref.Name, "/workerpools/"+wp.Metadata.Name) {
		t.Errorf("crema-config.yaml: scaleTargetRef %+v is not the worker pool %q", ref, wp.Metadata.Name)
	}
	if err := kedav1alpha1.ValidateTriggers(so.Triggers); err != nil {
		t.Errorf("crema-config.yaml: KEDA ValidateTriggers: %v", err)
	}
	if so.MinReplicaCount == nil || *so.MinReplicaCount != 0 {
		t.Errorf("crema-config.yaml: minReplicaCount %v, want 0", so.MinReplicaCount)
	}
	auths := map[string]bool{}
	for _, a := range cc.Spec.TriggerAuthentications {
		auths[a.Metadata.Name] = true
	}
	for i, tr := range so.Triggers {
		if tr.Type != "prometheus" {
			t.Errorf("crema-config.yaml: trigger %s is %q, want prometheus (verified on Cloud Run)", tr.Name, tr.Type)
		}
		if tr.AuthenticationRef == nil || !auths[tr.AuthenticationRef.Name] {
			t.Errorf("crema-config.yaml: trigger %s has no authenticationRef to a listed TriggerAuthentication", tr.Name)
		}
		for _, k := range []string{"serverAddress", "query", "threshold"} {
			if tr.Metadata[k] == "" {
				t.Errorf("crema-config.yaml: trigger %s has no %s", tr.Name, k)
			}
		}
		for _, q := range queueMatchers(tr.Metadata["query"]) {
			if !slices.Contains(cfg.Queues, q) {
				t.Errorf("crema-config.yaml: trigger %s watches queue %q, the workers serve %v", tr.Name, q, cfg.Queues)
			}
		}
		if i == 0 && tr.Metadata["threshold"] != strconv.Itoa(cfg.Concurrency) {
			t.Errorf("crema-config.yaml: the backlog trigger's threshold %q is not the workers' DTQ_WORKER_CONCURRENCY %d", tr.Metadata["threshold"], cfg.Concurrency)
		}
	}
}

var queueMatcher = regexp.MustCompile(`queue\s*=\s*"([^"]*)"`)

func queueMatchers(q string) []string {
	var out []string
	for _, m := range queueMatcher.FindAllStringSubmatch(q, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestCloudRunScaler: the scaler service starts with its environment, and Cloud Run's
// PORT (the container port) is where it serves /metrics and its probes.
func TestCloudRunScaler(t *testing.T) {
	t.Parallel()
	svc := cloudRun[*runv1.Service](t, "scaler-service.yaml")
	const what = "cloudrun/scaler-service.yaml"
	c := onlyContainer(t, what, svc.Spec.Template.Spec, "scaler")
	if !slices.Equal(c.Args, []string{"scaler"}) {
		t.Errorf("%s: args %q, want [scaler]", what, c.Args)
	}
	if len(c.Ports) != 1 {
		t.Fatalf("%s: %d ports, want the one Cloud Run sets PORT to", what, len(c.Ports))
	}
	env := runEnv(t, what, c)
	env["PORT"] = strconv.FormatInt(c.Ports[0].ContainerPort, 10)
	cfg := scalerConfig(t, what, env, nil)
	checkRunProbes(t, what, c, cfg.Port)
	ann := svc.Spec.Template.Metadata.Annotations
	if ann["autoscaling.knative.dev/minScale"] != "1" || ann["run.googleapis.com/cpu-throttling"] != "false" {
		t.Errorf("%s: want one instance always up with CPU always allocated (the sidecar scrapes between requests)", what)
	}
}

// TestCloudRunObserver: the observer's service starts with its environment, read-only,
// probes what it serves, and keeps CPU between requests for its WORKER_STALE watch.
func TestCloudRunObserver(t *testing.T) {
	t.Parallel()
	svc := cloudRun[*runv1.Service](t, "observer-service.yaml")
	const what = "cloudrun/observer-service.yaml"
	c := onlyContainer(t, what, svc.Spec.Template.Spec, "observer")
	if !slices.Equal(c.Args, []string{"observer"}) {
		t.Errorf("%s: args %q, want [observer]", what, c.Args)
	}
	if len(c.Ports) != 1 {
		t.Fatalf("%s: %d ports, want the one Cloud Run sets PORT to", what, len(c.Ports))
	}
	env := runEnv(t, what, c)
	env["PORT"] = strconv.FormatInt(c.Ports[0].ContainerPort, 10)
	cfg, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(env))
	if err != nil {
		t.Fatalf("%s: the observer would refuse to start: %v", what, err)
	}
	if cfg.Token != "" {
		t.Errorf("%s: want read-only as shipped", what)
	}
	checkRunProbes(t, what, c, cfg.Port)
	ann := svc.Spec.Template.Metadata.Annotations
	if ann["autoscaling.knative.dev/minScale"] != "1" || ann["run.googleapis.com/cpu-throttling"] != "false" {
		t.Errorf("%s: want an instance always up with CPU always allocated (the stale watch runs between requests)", what)
	}
	if svc.Metadata.Annotations["run.googleapis.com/ingress"] != "internal" {
		t.Errorf("%s: ingress %q, want internal", what, svc.Metadata.Annotations["run.googleapis.com/ingress"])
	}
}
