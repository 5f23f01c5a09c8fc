package manifesttest

import (
	"context"
	"slices"
	"testing"

	"github.com/sethvargo/go-envconfig"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/dtq/dtq/observer"
)

const observerDir = "observer"

// TestObserverPod: every build with workers runs one observer Deployment that starts (its
// environment passes the observer's own loader), is read-only until an operator creates
// the token's Secret, probes the paths it serves on the port it listens on, is locked
// down, and is reached through a Service and admitted by a NetworkPolicy of its own.
func TestObserverPod(t *testing.T) {
	t.Parallel()
	for _, dir := range kustomizations(t) {
		objs := build(t, dir)
		if len(find(objs, "ScaledObject", ""))+len(find(objs, "ScaledJob", "")) == 0 {
			continue // the base alone
		}
		var pods []podRef
		for _, o := range find(objs, "Deployment", "") {
			d := o.value.(*appsv1.Deployment)
			if d.Spec.Template.Labels[componentLabel] == observerDir {
				pods = append(pods, podRef{o.String(), o.namespace, &d.Spec.Template.Spec, d.Spec.Template.Labels})
			}
		}
		if len(pods) != 1 {
			t.Fatalf("%s: %d observer Deployments, want 1", dir, len(pods))
		}
		p := pods[0]
		c := p.container(t)
		if !slices.Equal(c.Args, []string{"observer"}) {
			t.Errorf("%s: args %q, want [observer]", p.what, c.Args)
		}
		env := effectiveEnv(t, objs, p, c)
		cfg, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(env))
		if err != nil {
			t.Fatalf("%s: the observer would refuse to start: %v", p.what, err)
		}
		if cfg.Token != "" || !cfg.ReadOpen {
			t.Errorf("%s: want read-only by default (no token unless its Secret exists)", p.what)
		}
		tokenFromOptionalSecret := false
		for _, e := range c.Env {
			if e.Name == "DTQ_OBSERVER_TOKEN" {
				r := e.ValueFrom
				tokenFromOptionalSecret = e.Value == "" && r != nil && r.SecretKeyRef != nil && r.SecretKeyRef.Optional != nil && *r.SecretKeyRef.Optional
			}
		}
		if !tokenFromOptionalSecret {
			t.Errorf("%s: DTQ_OBSERVER_TOKEN must come from an optional Secret, never a literal", p.what)
		}
		// With the Secret created, it still starts.
		withToken := mapsClone(env)
		withToken["DTQ_OBSERVER_TOKEN"] = "a-token-of-24-bytes-long"
		if _, err := observer.LoadConfig(context.Background(), envconfig.MapLookuper(withToken)); err != nil {
			t.Errorf("%s: with its token Secret, the observer would refuse to start: %v", p.what, err)
		}
		checkProbes(t, p.what, c, cfg.Port, scalerHealthz, scalerReadyz, true, true)
		checkLockedDown(t, p, c)

		services := 0
		for _, o := range find(objs, "Service", "") {
			svc, ok := o.value.(*corev1.Service)
			if !ok || len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.labels)) {
				continue
			}
			services++
			for _, sp := range svc.Spec.Ports {
				if got := portNumber(t, o.String(), c, sp.TargetPort); got != cfg.Port {
					t.Errorf("%v: port %s targets %d, the observer listens on %d", o, sp.Name, got, cfg.Port)
				}
			}
		}
		if services != 1 {
			t.Errorf("%s: %d Services select the observer, want 1", dir, services)
		}
		policies := 0
		for _, o := range find(objs, "NetworkPolicy", "") {
			np := o.value.(*networkingv1.NetworkPolicy)
			if labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(p.labels)) {
				policies++
				if len(np.Spec.Ingress) == 0 {
					t.Errorf("%v: admits nothing", o)
				}
			}
		}
		if policies != 1 {
			t.Errorf("%s: %d NetworkPolicies select the observer, want 1", dir, policies)
		}
	}
}
