package manifesttest

import (
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
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
