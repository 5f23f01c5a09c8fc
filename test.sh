#!/usr/bin/env bash
# The project's test command.
#   ./test.sh          gofmt, go vet, staticcheck and go test -race of the main module
#                      (the dashboard's tests in headless Chromium among them), then
#                      the Python producer's pytest suite (installs redis-server,
#                      chromium, python3-redis and python3-pytest when missing)
#   ./test.sh --all    also the suites CI runs: KEDA compatibility (nested module; a cold
#                      build of KEDA takes ~15 min), deploy manifests, the container
#                      lifecycle tests when a Docker engine answers, and the end-to-end
#                      scaling test on a real KEDA control plane (deploy/e2e)
set -euo pipefail
cd "$(dirname "$0")"

# What the tests run on, installed from Debian when missing, in one apt call:
# redis-server (every Redis test), chromium (the observer's dashboard tests, headless;
# DTQ_SKIP_BROWSER=1 leaves them out), and python3-redis and python3-pytest for
# /usr/bin/python3 (the Python producer, clients/python, whose cross-language test is
# one of the Go tests below; DTQ_SKIP_PYTHON=1 leaves the Python side out).
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ "${DTQ_SKIP_BROWSER:-}" != 1 ] && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  missing+=(chromium)
fi
if [ "${DTQ_SKIP_PYTHON:-}" != 1 ] && ! /usr/bin/python3 -c 'import redis, pytest' >/dev/null 2>&1; then
  missing+=(python3-redis python3-pytest)
fi
# --all: jq, curl and openssl for the end-to-end scaling test (deploy/e2e)
if [ "${1:-}" = "--all" ]; then
  for c in jq curl openssl; do command -v $c >/dev/null 2>&1 || missing+=($c); done
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}" >&2
  sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './vendor/*'))
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt would change:" $unformatted >&2
  exit 1
fi
# Every module's go.mod and go.sum as go mod tidy leaves them: a stale nested module
# (a dependency moved in the root) would otherwise fail only under --all.
for m in . scaler/kedacompat deploy; do
  [ -f "$m/go.mod" ] || continue
  if ! (cd "$m" && go mod tidy -diff >/dev/null); then
    echo "test.sh: $m: go.mod or go.sum is not tidy (run go mod tidy there)" >&2
    exit 1
  fi
done
go vet ./...
# staticcheck, its checks as staticcheck.conf sets them; installed from the Go module
# proxy when missing (the version is pinned: a new release can add checks)
staticcheck_version=v0.8.2
sc=$(go env GOPATH)/bin/staticcheck
if ! "$sc" -version 2>/dev/null | grep -q "(${staticcheck_version#v})"; then
  echo "test.sh: installing staticcheck $staticcheck_version" >&2
  GOFLAGS= go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
fi
"$sc" ./...
# The chaos package runs worker processes against a visibility timeout of seconds: it
# runs after the other packages, not beside them, so two cores' worth of other tests
# cannot starve its workers into looking dead.
go test -race -count=1 $(go list ./... | grep -v '/chaos$')
go test -race -count=1 ./chaos/...
if [ "${DTQ_SKIP_PYTHON:-}" != 1 ]; then
  PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider clients/python
else
  echo "test.sh: DTQ_SKIP_PYTHON=1: the Python producer's tests not run" >&2
fi

if [ "${1:-}" = "--all" ]; then
  # Without -race: a cold race build of KEDA's pkg/scalers takes over an hour on two
  # cores (15 min without); the scaler's own race-tested code is in the main module.
  KEDACOMPAT_RACE=0 scaler/kedacompat/run.sh
  if [ -f deploy/go.mod ]; then
    # promtool checks and unit-tests the alert rules: Debian's prometheus package holds
    # it. Where it is missing, the package is unpacked into a temporary directory (not
    # installed: no Prometheus service is set up or started).
    if [ -z "${DTQ_PROMTOOL:-}" ] && ! command -v promtool >/dev/null 2>&1; then
      promdir=$(mktemp -d)
      trap 'rm -rf "$promdir"' EXIT
      echo "test.sh: unpacking promtool from Debian's prometheus package" >&2
      (cd "$promdir" && { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus >/dev/null; }; } \
        && dpkg-deb -x prometheus_*.deb root)
      export DTQ_PROMTOOL="$promdir/root/usr/bin/promtool"
    fi
    (cd deploy && go vet ./... && go test -count=1 ./...)
  fi
  if [ -x deploy/test/run.sh ]; then
    if docker info >/dev/null 2>&1; then
      deploy/test/run.sh
    else
      echo "test.sh: no Docker engine answers; container lifecycle tests not run" >&2
    fi
  fi
  # the control plane's teardown stops what it started and nothing else (a pid reused)
  deploy/e2e/down_test.sh
  # dtq scaled by the real KEDA operator, adapter and webhooks against a real
  # kube-apiserver and HPA controller (deploy/e2e/README.md). Cold, build.sh adds etcd,
  # kube-apiserver, kube-controller-manager and kubectl (~20 min) and KEDA's binaries
  # (minutes: they share the compatibility tests' build of pkg/scalers); the run ~5 min.
  deploy/e2e/run.sh
fi
echo "test.sh: all green"
