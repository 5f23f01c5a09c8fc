#!/usr/bin/env bash
# Builds the control plane of the end-to-end scaling test from Go modules (no cluster
# image can be pulled here): etcd, kube-apiserver, kube-controller-manager and kubectl,
# and KEDA's operator and metrics adapter. Each is built through a small wrapper module
# of its own into $DTQ_E2E_CACHE (default ~/.cache/dtq-e2e)/bin, named with its version:
# a binary already there is kept, so a warm run takes seconds.
#
#   deploy/e2e/build.sh            # build what is missing; print the binaries' paths
#   DTQ_E2E_CACHE=/x deploy/e2e/build.sh
#
# Cold on two cores: etcd ~1 min, kube-apiserver ~4 min, kube-controller-manager and
# kubectl ~1 min more, KEDA's operator ~6 min (more without KEDA's scalers in the build
# cache), its adapter ~1 min; about 440 MB of modules and 6 GB of build cache.
set -euo pipefail

ETCD_VERSION=v3.6.16
K8S_VERSION=v1.36.3
KEDA_VERSION=v2.21.0

cache=${DTQ_E2E_CACHE:-$HOME/.cache/dtq-e2e}
bin=$cache/bin
src=$cache/src
mkdir -p "$bin" "$src"
export GOFLAGS=-mod=mod CGO_ENABLED=0

say() { printf '%s build: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# wrapper DIR MODULE: an empty module in $src/DIR, its go.mod to be completed by the caller
wrapper() {
  rm -rf "${src:?}/$1"
  mkdir -p "$src/$1"
  printf 'module %s\n\ngo 1.26\n' "$2" >"$src/$1/go.mod"
}

# etcd: a four-line main around etcdmain.Main.
etcd=$bin/etcd-$ETCD_VERSION
if [ ! -x "$etcd" ]; then
  say "etcd $ETCD_VERSION"
  wrapper etcd dtq-e2e/etcd
  cat >"$src/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$src/etcd" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy && go build -trimpath -o "$etcd.tmp" . && mv "$etcd.tmp" "$etcd")
fi

# Kubernetes: k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them
# with ./staging paths; the wrapper replaces each with its published v0.x.y instead,
# generated from kubernetes' own go.mod.
k8s_staging=v0${K8S_VERSION#v1}
kube_missing=
for c in kube-apiserver kube-controller-manager kubectl; do
  [ -x "$bin/$c-$K8S_VERSION" ] || kube_missing=1
done
if [ -n "$kube_missing" ]; then
  say "kube-apiserver, kube-controller-manager, kubectl $K8S_VERSION (staging modules $k8s_staging)"
  wrapper kube dtq-e2e/kube
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  {
    printf '\nrequire k8s.io/kubernetes %s\n\n' "$K8S_VERSION"
    sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9.-]*\) => \./staging/src/k8s\.io/.*$#replace \1 => \1 '"$k8s_staging"'#p' "$gomod"
  } >>"$src/kube/go.mod"
  n=$(grep -c '^replace' "$src/kube/go.mod")
  [ "$n" -gt 20 ] || { say "only $n staging replaces found in $gomod"; exit 1; }
  (cd "$src/kube" \
    && go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION" \
    && for c in kube-apiserver kube-controller-manager kubectl; do
         go build -trimpath -o "$bin/$c-$K8S_VERSION.tmp" "k8s.io/kubernetes/cmd/$c" && mv "$bin/$c-$K8S_VERSION.tmp" "$bin/$c-$K8S_VERSION"
       done)
fi

# KEDA: the operator, the metrics adapter and the admission webhooks, built as tools of
# scaler/kedacompat (its go.mod names them), so with the same module versions, cgo
# setting and paths as the compatibility tests: KEDA's pkg/scalers, the slow part, is
# compiled once for both. (DTQ_E2E_NO_KEDA=1: not built, for a run of the Kubernetes
# part alone.)
keda_bins="keda-operator keda-adapter keda-webhooks"
keda_missing=
for c in $keda_bins; do [ -x "$bin/$c-$KEDA_VERSION" ] || keda_missing=1; done
if [ "${DTQ_E2E_NO_KEDA:-}" != 1 ] && [ -n "$keda_missing" ]; then
  kc=$(cd "$(dirname "$0")/../../scaler/kedacompat" && pwd)
  grep -q "github.com/kedacore/keda/v2 $KEDA_VERSION" "$kc/go.mod" \
    || { say "scaler/kedacompat/go.mod does not require KEDA $KEDA_VERSION"; exit 1; }
  say "KEDA operator, adapter and webhooks $KEDA_VERSION (tools of scaler/kedacompat)"
  for c in operator adapter webhooks; do
    (cd "$kc" && env -u CGO_ENABLED -u GOFLAGS go build -o "$bin/keda-$c-$KEDA_VERSION.tmp" "github.com/kedacore/keda/v2/cmd/$c")
    mv "$bin/keda-$c-$KEDA_VERSION.tmp" "$bin/keda-$c-$KEDA_VERSION"
  done
fi

for c in "etcd-$ETCD_VERSION" "kube-apiserver-$K8S_VERSION" "kube-controller-manager-$K8S_VERSION" "kubectl-$K8S_VERSION" "keda-operator-$KEDA_VERSION" "keda-adapter-$KEDA_VERSION" "keda-webhooks-$KEDA_VERSION"; do
  echo "$bin/$c"
done
