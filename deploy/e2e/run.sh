#!/usr/bin/env bash
# The end-to-end scaling test: dtq's scaler driven by the real KEDA operator and metrics
# adapter, against a real kube-apiserver and the HPA controller (controlplane.sh), all as
# local processes built from their Go modules (build.sh; cold, about 15 min on two cores).
#
#   deploy/e2e/run.sh
#
# What it runs now:
#   1. deploy/kubernetes/keda is applied as written, apart from the image and the scaler
#      address (dtq-scaler runs on loopback): the apiserver accepts every object;
#   2. the ScaledObject becomes Ready (KEDA reached the scaler) and KEDA creates its HPA;
#   3. 0 → 1 by push: N times, a task enqueued at zero replicas, and the time until the
#      Deployment's spec.replicas is 1 (the test then sets it back to 0 and waits until
#      the scaler sees the queue empty again).
# It stops every process it started, on success or failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
wakes=${E2E_WAKES:-5}

dir=$(mktemp -d /tmp/dtq-e2e.XXXXXX)
cleanup() {
  st=$?
  "$here/controlplane.sh" down "$dir" || true
  if [ $st = 0 ]; then rm -rf "$dir"; else say "failed: logs kept in $dir/logs"; fi
}
trap cleanup EXIT
say() { printf '%s e2e: %s\n' "$(date -u +%H:%M:%S.%3N)" "$*" >&2; }

"$here/controlplane.sh" up "$dir"
mapfile -t bins < <("$here/build.sh")
kubectl=${bins[3]}
k() { "$kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }

# dtq's own parts: a redis-server and the scaler on loopback, ports from the same base
base=${E2E_PORT_BASE:-27400}
redis_port=$((base + 10)) scaler_port=$((base + 11)) scaler_http=$((base + 12))
mkdir -p "$dir/bin"
(cd "$root" && CGO_ENABLED=0 go build -o "$dir/bin/" ./cmd/dtq ./cmd/dtq-scaler)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$dir/logs/redis.log" 2>&1 &
echo $! >"$dir/pids/redis"
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
export DTQ_REDIS_URL=redis://127.0.0.1:$redis_port/0 DTQ_KEY_PREFIX=e2e
DTQ_SCALER_ADDR=127.0.0.1:$scaler_port PORT=$scaler_http DTQ_LOG_LEVEL=warn "$dir/bin/dtq-scaler" >"$dir/logs/dtq-scaler.log" 2>&1 &
echo $! >"$dir/pids/dtq-scaler"

say "deploy/kubernetes/keda, the scaler address on loopback"
k kustomize "$root/deploy/kubernetes/keda" \
  | sed -e "s#scalerAddress: .*#scalerAddress: 127.0.0.1:$scaler_port#" -e 's#image: registry.example.com/dtq:latest#image: dtq:e2e#' \
  >"$dir/keda.yaml"
k apply --server-side -f "$dir/keda.yaml" >"$dir/logs/apply.log"
# the Secret the base asks to be created before applying (KEDA resolves the target's env)
k -n dtq create secret generic dtq-redis --from-literal=DTQ_REDIS_URL="$DTQ_REDIS_URL" >/dev/null
say "applied: $(grep -c serverside-applied "$dir/logs/apply.log") objects accepted"
k -n dtq scale deployment/dtq-worker --replicas 0 >/dev/null
k -n dtq wait scaledobject/dtq-worker --for condition=Ready --timeout 120s >/dev/null
say "ScaledObject Ready"
for _ in $(seq 600); do k -n dtq get hpa dtq-worker >/dev/null 2>&1 && break; sleep 0.1; done
k -n dtq get hpa dtq-worker -o jsonpath='{.spec.metrics[*].external.metric.name}{"\n"}' >"$dir/hpa-metrics"
say "HPA created with metrics: $(cat "$dir/hpa-metrics")"

replicas() { k -n dtq get deployment dtq-worker -o jsonpath='{.spec.replicas}'; }
ms() { date +%s%3N; }
# A watch stamps each change of spec.replicas as the apiserver reports it ("MS N" lines):
# a kubectl call per poll would cost ~70 ms of granularity.
k -n dtq get deployment dtq-worker --watch -o jsonpath='{.spec.replicas}{"\n"}' \
  | while read -r n; do echo "$(date +%s%3N) $n"; done >"$dir/replicas.log" &
echo $! >"$dir/pids/watch"
: >"$dir/wakes"
for i in $(seq "$wakes"); do
  [ "$(replicas)" = 0 ] || { say "replicas $(replicas) before wake $i, want 0"; exit 1; }
  t0=$(ms)
  id=$("$dir/bin/dtq" enqueue --queue default --function noop)
  t1=
  until [ -n "$t1" ]; do
    t1=$(awk -v t0="$t0" '$1 >= t0 && $2 == 1 {print $1; exit}' "$dir/replicas.log")
    [ $(($(ms) - t0)) -lt 30000 ] || { say "wake $i: replicas still $(replicas) after 30 s"; exit 1; }
    [ -n "$t1" ] || sleep 0.01
  done
  echo $((t1 - t0)) >>"$dir/wakes"
  say "wake $i: 0 → 1 in $((t1 - t0)) ms (task $id)"
  # no kubelet: the task is taken off the queue by hand, and the replicas set back to 0
  redis-cli -p "$redis_port" --scan --pattern 'e2e:*' | xargs -r redis-cli -p "$redis_port" del >/dev/null
  k -n dtq scale deployment/dtq-worker --replicas 0 >/dev/null
  sleep 1
done
sort -n "$dir/wakes" | awk '{a[NR]=$1} END {printf "0 -> 1 by push over %d wakes (dtq enqueue exec to spec.replicas 1): p50 %d ms, p90 %d ms, max %d ms\n", NR, a[int((NR+1)/2)], a[int(NR*0.9+0.5)], a[NR]}'
