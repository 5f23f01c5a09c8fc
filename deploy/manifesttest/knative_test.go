package manifesttest

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/network"
	"knative.dev/serving/pkg/apis/autoscaling"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
)

// knativeTarget resolves a ScaledObject's target to a Knative Service's revision.
func knativeTarget(t *testing.T, objs []object, o object, so *kedav1alpha1.ScaledObject) (podRef, bool) {
	t.Helper()
	for _, k := range find(objs, "Service", "") {
		svc, ok := k.value.(*servingv1.Service)
		if !ok {
			continue
		}
		if svc.Spec.Template.Name+"-deployment" == so.Spec.ScaleTargetRef.Name {
			return podRef{k.String(), k.namespace, &svc.Spec.Template.Spec.PodSpec, svc.Spec.Template.Labels}, true
		}
	}
	return podRef{}, false
}

// TestKnativeService: the Knative Service passes Knative's own defaulting and
// validation (reserved env vars, allowed pod fields, probe ports), uses the KEDA
// extension's class with our ScaledObject, and its timeoutSeconds, which Knative makes
// the pod's terminationGracePeriodSeconds, covers the queue-proxy drain that runs before
// the worker's SIGTERM plus DTQ_DRAIN_TIMEOUT_S plus the margin.
func TestKnativeService(t *testing.T) {
	t.Parallel()
	objs := build(t, filepath.Join(deployDir, "knative"))
	var found int
	for _, o := range find(objs, "Service", "") {
		svc, ok := o.value.(*servingv1.Service)
		if !ok {
			continue
		}
		found++
		ctx := apis.WithinCreate(context.Background())
		svc = svc.DeepCopy()
		svc.SetDefaults(ctx)
		if err := svc.Validate(ctx); err != nil {
			t.Errorf("%v: Knative's validation: %v", o, err)
		}
		ann := svc.Spec.Template.Annotations
		if ann[autoscaling.ClassAnnotationKey] != autoscaling.HPA {
			t.Errorf("%v: autoscaling class %q, want %q (handled by the KEDA extension)", o, ann[autoscaling.ClassAnnotationKey], autoscaling.HPA)
		}
		if ann[autoscaling.GroupName+"/scaled-object-auto-create"] != "false" {
			t.Errorf("%v: the KEDA extension would make its own ScaledObject beside ours", o)
		}
		if ann[autoscaling.MinScaleAnnotationKey] != "0" {
			t.Errorf("%v: min-scale %q, want 0", o, ann[autoscaling.MinScaleAnnotationKey])
		}
		p := podRef{o.String(), o.namespace, &svc.Spec.Template.Spec.PodSpec, svc.Spec.Template.Labels}
		c := p.container(t)
		env := effectiveEnv(t, objs, p, c)
		env["PORT"] = strconv.Itoa(int(c.Ports[0].ContainerPort))
		cfg := workerConfig(t, p.what, env)
		ts := svc.Spec.Template.Spec.TimeoutSeconds
		if ts == nil {
			t.Fatalf("%v: no timeoutSeconds", o)
		}
		if grace, need := time.Duration(*ts)*time.Second, network.DefaultDrainTimeout+cfg.DrainTimeout+k8sDrainMargin; grace < need {
			t.Errorf("%v: timeoutSeconds %v < queue-proxy drain %v + DTQ_DRAIN_TIMEOUT_S %v + %v", o, grace, network.DefaultDrainTimeout, cfg.DrainTimeout, k8sDrainMargin)
		}
		// The BYO ScaledObject: the revision's Deployment and an HPA named after it.
		rev := svc.Spec.Template.Name
		var sos []*kedav1alpha1.ScaledObject
		for _, so := range find(objs, "ScaledObject", "") {
			v := so.value.(*kedav1alpha1.ScaledObject)
			if v.Spec.ScaleTargetRef != nil && v.Spec.ScaleTargetRef.Name == rev+"-deployment" {
				sos = append(sos, v)
			}
		}
		if rev == "" || len(sos) != 1 {
			t.Fatalf("%v: revision %q, %d ScaledObjects for its Deployment; want a fixed revision name and one", o, rev, len(sos))
		}
		if a := sos[0].Spec.Advanced; a == nil || a.HorizontalPodAutoscalerConfig == nil || a.HorizontalPodAutoscalerConfig.Name != rev {
			t.Errorf("%v: the ScaledObject's HPA is not named after the revision %q (the extension follows that HPA)", o, rev)
		}
		if max := ann[autoscaling.MaxScaleAnnotationKey]; max != strconv.Itoa(int(sos[0].GetHPAMaxReplicas())) {
			t.Errorf("%v: max-scale %q, the ScaledObject's maxReplicaCount %d", o, max, sos[0].GetHPAMaxReplicas())
		}
	}
	if found != 1 {
		t.Fatalf("found %d Knative Services, want 1", found)
	}
}
