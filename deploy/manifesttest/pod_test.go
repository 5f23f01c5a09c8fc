package manifesttest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/dtq/dtq/runtime"
)

// redisURLPlaceholder stands in for DTQ_REDIS_URL, which comes from a Secret the user
// creates: the config loaders need some valid URL to check the rest.
const redisURLPlaceholder = "redis://redis.invalid:6379/0"

// podRef is a pod template found in a build, with the namespace its objects live in.
type podRef struct {
	what      string // for messages
	namespace string
	spec      *corev1.PodSpec
	labels    map[string]string
}

// container returns the pod's only container (dtq pods run one).
func (p podRef) container(t *testing.T) *corev1.Container {
	t.Helper()
	if len(p.spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", p.what, len(p.spec.Containers))
	}
	return &p.spec.Containers[0]
}

// effectiveEnv resolves a container's environment the way the kubelet does: envFrom
// ConfigMaps first, then env entries, with references resolved against the build.
// Secrets are not in the build: a secret DTQ_REDIS_URL becomes a placeholder URL.
func effectiveEnv(t *testing.T, objs []object, p podRef, c *corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	configMap := func(name string, optional *bool) *corev1.ConfigMap {
		for _, o := range find(objs, "ConfigMap", name) {
			if o.namespace == p.namespace {
				return o.value.(*corev1.ConfigMap)
			}
		}
		if optional == nil || !*optional {
			t.Errorf("%s: ConfigMap %q is not in the build", p.what, name)
		}
		return nil
	}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			if cm := configMap(ef.ConfigMapRef.Name, ef.ConfigMapRef.Optional); cm != nil {
				for k, v := range cm.Data {
					env[ef.Prefix+k] = v
				}
			}
		default:
			t.Errorf("%s: envFrom other than a ConfigMap: the tests cannot see what it sets", p.what)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			switch r := e.ValueFrom.SecretKeyRef; {
			case e.Name == "DTQ_REDIS_URL":
				env[e.Name] = redisURLPlaceholder
			case e.Name == "DTQ_OBSERVER_TOKEN" && r.Optional != nil && *r.Optional:
				// Read-only by default: the Secret is not created by the manifests, so
				// the variable is unset until an operator creates it.
			default:
				t.Errorf("%s: %s from a Secret: only DTQ_REDIS_URL (and an optional DTQ_OBSERVER_TOKEN) is expected there", p.what, e.Name)
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			if cm := configMap(r.Name, r.Optional); cm != nil {
				v, ok := cm.Data[r.Key]
				if !ok {
					t.Errorf("%s: %s: ConfigMap %q has no key %q", p.what, e.Name, r.Name, r.Key)
				}
				env[e.Name] = v
			}
		case e.ValueFrom.FieldRef != nil:
			if e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("%s: %s from field %q: only metadata.name is expected", p.what, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = "dtq-worker-7d9f8c6b5-x2x4q"
		case e.ValueFrom.ResourceFieldRef != nil:
			r := e.ValueFrom.ResourceFieldRef.Resource
			name, ok := strings.CutPrefix(r, "limits.")
			q, set := c.Resources.Limits[corev1.ResourceName(name)]
			if !ok || !set {
				t.Errorf("%s: %s from %s, but the container sets no such limit (it would get the node's)", p.what, e.Name, r)
				continue
			}
			env[e.Name] = strconv.FormatInt(q.Value(), 10)
		default:
			t.Errorf("%s: %s: an env source the tests do not resolve", p.what, e.Name)
		}
	}
	return env
}

// knownVars are the variables a dtq container may set: its own (from the binary's
// EnvVars), PORT, and the Go runtime's.
func checkKnownVars(t *testing.T, what string, env map[string]string, own []string) {
	t.Helper()
	known := map[string]bool{"PORT": true, "GOMEMLIMIT": true, "GOMAXPROCS": true, "GOGC": true}
	for _, v := range own {
		known[v] = true
	}
	for k := range env {
		if !known[k] {
			t.Errorf("%s: sets %s, which the binary does not read (a typo?)", what, k)
		}
	}
}

func workerVarNames() []string {
	var names []string
	for _, v := range runtime.EnvVars() {
		names = append(names, v.Name)
	}
	return names
}

// workerConfig loads env with the worker's own loader, so every rule the binary
// enforces at start (heartbeat < visibility timeout, ...) holds for the manifest.
func workerConfig(t *testing.T, what string, env map[string]string) runtime.Config {
	t.Helper()
	checkKnownVars(t, what, env, workerVarNames())
	cfg, err := runtime.LoadConfig(context.Background(), envconfig.MapLookuper(env))
	if err != nil {
		t.Fatalf("%s: the worker would refuse to start: %v", what, err)
	}
	if cfg.HeartbeatInterval >= cfg.VisibilityTimeout {
		t.Errorf("%s: heartbeat %v is not below the visibility timeout %v", what, cfg.HeartbeatInterval, cfg.VisibilityTimeout)
	}
	return cfg
}

// portNumber resolves a probe's port against the container's ports; empty means the
// platform's default (Knative: the one container port).
func portNumber(t *testing.T, what string, c *corev1.Container, port intstr.IntOrString) int {
	t.Helper()
	if port == (intstr.IntOrString{}) || port == intstr.FromString("") {
		if len(c.Ports) != 1 {
			t.Fatalf("%s: probe without a port and %d container ports", what, len(c.Ports))
		}
		return int(c.Ports[0].ContainerPort)
	}
	if port.Type == intstr.String {
		for _, cp := range c.Ports {
			if cp.Name == port.StrVal {
				return int(cp.ContainerPort)
			}
		}
		t.Fatalf("%s: probe port %q names no container port", what, port.StrVal)
	}
	return port.IntValue()
}

// checkProbes: liveness and startup on healthz, readiness on readyz (a liveness probe
// on readyz would restart every draining pod), all on the port the binary listens on.
// A Job's pod needs no readiness probe: no Service routes to it.
func checkProbes(t *testing.T, what string, c *corev1.Container, listen int, healthz, readyz string, needStartup, needReadiness bool) {
	t.Helper()
	for _, pr := range []struct {
		name  string
		probe *corev1.Probe
		path  string
		need  bool
	}{
		{"startupProbe", c.StartupProbe, healthz, needStartup},
		{"livenessProbe", c.LivenessProbe, healthz, true},
		{"readinessProbe", c.ReadinessProbe, readyz, needReadiness},
	} {
		if pr.probe == nil {
			if pr.need {
				t.Errorf("%s: no %s", what, pr.name)
			}
			continue
		}
		g := pr.probe.HTTPGet
		if g == nil {
			t.Errorf("%s: %s is not an HTTP GET", what, pr.name)
			continue
		}
		if g.Path != pr.path {
			t.Errorf("%s: %s on %q, want %q", what, pr.name, g.Path, pr.path)
		}
		if got := portNumber(t, what, c, g.Port); got != listen {
			t.Errorf("%s: %s on port %d, but the binary listens on %d (PORT)", what, pr.name, got, listen)
		}
	}
}

// dockerfileUser is the numeric USER of the Dockerfile's final stage.
func dockerfileUser(t *testing.T) (uid, gid int64) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^USER\s+(\d+)(?::(\d+))?\s*$`).FindAllStringSubmatch(string(data), -1)
	if len(m) == 0 {
		t.Fatal("Dockerfile: no numeric USER")
	}
	last := m[len(m)-1]
	uid, _ = strconv.ParseInt(last[1], 10, 64)
	gid = uid
	if last[2] != "" {
		gid, _ = strconv.ParseInt(last[2], 10, 64)
	}
	if uid == 0 {
		t.Fatal("Dockerfile: USER is root")
	}
	return uid, gid
}

// checkLockedDown: non-root (the Dockerfile's user), read-only root filesystem, no
// privilege escalation, no capabilities.
func checkLockedDown(t *testing.T, p podRef, c *corev1.Container) {
	t.Helper()
	uid, gid := dockerfileUser(t)
	psc := p.spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no container securityContext", p.what)
		return
	}
	pick := func(a, b *int64) *int64 {
		if a != nil {
			return a
		}
		return b
	}
	if v := pick(sc.RunAsUser, psc.RunAsUser); v == nil || *v != uid {
		t.Errorf("%s: runAsUser %v, want the Dockerfile's %d", p.what, v, uid)
	}
	if v := pick(sc.RunAsGroup, psc.RunAsGroup); v == nil || *v != gid {
		t.Errorf("%s: runAsGroup %v, want the Dockerfile's %d", p.what, v, gid)
	}
	nonRoot := sc.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = psc.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Errorf("%s: runAsNonRoot not set", p.what)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root filesystem not read-only", p.what)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation not false", p.what)
	}
	if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("%s: capabilities %+v, want drop ALL and add none", p.what, sc.Capabilities)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccomp profile %+v, want RuntimeDefault", p.what, seccomp)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		t.Errorf("%s: no CPU request", p.what)
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Errorf("%s: no memory limit", p.what)
	}
	if strings.TrimSpace(c.Image) == "dtq" || c.Image == "" {
		t.Errorf("%s: image %q was not set by the kustomization's images:", p.what, c.Image)
	}
}
