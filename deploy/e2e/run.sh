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

# 1 → N: a runner follows spec.replicas as a kubelet would, starting `dtq worker`
# processes with the Deployment's settings and SIGTERMing the newest when it shrinks; a
# burst of long tasks at zero replicas wakes the Deployment by push, and the HPA, fed by
# dtq's metric through KEDA's adapter, raises it to what targetPerReplica implies.
burst=${E2E_BURST:-64} target=16
runner() {
  local -a pids=()
  local want n=0 seq=0
  while :; do
    want=$(tail -1 "$dir/replicas.log" | awk '{print $2}')
    want=${want:-0}
    while [ "$n" -lt "$want" ]; do
      seq=$((seq + 1))
      DTQ_WORKER_ID=e2e-w$seq DTQ_QUEUES=default DTQ_WORKER_CONCURRENCY=16 DTQ_VISIBILITY_TIMEOUT_S=30 \
        DTQ_HEARTBEAT_INTERVAL_S=5 DTQ_DRAIN_TIMEOUT_S=30 PORT=0 DTQ_LOG_LEVEL=warn \
        "$dir/bin/dtq" worker >"$dir/logs/worker-$seq.log" 2>&1 &
      pids[n]=$!
      echo $! >"$dir/pids/worker-$seq"
      echo "$(date +%s%3N) start $seq" >>"$dir/runner.log"
      n=$((n + 1))
    done
    while [ "$n" -gt "$want" ]; do
      n=$((n - 1))
      kill -TERM "${pids[n]}" 2>/dev/null || true
      echo "$(date +%s%3N) stop" >>"$dir/runner.log"
    done
    sleep 0.05
  done
}
runner &
echo $! >"$dir/pids/runner"
want_n=$(((burst + target - 1) / target))
say "1 → N: $burst tasks of 4 s at zero replicas (targetPerReplica $target: N = $want_n)"
t0=$(ms)
for i in $(seq "$burst"); do
  "$dir/bin/dtq" enqueue --queue default --function sleep --payload '{"ms":4000}' >/dev/null
done
t_enq=$(ms)
tn=
until [ -n "$tn" ]; do
  tn=$(awk -v t0="$t0" -v n="$want_n" '$1 >= t0 && $2 >= n {print $1; exit}' "$dir/replicas.log")
  [ $(($(ms) - t0)) -lt 60000 ] || { say "replicas $(replicas) a minute after the burst, want $want_n"; exit 1; }
  [ -n "$tn" ] || sleep 0.05
done
t1=$(awk -v t0="$t0" '$1 >= t0 && $2 >= 1 {print $1; exit}' "$dir/replicas.log")
say "1 → N: the burst enqueued in $((t_enq - t0)) ms; replicas 1 after $((t1 - t0)) ms, $want_n after $((tn - t0)) ms"
# every task runs once: wait for the queue to drain, then count what succeeded
# tally FIELD: how many of the queue's tasks hold each value of FIELD ("64 succeeded")
tally() {
  redis-cli -p "$redis_port" --scan --pattern 'e2e:{default}:t:*' | while read -r key; do echo "HGET $key $1"; done \
    | redis-cli -p "$redis_port" | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}'
}
statuses() { tally status; }
until [ "$(statuses)" = "$burst succeeded" ]; do
  [ $(($(ms) - t0)) -lt 120000 ] || { say "tasks not all succeeded two minutes after the burst"; exit 1; }
  sleep 0.5
done
attempts=$(tally attempt)
[ "$attempts" = "$burst 1" ] || { say "attempts of the burst's tasks: $attempts (want every one 1)"; exit 1; }
say "the burst's $burst tasks all succeeded, each at its first attempt, $(($(ms) - t0)) ms after it began; peak replicas $(awk -v t0="$t0" '$1 >= t0 && $2 > m {m=$2} END {print m}' "$dir/replicas.log"), workers started $(grep -c start "$dir/runner.log")"
awk '{print}' "$dir/replicas.log" >"$dir/logs/replicas.log"

# N → 0 with work in flight: the manifest's scale-down is cautious (a 120 s window, half
# the replicas a minute, cooldownPeriod 120 s before zero); the test shortens those on the
# live objects, keeping everything else. A second burst mixes 1 s and 8 s tasks: as the
# short ones finish, the HPA lowers the replicas while workers still run long ones, and
# the runner SIGTERMs those workers, which drain (DTQ_DRAIN_TIMEOUT_S 30) and finish
# them. Every task must succeed, each at its first attempt, and the replicas reach 0.
k -n dtq patch scaledobject dtq-worker --type merge -p '{"spec":{"cooldownPeriod":5,"advanced":{"horizontalPodAutoscalerConfig":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0,"policies":[{"type":"Percent","value":100,"periodSeconds":1}]}}}}}}' >/dev/null
for _ in $(seq 600); do [ "$(replicas)" = 0 ] && break; sleep 0.1; done
[ "$(replicas)" = 0 ] || { say "replicas $(replicas) after the patch, want 0 (the first burst is done)"; exit 1; }
stops_before=$(grep -c stop "$dir/runner.log" || true)
t2=$(ms)
say "N → 0: scale-down shortened (cooldownPeriod 5 s, no window); a burst of $burst tasks, half 1 s, half 8 s"
for i in $(seq "$burst"); do
  d=1000; [ $((i % 2)) = 0 ] && d=8000
  "$dir/bin/dtq" enqueue --queue default --function sleep --payload "{\"ms\":$d}" >/dev/null
done
total=$((burst * 2))
until [ "$(statuses)" = "$total succeeded" ]; do
  [ $(($(ms) - t2)) -lt 120000 ] || { say "second burst: $(statuses) two minutes on"; exit 1; }
  sleep 0.2
done
t_done=$(ms)
tz=
until [ -n "$tz" ]; do
  tz=$(awk -v t0="$t_done" '$1 >= t0 - 60000 {last=$2; at=$1} END {if (last == 0) print at}' "$dir/replicas.log")
  [ $(($(ms) - t_done)) -lt 120000 ] || { say "replicas $(replicas) two minutes after the last task ended"; exit 1; }
  [ -n "$tz" ] || sleep 0.2
done
attempts=$(tally attempt)
[ "$attempts" = "$total 1" ] || { say "attempts: $attempts (want every one 1)"; exit 1; }
stopped=$(($(grep -c stop "$dir/runner.log") - stops_before))
handed=$(cat "$dir"/logs/worker-*.log | grep -c 'handed back' || true)
say "N → 0: the $burst tasks all succeeded $((t_done - t2)) ms after the burst began, each at its first attempt; $stopped workers SIGTERMed on the way ($handed hand-backs logged); replicas 0 $((tz - t_done)) ms after the last task ended"
awk -v t0="$t2" '$1 >= t0 {printf "%s%s@%d", sep, $2, $1 - t0; sep=" → "} END {print ""}' "$dir/replicas.log" \
  | sed 's/^/replicas since the second burst (count@ms): /' >&2

# A delayed task at zero replicas: with scheduledLead the Deployment is woken that long
# before the task falls due (no worker runs to move it, so the scaler's timer must). The
# trigger's lead is set on the live object (the manifest leaves the 0 s default).
lead_ms=2000 delay_ms=6000
k -n dtq patch scaledobject dtq-worker --type json \
  -p '[{"op":"add","path":"/spec/triggers/0/metadata/scheduledLead","value":"2s"}]' >/dev/null
for _ in $(seq 600); do [ "$(replicas)" = 0 ] && break; sleep 0.1; done
sleep 2 # KEDA rebuilds the trigger's scaler and reopens its push stream
t3=$(ms)
id=$("$dir/bin/dtq" enqueue --queue default --function noop --delay "${delay_ms}ms")
due=$((t3 + delay_ms))
tw=
until [ -n "$tw" ]; do
  tw=$(awk -v t0="$t3" '$1 >= t0 && $2 >= 1 {print $1; exit}' "$dir/replicas.log")
  [ $(($(ms) - t3)) -lt 30000 ] || { say "delayed task: replicas $(replicas) 30 s after its enqueue"; exit 1; }
  [ -n "$tw" ] || sleep 0.05
done
early=$((due - tw))
[ "$early" -ge $((lead_ms - 500)) ] && [ "$early" -le $((lead_ms + 500)) ] \
  || { say "delayed task: woken $early ms before it fell due, want about $lead_ms"; exit 1; }
until [ "$(redis-cli -p "$redis_port" hget "e2e:{default}:t:$id" status)" = succeeded ]; do
  [ $(($(ms) - t3)) -lt 60000 ] || { say "the delayed task did not succeed"; exit 1; }
  sleep 0.1
done
say "delayed task at zero replicas: replicas 1 $early ms before it fell due (scheduledLead ${lead_ms} ms); it succeeded at attempt $(redis-cli -p "$redis_port" hget "e2e:{default}:t:$id" attempt)"
