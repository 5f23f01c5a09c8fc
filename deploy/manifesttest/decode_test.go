package manifesttest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fileTypes are the Go types a file under deploy/ may decode into: Cloud Run's files
// have their own (see cloudrun_test.go), every other file is a Kubernetes object or a
// kustomization.
func fileTypes(path string) map[string]func() any {
	if filepath.Base(filepath.Dir(path)) == "cloudrun" {
		return cloudRunTypes
	}
	return kubeTypes
}

// TestEveryFileDecodesStrictly: every YAML file under deploy/ is a commented example
// whose every document decodes into its real Go type without an unknown field.
func TestEveryFileDecodesStrictly(t *testing.T) {
	t.Parallel()
	for _, f := range yamlFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, []byte("#")) {
			t.Errorf("%s: starts without a comment saying what it is and how to use it", f)
		}
		docs := splitDocs(data)
		if len(docs) == 0 {
			t.Errorf("%s: no document", f)
		}
		for _, d := range docs {
			if _, err := decodeStrict(f, d, fileTypes(f)); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestStrictDecodeCatchesTypos: the decoder the other tests rely on fails on a
// misspelt field, a duplicate key and an unknown kind (so they cannot pass vacuously).
func TestStrictDecodeCatchesTypos(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"misspelt field": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 1}\n",
		"duplicate key":  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {A: '1', A: '2'}\n",
		"unknown kind":   "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
		"misspelt KEDA":  "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec: {scaleTargetRef: {name: y}, cooldownPerod: 3, triggers: []}\n",
		"misspelt kust":  "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource: [a.yaml]\n",
	} {
		if _, err := decodeStrict(name, []byte(doc), kubeTypes); err == nil {
			t.Errorf("%s: decoded without error", name)
		} else if !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %q does not name its source", name, err)
		}
	}
}

// TestEveryKustomizationBuilds: kustomize builds every directory with a
// kustomization.yaml, and every object it emits decodes strictly.
func TestEveryKustomizationBuilds(t *testing.T) {
	t.Parallel()
	dirs := kustomizations(t)
	if len(dirs) < 5 {
		t.Fatalf("found %d kustomizations (%v), want base, keda, keda-tls, keda-job, knative", len(dirs), dirs)
	}
	for _, d := range dirs {
		objs := build(t, d)
		if len(objs) == 0 {
			t.Errorf("kustomize build %s: no objects", d)
		}
		seen := map[string]bool{}
		for _, o := range objs {
			if o.namespace == "" && o.kind != "Namespace" {
				t.Errorf("%v: no namespace", o)
			}
			k := o.kind + "/" + o.namespace + "/" + o.name
			if seen[k] {
				t.Errorf("kustomize build %s: %s twice", d, k)
			}
			seen[k] = true
		}
	}
}
