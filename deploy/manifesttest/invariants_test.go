package manifesttest

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/dtq/dtq/runtime"
)

// k8sDrainMargin is what a pod's terminationGracePeriodSeconds must leave beyond
// DTQ_DRAIN_TIMEOUT_S: after the drain deadline the worker cancels what still runs,
// hands those entries back and removes its heartbeat, a few Redis round trips that must
// not be cut by SIGKILL.
const k8sDrainMargin = 10 * time.Second

const (
	componentLabel = "app.kubernetes.io/component"
	workerDir      = "worker"
	scalerDir      = "scaler"
)

// workers returns the worker pod templates of a build: Deployments and Knative Services
// labelled component=worker, and the job templates of ScaledJobs.
func workers(objs []object) []podRef {
	var out []podRef
	for _, o := range objs {
		switch v := o.value.(type) {
		case *appsv1.Deployment:
			if v.Spec.Template.Labels[componentLabel] == workerDir {
				out = append(out, podRef{o.String(), o.namespace, &v.Spec.Template.Spec, v.Spec.Template.Labels})
			}
		case *servingv1.Service:
			out = append(out, podRef{o.String(), o.namespace, &v.Spec.Template.Spec.PodSpec, v.Spec.Template.Labels})
		case *kedav1alpha1.ScaledJob:
			if v.Spec.JobTargetRef != nil {
				out = append(out, podRef{o.String(), o.namespace, &v.Spec.JobTargetRef.Template.Spec, v.Spec.JobTargetRef.Template.Labels})
			}
		}
	}
	return out
}

// scalerPod returns the build's one scaler Deployment's pod template.
func scalerPod(t *testing.T, objs []object) podRef {
	t.Helper()
	var out []podRef
	for _, o := range find(objs, "Deployment", "") {
		d := o.value.(*appsv1.Deployment)
		if d.Spec.Template.Labels[componentLabel] == scalerDir {
			out = append(out, podRef{o.String(), o.namespace, &d.Spec.Template.Spec, d.Spec.Template.Labels})
		}
	}
	if len(out) != 1 {
		t.Fatalf("want one scaler Deployment, found %d", len(out))
	}
	return out[0]
}

// isKnative tells a Knative Service's pod template, whose grace period Knative sets.
func isKnative(p podRef) bool { return strings.Contains(p.what, "serving.knative.dev") }

// TestWorkerPods: every worker pod template of every build starts (its environment
// passes the worker's own config loader), probes the paths the binary serves on the
// port it listens on, is locked down, and gets more time after SIGTERM than it drains.
func TestWorkerPods(t *testing.T) {
	t.Parallel()
	total := 0
	for _, dir := range kustomizations(t) {
		objs := build(t, dir)
		for _, p := range workers(objs) {
			total++
			c := p.container(t)
			if len(c.Args) == 0 || c.Args[0] != "worker" {
				t.Errorf("%s: args %q, want [worker]", p.what, c.Args)
			}
			env := effectiveEnv(t, objs, p, c)
			if isKnative(p) {
				if _, set := env["PORT"]; set {
					t.Errorf("%s: sets PORT, which Knative reserves (it sets it to the container port)", p.what)
				}
				env["PORT"] = strconv.Itoa(int(c.Ports[0].ContainerPort))
			}
			cfg := workerConfig(t, p.what, env)
			checkProbes(t, p.what, c, cfg.Port, runtime.PathHealthz, runtime.PathReadyz, !isKnative(p) && !isJob(p), !isJob(p))
			checkLockedDown(t, p, c)
			if isKnative(p) {
				continue // knative_test.go checks its grace period
			}
			g := p.spec.TerminationGracePeriodSeconds
			if g == nil {
				t.Errorf("%s: no terminationGracePeriodSeconds (the default 30 s is not derived from the drain timeout)", p.what)
				continue
			}
			if grace := time.Duration(*g) * time.Second; grace < cfg.DrainTimeout+k8sDrainMargin {
				t.Errorf("%s: terminationGracePeriodSeconds %v < DTQ_DRAIN_TIMEOUT_S %v + %v", p.what, grace, cfg.DrainTimeout, k8sDrainMargin)
			}
		}
	}
	if total < 4 {
		t.Fatalf("found %d worker pod templates across the builds, want at least 4", total)
	}
}

func isJob(p podRef) bool { return strings.Contains(p.what, "ScaledJob") }

// TestScalerPod: the scaler's container starts with its environment, probes /healthz
// and /readyz on PORT, listens for gRPC on the port its Service forwards, and is given
// more than its shutdown timeout after SIGTERM.
func TestScalerPod(t *testing.T) {
	t.Parallel()
	for _, dir := range kustomizations(t) {
		objs := build(t, dir)
		if len(find(objs, "ScaledObject", ""))+len(find(objs, "ScaledJob", "")) == 0 {
			continue // the base alone
		}
		p := scalerPod(t, objs)
		c := p.container(t)
		if len(c.Args) == 0 || c.Args[0] != "scaler" {
			t.Errorf("%s: args %q, want [scaler]", p.what, c.Args)
		}
		env := effectiveEnv(t, objs, p, c)
		cfg := scalerConfig(t, p.what, env, &p)
		port := cfg.Port
		checkProbes(t, p.what, c, port, scalerHealthz, scalerReadyz, true, true)
		checkLockedDown(t, p, c)
		grpcPort := scalerGRPCPort(t, p, c, env)
		if grpcPort == port {
			t.Errorf("%s: gRPC and HTTP on the same port %d", p.what, port)
		}
		if g := p.spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= cfg.ShutdownTimeout {
			t.Errorf("%s: terminationGracePeriodSeconds %v not above DTQ_SCALER_SHUTDOWN_TIMEOUT_S %v", p.what, g, cfg.ShutdownTimeout)
		}
	}
}

// scalerGRPCPort is the port of DTQ_SCALER_ADDR, which must be the container port
// named grpc.
func scalerGRPCPort(t *testing.T, p podRef, c *corev1.Container, env map[string]string) int {
	t.Helper()
	_, ps, err := net.SplitHostPort(env["DTQ_SCALER_ADDR"])
	if err != nil {
		t.Fatalf("%s: DTQ_SCALER_ADDR %q: %v", p.what, env["DTQ_SCALER_ADDR"], err)
	}
	port, _ := strconv.Atoi(ps)
	for _, cp := range c.Ports {
		if cp.Name == "grpc" {
			if int(cp.ContainerPort) != port {
				t.Errorf("%s: container port grpc is %d, DTQ_SCALER_ADDR listens on %d", p.what, cp.ContainerPort, port)
			}
			return port
		}
	}
	t.Errorf("%s: no container port named grpc", p.what)
	return port
}

// externalTrigger returns the one external or external-push trigger of a ScaledObject
// or ScaledJob.
func externalTrigger(t *testing.T, what string, triggers []kedav1alpha1.ScaleTriggers) kedav1alpha1.ScaleTriggers {
	t.Helper()
	var out []kedav1alpha1.ScaleTriggers
	for _, tr := range triggers {
		if tr.Type == "external-push" || tr.Type == "external" {
			out = append(out, tr)
		}
	}
	if len(out) != 1 {
		t.Fatalf("%s: %d external triggers, want 1", what, len(out))
	}
	return out[0]
}

// TestTriggerReachesScaler: every ScaledObject and ScaledJob dials the build's scaler
// Service by its full DNS name on the Service port that forwards to the scaler's gRPC
// listener, the Service selects the scaler pods, and TLS is on at both ends or at none.
func TestTriggerReachesScaler(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, dir := range kustomizations(t) {
		objs := build(t, dir)
		for _, o := range scaled(objs) {
			checked++
			tr := externalTrigger(t, o.String(), o.triggers)
			checkScalerAddress(t, objs, o.object, tr)
			checkTLS(t, objs, o.object, tr)
		}
	}
	if checked < 4 {
		t.Fatalf("checked %d ScaledObjects and ScaledJobs, want at least 4", checked)
	}
}

func checkScalerAddress(t *testing.T, objs []object, o object, tr kedav1alpha1.ScaleTriggers) {
	t.Helper()
	addr := tr.Metadata["scalerAddress"]
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%v: scalerAddress %q: %v", o, addr, err)
		return
	}
	parts := strings.Split(host, ".")
	if len(parts) != 5 || parts[2] != "svc" || parts[3] != "cluster" || parts[4] != "local" {
		t.Errorf("%v: scalerAddress host %q is not SERVICE.NAMESPACE.svc.cluster.local (KEDA's operator resolves it from its own namespace)", o, host)
		return
	}
	var svc *corev1.Service
	for _, s := range find(objs, "Service", parts[0]) {
		if s.namespace == parts[1] && s.apiVersion == "v1" {
			svc = s.value.(*corev1.Service)
		}
	}
	if svc == nil {
		t.Errorf("%v: scalerAddress %q: no Service %s in namespace %s", o, addr, parts[0], parts[1])
		return
	}
	p := scalerPod(t, objs)
	if p.namespace != parts[1] || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("%v: Service %s does not select the scaler pods", o, svc.Name)
	}
	c := p.container(t)
	env := effectiveEnv(t, objs, p, c)
	grpcPort := scalerGRPCPort(t, p, c, env)
	for _, sp := range svc.Spec.Ports {
		if strconv.Itoa(int(sp.Port)) != port {
			continue
		}
		if got := portNumber(t, p.what, c, sp.TargetPort); got != grpcPort {
			t.Errorf("%v: Service port %d forwards to %d, the scaler's gRPC listens on %d", o, sp.Port, got, grpcPort)
		}
		return
	}
	t.Errorf("%v: Service %s has no port %s", o, svc.Name, port)
}

// checkTLS: a trigger that dials TLS meets a scaler that serves it, with the client
// certificate the scaler asks for; a plain-text trigger meets a plain-text scaler.
func checkTLS(t *testing.T, objs []object, o object, tr kedav1alpha1.ScaleTriggers) {
	t.Helper()
	params := map[string]bool{}
	if tr.AuthenticationRef != nil {
		kind := tr.AuthenticationRef.Kind
		if kind == "" {
			kind = "TriggerAuthentication"
		}
		tas := find(objs, kind, tr.AuthenticationRef.Name)
		if len(tas) != 1 {
			t.Errorf("%v: authenticationRef %s %q is not in the build", o, kind, tr.AuthenticationRef.Name)
			return
		}
		ta := tas[0].value.(*kedav1alpha1.TriggerAuthentication)
		for _, s := range ta.Spec.SecretTargetRef {
			// The external scaler's authParams (KEDA pkg/scalers/external_scaler.go).
			if !slices.Contains([]string{"caCert", "tlsClientCert", "tlsClientKey"}, s.Parameter) {
				t.Errorf("%v: TriggerAuthentication parameter %q is not one the external scaler reads", o, s.Parameter)
			}
			params[s.Parameter] = true
		}
		if params["tlsClientCert"] != params["tlsClientKey"] {
			t.Errorf("%v: tlsClientCert and tlsClientKey come together", o)
		}
	}
	dialsTLS := tr.Metadata["enableTLS"] == "true" || params["caCert"] || params["tlsClientCert"]
	p := scalerPod(t, objs)
	env := effectiveEnv(t, objs, p, p.container(t))
	servesTLS := env["DTQ_SCALER_TLS_CERT_FILE"] != ""
	if dialsTLS != servesTLS {
		t.Errorf("%v: the trigger dials TLS=%v, the scaler serves TLS=%v", o, dialsTLS, servesTLS)
	}
	if mtls := env["DTQ_SCALER_TLS_CLIENT_CA_FILE"] != ""; mtls && !params["tlsClientCert"] {
		t.Errorf("%v: the scaler requires a client certificate, the trigger sends none", o)
	}
	for _, v := range []string{"DTQ_SCALER_TLS_CERT_FILE", "DTQ_SCALER_TLS_KEY_FILE", "DTQ_SCALER_TLS_CLIENT_CA_FILE"} {
		if f := env[v]; f != "" && !mountedFromSecret(p, p.container(t), f) {
			t.Errorf("%s: %s=%s is not on a volume mounted from a Secret", p.what, v, f)
		}
	}
}

func mountedFromSecret(p podRef, c *corev1.Container, file string) bool {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range p.spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return true
			}
		}
	}
	return false
}

// TestScaleTargets: each ScaledObject scales a worker Deployment of its build (on
// Knative: the revision's Deployment, see knative_test.go), the queues and target per
// replica of its trigger are the worker's DTQ_QUEUES and DTQ_WORKER_CONCURRENCY, and it
// passes KEDA's own validators.
func TestScaleTargets(t *testing.T) {
	t.Parallel()
	for _, dir := range kustomizations(t) {
		objs := build(t, dir)
		for _, o := range find(objs, "ScaledObject", "") {
			so := o.value.(*kedav1alpha1.ScaledObject)
			for name, err := range map[string]error{
				"CheckReplicaCountBoundsAreValid": kedav1alpha1.CheckReplicaCountBoundsAreValid(so),
				"CheckFallbackValid":              kedav1alpha1.CheckFallbackValid(so),
				"ValidateTriggers":                kedav1alpha1.ValidateTriggers(so.Spec.Triggers),
			} {
				if err != nil {
					t.Errorf("%v: KEDA %s: %v", o, name, err)
				}
			}
			if so.IsUsingModifiers() {
				if _, err := kedav1alpha1.ValidateAndCompileScalingModifiers(so); err != nil {
					t.Errorf("%v: KEDA ValidateAndCompileScalingModifiers: %v", o, err)
				}
			}
			if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount != 0 {
				t.Errorf("%v: minReplicaCount %v, want 0 (scale to zero)", o, so.Spec.MinReplicaCount)
			}
			if so.Spec.Advanced == nil || so.Spec.Advanced.HorizontalPodAutoscalerConfig == nil ||
				so.Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior == nil ||
				so.Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior.ScaleDown == nil {
				t.Errorf("%v: no HPA scale-down behaviour (the default removes pods as fast as the backlog dips)", o)
			}
			p := scaleTarget(t, objs, o, so)
			c := p.container(t)
			env := effectiveEnv(t, objs, p, c)
			if isKnative(p) {
				env["PORT"] = strconv.Itoa(int(c.Ports[0].ContainerPort))
			}
			cfg := workerConfig(t, p.what, env)
			checkTriggerMatchesWorker(t, o, externalTrigger(t, o.String(), so.Spec.Triggers), cfg, objs)
		}
	}
}

// scaleTarget returns the pod template a ScaledObject scales.
func scaleTarget(t *testing.T, objs []object, o object, so *kedav1alpha1.ScaledObject) podRef {
	t.Helper()
	ref := so.Spec.ScaleTargetRef
	if ref == nil {
		t.Fatalf("%v: no scaleTargetRef", o)
	}
	if ref.Kind != "" && (ref.Kind != "Deployment" || ref.APIVersion != "apps/v1") {
		t.Fatalf("%v: scaleTargetRef %s %s, want an apps/v1 Deployment", o, ref.APIVersion, ref.Kind)
	}
	if ds := find(objs, "Deployment", ref.Name); len(ds) == 1 {
		d := ds[0].value.(*appsv1.Deployment)
		if d.Spec.Replicas != nil {
			t.Errorf("%v: Deployment %s sets replicas, which fights KEDA on every apply", o, ref.Name)
		}
		return podRef{ds[0].String(), ds[0].namespace, &d.Spec.Template.Spec, d.Spec.Template.Labels}
	}
	if p, ok := knativeTarget(t, objs, o, so); ok {
		return p
	}
	t.Fatalf("%v: scaleTargetRef %q is neither a Deployment of the build nor a Knative revision's", o, ref.Name)
	return podRef{}
}

// checkTriggerMatchesWorker: the trigger watches the queues the workers serve and sizes
// replicas by what one worker runs at once.
func checkTriggerMatchesWorker(t *testing.T, o object, tr kedav1alpha1.ScaleTriggers, cfg runtime.Config, objs []object) {
	t.Helper()
	var queues []string
	for _, q := range strings.Split(tr.Metadata["queues"], ",") {
		queues = append(queues, strings.TrimSpace(q))
	}
	slices.Sort(queues)
	served := slices.Clone(cfg.Queues)
	slices.Sort(served)
	if !slices.Equal(queues, served) {
		t.Errorf("%v: trigger queues %v, the workers serve %v", o, queues, served)
	}
	if got := tr.Metadata["targetPerReplica"]; got != strconv.Itoa(cfg.Concurrency) {
		t.Errorf("%v: targetPerReplica %q, the workers' DTQ_WORKER_CONCURRENCY is %d", o, got, cfg.Concurrency)
	}
	p := scalerPod(t, objs)
	senv := effectiveEnv(t, objs, p, p.container(t))
	if senv["DTQ_KEY_PREFIX"] != cfg.KeyPrefix {
		t.Errorf("%v: the scaler reads keys under %q, the workers write under %q", o, senv["DTQ_KEY_PREFIX"], cfg.KeyPrefix)
	}
}

// TestDisruptionBudgets: every PodDisruptionBudget selects the pods of one workload of
// its build, and the workers' never blocks a drain (maxUnavailable, not minAvailable).
func TestDisruptionBudgets(t *testing.T) {
	t.Parallel()
	for _, dir := range kustomizations(t) {
		objs := build(t, dir)
		for _, o := range find(objs, "PodDisruptionBudget", "") {
			pdb := o.value.(*policyv1.PodDisruptionBudget)
			sel, err := metav1LabelSelector(pdb)
			if err != nil {
				t.Errorf("%v: %v", o, err)
				continue
			}
			var matched []string
			pods := workers(objs)
			if len(find(objs, "ScaledObject", ""))+len(find(objs, "ScaledJob", "")) > 0 {
				pods = append(pods, scalerPod(t, objs))
			} else {
				pods = append(pods, baseScaler(objs)...)
			}
			for _, p := range pods {
				if sel.Matches(labels.Set(p.labels)) {
					matched = append(matched, p.what)
				}
			}
			if len(matched) != 1 {
				t.Errorf("%v: selects %d workloads %v, want 1", o, len(matched), matched)
			}
			if pdb.Spec.Selector.MatchLabels[componentLabel] == workerDir && pdb.Spec.MinAvailable != nil {
				t.Errorf("%v: minAvailable on workers blocks node drains at low replica counts; use maxUnavailable", o)
			}
		}
	}
}

func baseScaler(objs []object) []podRef {
	var out []podRef
	for _, o := range find(objs, "Deployment", "") {
		d := o.value.(*appsv1.Deployment)
		out = append(out, podRef{o.String(), o.namespace, &d.Spec.Template.Spec, d.Spec.Template.Labels})
	}
	return out
}

func metav1LabelSelector(pdb *policyv1.PodDisruptionBudget) (labels.Selector, error) {
	if pdb.Spec.Selector == nil || len(pdb.Spec.Selector.MatchLabels) == 0 {
		return nil, fmt.Errorf("no selector")
	}
	return labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels), nil
}
