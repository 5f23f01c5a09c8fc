// Package manifesttest proves the files under deploy/ right before anyone applies them.
//
// Every YAML file is decoded strictly (unknown or duplicate fields fail) into the Go type
// its platform uses: k8s.io/api for Kubernetes objects, KEDA's apis/keda/v1alpha1 (and
// its exported validators) for ScaledObject, ScaledJob and TriggerAuthentication,
// Knative's serving/v1 (and its own Validate) for the Knative Service, Google's run/v1
// for the Cloud Run YAML, and kustomize's types for kustomization.yaml. Every overlay is
// built with kustomize's own library (krusty), and the built objects must hold together:
//
//   - each worker's environment passes the worker's own config loader
//     (runtime.LoadConfig): heartbeat below visibility timeout and the rest of its rules;
//   - the time a platform grants after SIGTERM exceeds DTQ_DRAIN_TIMEOUT_S plus a margin;
//   - probe paths are the ones the binary serves, on the port it listens on (PORT);
//   - each ScaledObject's and ScaledJob's scalerAddress resolves to the scaler Service's gRPC port, its
//     metadata parses with the scaler's own parser, its queues and target match the
//     workers', and the Prometheus queries of the Cloud Run setup name metrics the
//     scaler exports;
//   - the user the manifests run as is the one the Dockerfile sets;
//   - one NetworkPolicy selects the scaler pods and admits KEDA's operator to the gRPC
//     port only and Prometheus to the HTTP port only (networkpolicy_test.go evaluates
//     its rules as the NetworkPolicy API defines them);
//   - a ScaledJob polls an "external" trigger (KEDA drops pushes for ScaledJobs), its
//     Jobs run one worker each that exits by itself (DTQ_WORKER_MAX_TASKS,
//     DTQ_WORKER_IDLE_EXIT_S) within activeDeadlineSeconds, and its scalingStrategy and
//     includePending start one Job per task nobody runs: checked with KEDA's own
//     ScaledJob arithmetic against the running scaler and real workers that run as its
//     Jobs with the manifest's environment.
//
// It is a module of its own (deploy/go.mod), so k8s.io, KEDA, Knative and kustomize
// never enter the dtq module's dependencies. Run it with:
//
//	cd deploy && go test ./manifesttest
package manifesttest
