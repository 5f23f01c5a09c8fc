package manifesttest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// deployDir is deploy/, the parent of this package.
const deployDir = ".."

// repoDir is the repository root (Dockerfile, the dtq module).
const repoDir = "../.."

// object is one decoded manifest: its typed value and where it came from.
type object struct {
	source     string // a file, or "kustomize build DIR"
	apiVersion string
	kind       string
	name       string
	namespace  string
	value      any // a pointer to the typed object
}

func (o object) String() string {
	return fmt.Sprintf("%s %s/%s (%s)", o.source, o.kind, o.name, o.apiVersion)
}

// kubeTypes maps apiVersion/kind to a constructor of its real Go type. A manifest of any
// other kind fails the tests: it would be decoded into nothing and proven of nothing.
var kubeTypes = map[string]func() any{
	"v1/Namespace":                                  func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":                             func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                                  func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                                     func() any { return &corev1.Secret{} },
	"v1/Service":                                    func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                            func() any { return &appsv1.Deployment{} },
	"batch/v1/Job":                                  func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":                 func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":            func() any { return &networkingv1.NetworkPolicy{} },
	"keda.sh/v1alpha1/ScaledObject":                 func() any { return &kedav1alpha1.ScaledObject{} },
	"keda.sh/v1alpha1/ScaledJob":                    func() any { return &kedav1alpha1.ScaledJob{} },
	"keda.sh/v1alpha1/TriggerAuthentication":        func() any { return &kedav1alpha1.TriggerAuthentication{} },
	"serving.knative.dev/v1/Service":                func() any { return &servingv1.Service{} },
	"kustomize.config.k8s.io/v1beta1/Kustomization": func() any { return &types.Kustomization{} },
}

// header is the part of a manifest that says what it is.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// decodeStrict decodes one YAML document into its Go type: unknown fields, duplicate
// keys and wrong types are errors. types maps apiVersion/kind to constructors.
func decodeStrict(source string, doc []byte, types map[string]func() any) (object, error) {
	var h header
	if err := yaml.Unmarshal(doc, &h); err != nil {
		return object{}, fmt.Errorf("%s: %w", source, err)
	}
	mk, ok := types[h.APIVersion+"/"+h.Kind]
	if !ok {
		return object{}, fmt.Errorf("%s: no Go type known for apiVersion %q kind %q", source, h.APIVersion, h.Kind)
	}
	v := mk()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return object{}, fmt.Errorf("%s: %s %q: %w", source, h.Kind, h.Metadata.Name, err)
	}
	return object{source: source, apiVersion: h.APIVersion, kind: h.Kind, name: h.Metadata.Name, namespace: h.Metadata.Namespace, value: v}, nil
}

// yamlFiles lists every .yaml/.yml file under deploy/, sorted.
func yamlFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(deployDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != deployDir {
			return filepath.SkipDir
		}
		if d.IsDir() && p == filepath.Join(deployDir, "prometheus") {
			return filepath.SkipDir // rule files, not objects: promtool checks them (observability_test.go)
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no YAML files under deploy/")
	}
	return files
}

// splitDocs splits a YAML stream on document separators.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(d []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// kustomizations lists the directories under deploy/ that hold a kustomization.yaml.
func kustomizations(t *testing.T) []string {
	t.Helper()
	var dirs []string
	for _, f := range yamlFiles(t) {
		if filepath.Base(f) == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	return dirs
}

var (
	buildMu    sync.Mutex
	buildCache = map[string][]object{}
)

// build runs kustomize (the library kubectl -k and kustomize use) on dir and decodes
// every object it emits strictly. Builds are cached: several tests read each one.
func build(t *testing.T, dir string) []object {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if objs, ok := buildCache[dir]; ok {
		return objs
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []object
	for _, r := range rm.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatalf("kustomize build %s: %v", dir, err)
		}
		o, err := decodeStrict("kustomize build "+dir, y, kubeTypes)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	buildCache[dir] = objs
	return objs
}

// find returns the objects of kind (and name, unless "") in objs.
func find(objs []object, kind, name string) []object {
	var out []object
	for _, o := range objs {
		if o.kind == kind && (name == "" || o.name == name) {
			out = append(out, o)
		}
	}
	return out
}

// one returns the single object of kind and name, failing the test otherwise.
func one[T any](t *testing.T, objs []object, kind, name string) T {
	t.Helper()
	found := find(objs, kind, name)
	if len(found) != 1 {
		t.Fatalf("want exactly one %s %q, found %d", kind, name, len(found))
	}
	return found[0].value.(T)
}
