package manifesttest

import (
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	runv1 "google.golang.org/api/run/v1"
)

// cloudRunTypes are the Go types of deploy/cloudrun/: Cloud Run's own API types
// (google.golang.org/api/run/v1) for the worker pool and the service, and CREMA's
// configuration, whose parts are KEDA's types.
var cloudRunTypes = map[string]func() any{
	"run.googleapis.com/v1/WorkerPool": func() any { return &runv1.WorkerPool{} },
	"serving.knative.dev/v1/Service":   func() any { return &runv1.Service{} },
	"crema/v1/CremaConfig":             func() any { return &cremaConfig{} },
}

// cremaConfig mirrors CREMA's CremaConfig (metric-provider/api/crema_config.go in
// GoogleCloudPlatform/cloud-run-external-metrics-autoscaling, not an importable module):
// KEDA's ScaledObjectSpec and a subset of its TriggerAuthentication.
type cremaConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		ScaledObjects []struct {
			Spec kedav1alpha1.ScaledObjectSpec `json:"spec"`
		} `json:"scaledObjects"`
		TriggerAuthentications []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				PodIdentity *struct {
					Provider string `json:"provider"`
				} `json:"podIdentity,omitempty"`
				GCPSecretManager *kedav1alpha1.GCPSecretManager `json:"gcpSecretManager,omitempty"`
			} `json:"spec"`
		} `json:"triggerAuthentications"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
	} `json:"spec"`
}
