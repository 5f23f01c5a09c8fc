#!/usr/bin/env bash
# The end-to-end scaling test: dtq's scaler driven by the real KEDA operator, metrics
# adapter and admission webhooks, against a real kube-apiserver and the HPA controller
# (controlplane.sh), all local processes built from their Go modules (build.sh).
#
#   deploy/e2e/run.sh                          # every scenario; figures on stderr
#   E2E_TIMELINE=docs/e2e-timeline.svg deploy/e2e/run.sh   # also draw the replica timeline
#
# Scenarios, in order (README.md says what each checks):
#   apply      deploy/kubernetes/keda as written (image and scaler address replaced),
#              every object accepted with KEDA's webhooks failing closed; a second
#              ScaledObject for the same Deployment refused by them
#   wake       0 → 1 by push, E2E_WAKES times; the first E2E_POLLED_WAKES beside KEDA's
#              built-in redis-streams trigger at its default polling interval
#   repeat     a push KEDA took at one replica, the replicas then set to 0 by hand:
#              woken by the scaler's repeat of true, not KEDA's next poll
#   burst      1 → N: E2E_BURST tasks at zero replicas, then urgent ones (bandTargets)
#   drain      N → 0 with work in flight, the runner SIGTERMing workers mid-task
#   delayed    a delayed task at zero replicas wakes the Deployment scheduledLead early
#   cron       a cron tick at zero replicas, the same
#   restart    the scaler killed and restarted at zero replicas with a task waiting
#   job        deploy/kubernetes/keda-job: one Job per task
#
# No kubelet: a runner follows the Deployment's spec.replicas as a kubelet and the
# deployment controller would, starting `dtq worker` processes with the pod template's
# environment (podenv.jq), SIGTERMing the newest as it shrinks and SIGKILLing after
# terminationGracePeriodSeconds, and writing the Deployment's status. It stops every
# process it started, on success or failure; the logs are kept on failure.
set -euo pipefail
# job control: each background part runs in a process group of its own, which
# controlplane.sh down stops whole (a watch is kubectl piped into a loop)
set -m
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=proc.sh
. "$here/proc.sh"
root=$(cd "$here/../.." && pwd)
wakes=${E2E_WAKES:-20} polled_wakes=${E2E_POLLED_WAKES:-3} burst=${E2E_BURST:-64}
ns=dtq

dir=$(mktemp -d /tmp/dtq-e2e.XXXXXX)
say() { printf '%s e2e: %s\n' "$(date -u +%H:%M:%S.%3N)" "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }
ms() { date +%s%3N; }
cleanup() {
  st=$?
  if [ $st != 0 ] && [ -n "${kubectl:-}" ]; then
    # what KEDA held when the test failed, beside its logs: the ScaledObjects' status
    # (externalMetricNames, conditions), the ScaledJobs and the HPAs
    timeout 10 "$kubectl" --kubeconfig "$dir/kubeconfig" get scaledobjects,scaledjobs,hpa -A -o yaml \
      >"$dir/logs/keda-state.yaml" 2>&1 || true
  fi
  "$here/controlplane.sh" down "$dir" || true
  if [ $st = 0 ]; then rm -rf "$dir"; else say "failed: logs kept in $dir/logs"; fi
}
trap cleanup EXIT

"$here/controlplane.sh" up "$dir"
mapfile -t bins < <("$here/build.sh")
kubectl=${bins[3]}
k() { "$kubectl" --kubeconfig "$dir/kubeconfig" "$@"; }
# bg NAME CMD...: a background process that controlplane.sh down stops with the rest
bg() {
  local name=$1
  shift
  "$@" &
  echo $! >"$dir/pids/$name"
  disown $! # no job notice when down stops it
}

# dtq's own parts on loopback, ports from the same base as the control plane's
base=${E2E_PORT_BASE:-27400}
redis_port=$((base + 10)) scaler_port=$((base + 11)) scaler_http=$((base + 12))
mkdir -p "$dir/bin"
# as in the image: `dtq scaler` runs the dtq-scaler binary beside it
(cd "$root" && CGO_ENABLED=0 go build -o "$dir/bin/" ./cmd/dtq ./cmd/dtq-scaler)
bg redis redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --logfile "$dir/logs/redis.log"
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
rc() { redis-cli -p "$redis_port" "$@"; }

# ---- apply -----------------------------------------------------------------------
say "deploy/kubernetes/keda, the scaler address on loopback"
k kustomize "$root/deploy/kubernetes/keda" \
  | sed -e "s#scalerAddress: .*#scalerAddress: 127.0.0.1:$scaler_port#" -e 's#image: registry.example.com/dtq:latest#image: dtq:e2e#' \
  >"$dir/keda.yaml"
k apply --server-side -f "$dir/keda.yaml" >"$dir/logs/apply.log"
# the Secret the base asks to be created before applying
export DTQ_REDIS_URL=redis://127.0.0.1:$redis_port/0
k -n $ns create secret generic dtq-redis --from-literal=DTQ_REDIS_URL="$DTQ_REDIS_URL" >/dev/null
say "applied with KEDA's webhooks failing closed: $(grep -c serverside-applied "$dir/logs/apply.log") objects accepted"
# KEDA's webhooks did look: a second ScaledObject for the same Deployment is refused
k -n $ns get scaledobject dtq-worker -o json \
  | jq '.metadata = {name: "dtq-worker-again", namespace: .metadata.namespace} | del(.status)' >"$dir/so-again.json"
if k apply -f "$dir/so-again.json" >"$dir/logs/so-again.log" 2>&1; then fail "KEDA's webhooks accepted a second ScaledObject for dtq-worker"; fi
grep -q 'denied the request' "$dir/logs/so-again.log" || fail "a second ScaledObject failed otherwise: $(cat "$dir/logs/so-again.log")"
say "a second ScaledObject for dtq-worker refused: $(sed -n 's/.*denied the request: //p' "$dir/logs/so-again.log" | head -c 160)"

# podenv KIND NAME POD [PATH]: the environment of the pod template at PATH (dotted;
# default spec.template.spec) of KIND/NAME for a pod named POD, a NAME=VALUE a line
podenv() {
  jq -n --argjson obj "$(k -n $ns get "$1" "$2" -o json)" \
    --argjson cms "$(k -n $ns get configmaps -o json)" --argjson secrets "$(k -n $ns get secrets -o json)" \
    --arg name "$3" --arg namespace $ns --arg path "${4:-spec.template.spec}" \
    '{pod: ($obj | getpath($path | split("."))), name: $name, namespace: $namespace,
      configmaps: ([$cms.items[] | {(.metadata.name): (.data // {})}] | add // {}),
      secrets: ([$secrets.items[] | {(.metadata.name): (.data // {})}] | add // {})}' \
    | jq -r -f "$here/podenv.jq" 2>"$dir/logs/podenv.err" || fail "podenv $1/$2: $(cat "$dir/logs/podenv.err")"
}

# The scaler as its Deployment in the base says, its listen addresses on loopback (a pod
# has its own network namespace; these processes share one).
prefix=$(k -n $ns get configmap dtq-config -o jsonpath='{.data.DTQ_KEY_PREFIX}')
export DTQ_KEY_PREFIX=$prefix
scaler_env=$(podenv deployment dtq-scaler dtq-scaler-e2e)
mapfile -t scaler_env <<<"$scaler_env"
start_scaler() {
  bg dtq-scaler env -i PATH="$PATH" "${scaler_env[@]}" DTQ_SCALER_ADDR=127.0.0.1:$scaler_port PORT=$scaler_http \
    "$dir/bin/dtq" scaler >>"$dir/logs/dtq-scaler.log" 2>&1
}
start_scaler
k -n $ns scale deployment/dtq-worker --replicas 0 >/dev/null
k -n $ns wait scaledobject/dtq-worker --for condition=Ready --timeout 120s >/dev/null
say "ScaledObject Ready (the scaler: key prefix $prefix, as the ConfigMap says)"
for _ in $(seq 600); do k -n $ns get hpa dtq-worker >/dev/null 2>&1 && break; sleep 0.1; done
say "HPA created with metrics: $(k -n $ns get hpa dtq-worker -o jsonpath='{.spec.metrics[*].external.metric.name}')"

# A watch stamps each change of a Deployment's spec.replicas as the apiserver reports it
# ("MS N" lines): a kubectl call per poll would cost ~70 ms of granularity.
watch_replicas() { # DEPLOYMENT LOG
  bg "watch-$1" bash -c "'$kubectl' --kubeconfig '$dir/kubeconfig' -n $ns get deployment '$1' --watch -o jsonpath='{.spec.replicas}{\"\\n\"}' \
    | while read -r n; do [ -z \"\$n\" ] || echo \"\$(date +%s%3N) \$n\"; done >'$2'"
}
replicas() { k -n $ns get deployment "${1:-dtq-worker}" -o jsonpath='{.spec.replicas}'; }
# until_zero LIMIT_S WHAT: waits for dtq-worker's replicas to be 0 and every worker
# process to have exited, failing after LIMIT_S. A worker still draining (idle, and
# registered for hand-offs until its leave) when a task is enqueued may take the task and
# run it: nothing is left to wake the Deployment, and a scenario that expects a wake
# fails (the restart scenario's first task after the restart did, 2026-12-05: enqueued
# about 50 ms after the replicas reached 0, run by the last worker, which exited 20 ms
# later).
until_zero() {
  local t0
  t0=$(ms)
  until [ "$(replicas)" = 0 ]; do
    [ $(($(ms) - t0)) -lt $(($1 * 1000)) ] || fail "replicas $(replicas) $1 s $2, want 0"
    sleep 0.1
  done
  until [ "$(grep -c ' exit ' "$dir/runner.log")" = "$(grep -c ' start ' "$dir/runner.log")" ]; do
    [ $(($(ms) - t0)) -lt $(($1 * 1000)) ] || fail "worker processes still running $1 s $2, want none"
    sleep 0.05
  done
}
# first_at LOG T0 N: the first time at or after T0 the replicas in LOG reached N or more
first_at() { awk -v t0="$2" -v n="$3" '$1 >= t0 && $2 >= n {print $1; exit}' "$1"; }
# until_at LOG T0 N LIMIT_MS WHAT: waits for first_at, failing after LIMIT_MS
until_at() {
  local t
  while :; do
    t=$(first_at "$1" "$2" "$3")
    [ -n "$t" ] && { echo "$t"; return; }
    [ $(($(ms) - $2)) -lt "$4" ] || fail "$5: replicas $(tail -1 "$1" | awk '{print $2}') after $4 ms, want $3"
    sleep 0.01
  done
}
watch_replicas dtq-worker "$dir/replicas.log"
mark() { echo "$(ms) $*" >>"$dir/marks.log"; }
# pct FILE P: the P-th percentile of the numbers in FILE (nearest rank)
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int(NR*p/100+0.999999); if (i<1) i=1; print a[i]}'; }

# clear_to_zero: every key of the prefix deleted by hand, then dtq-worker set to 0 once
# no read that saw them can answer KEDA any more (the scaler's answers may be
# DTQ_SCALER_CACHE_TTL_MS old, 1 s: a poll in that time would wake the Deployment again)
clear_to_zero() {
  rc --scan --pattern "$prefix:*" | xargs -r redis-cli -p "$redis_port" del >/dev/null
  sleep 1.2
  k -n $ns scale deployment/dtq-worker --replicas 0 >/dev/null
}

# ---- wake: 0 → 1 by push, and KEDA's redis-streams trigger beside it ----------------
# The same Deployment shape scaled by KEDA's built-in redis-streams trigger on the
# queue's stream (its length, as a poll at KEDA's default interval of 30 s sees it).
cat >"$dir/polled.yaml" <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: dtq-polled, namespace: $ns}
spec:
  replicas: 0
  selector: {matchLabels: {app: dtq-polled}}
  template:
    metadata: {labels: {app: dtq-polled}}
    spec: {containers: [{name: worker, image: "dtq:e2e", args: [worker]}]}
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: dtq-polled, namespace: $ns}
spec:
  scaleTargetRef: {name: dtq-polled}
  minReplicaCount: 0
  maxReplicaCount: 20
  triggers:
    - type: redis-streams
      metadata:
        address: 127.0.0.1:$redis_port
        stream: "$prefix:{default}:p0"
        streamLength: "16"
YAML
k apply -f "$dir/polled.yaml" >/dev/null
k -n $ns wait scaledobject/dtq-polled --for condition=Ready --timeout 120s >/dev/null
watch_replicas dtq-polled "$dir/polled-replicas.log"
: >"$dir/wakes" 
: >"$dir/polled-wakes"
for i in $(seq "$wakes"); do
  [ "$(replicas)" = 0 ] || fail "replicas $(replicas) before wake $i, want 0"
  polled=; [ "$i" -le "$polled_wakes" ] && polled=1
  # KEDA polls on a 30 s rhythm of its own: a wake right after the previous one's would
  # always land just after a poll. A random pause puts the enqueue at a random phase,
  # as a producer's would be.
  [ -n "$polled" ] && sleep "$((RANDOM % 30)).$((RANDOM % 10))"
  t0=$(ms)
  id=$("$dir/bin/dtq" enqueue --queue default --function noop)
  t1=$(until_at "$dir/replicas.log" "$t0" 1 30000 "wake $i")
  echo $((t1 - t0)) >>"$dir/wakes"
  line="wake $i: 0 → 1 by push in $((t1 - t0)) ms"
  if [ -n "$polled" ]; then
    tp=$(until_at "$dir/polled-replicas.log" "$t0" 1 60000 "wake $i, redis-streams")
    echo $((tp - t0)) >>"$dir/polled-wakes"
    line="$line; by redis-streams in $((tp - t0)) ms"
  fi
  say "$line (task $id)"
  # no worker runs here: the task is taken off the queue by hand, the replicas set back
  clear_to_zero
  [ -n "$polled" ] && k -n $ns scale deployment/dtq-polled --replicas 0 >/dev/null
  if [ "$i" = "$polled_wakes" ]; then
    k -n $ns delete scaledobject dtq-polled --wait >/dev/null
    k -n $ns delete deployment dtq-polled >/dev/null
  fi
  sleep 1
done
push_line="0 → 1 by push over $(wc -l <"$dir/wakes") wakes (enqueue to spec.replicas 1): p50 $(pct "$dir/wakes" 50) ms, p90 $(pct "$dir/wakes" 90) ms, p99 $(pct "$dir/wakes" 99) ms, max $(pct "$dir/wakes" 100) ms"
polled_line="0 → 1 by KEDA's redis-streams trigger (pollingInterval 30 s) over $(wc -l <"$dir/polled-wakes") of those wakes, each at a random phase of its polling: p50 $(pct "$dir/polled-wakes" 50) ms, max $(pct "$dir/polled-wakes" 100) ms"
say "$push_line"
say "$polled_line"

# ---- repeat: a push KEDA took at one replica, then the replicas set to zero -----------
# KEDA scales from zero on a push of true only when its cached Deployment shows 0
# replicas. Here the Deployment is at 1 when the task's push arrives (KEDA stamps the
# ScaledObject's lastActiveTime and does nothing more), then set to 0 by hand, as a
# scale to zero racing an enqueue would leave it. Nothing changes in Redis after that:
# only the scaler's repeat of true (DTQ_SCALER_PUSH_REPEAT_MS, 1/3/7 s) can wake it
# before KEDA's next poll (pollingInterval 15 s), which may still fall in the second
# between the hand's 0 and the first repeat: then that try shows nothing, and is redone.
metric() { curl -sf "http://127.0.0.1:$scaler_http/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
last_active() { k -n $ns get scaledobject dtq-worker -o jsonpath='{.status.lastActiveTime}'; }
# polled_active_since MS: KEDA's scale loop found dtq-worker active at or after MS, as
# its operator's log (at debug level) says; the log's time is to the second, so a poll
# in the same second just before MS counts too (a try redone for nothing)
polled_active_since() {
  local since=$(($1 / 1000)) ts
  while read -r ts; do
    [ "$(date -ud "$ts" +%s)" -ge "$since" ] && return 0
  done < <(grep '"msg":"Scaler for scaledObject is active"' "$dir/logs/keda-operator.log" |
    grep '"scaledObject.Name":"dtq-worker"' | sed -n 's/.*"ts":"\([^"]*\)".*/\1/p')
  return 1
}
tried=""
for try in 1 2 3; do
  t_up=$(ms)
  k -n $ns scale deployment/dtq-worker --replicas 1 >/dev/null
  until_at "$dir/replicas.log" "$t_up" 1 10000 "scaled to 1 by hand" >/dev/null
  la0=$(last_active) rep0=$(metric dtq_scaler_push_repeats_total)
  t0=$(ms)
  id=$("$dir/bin/dtq" enqueue --queue default --function noop)
  until [ "$(last_active)" != "$la0" ]; do
    [ $(($(ms) - t0)) -lt 10000 ] || fail "KEDA did not take the push at one replica (lastActiveTime stays $la0)"
    sleep 0.05
  done
  t_took=$(ms)
  k -n $ns scale deployment/dtq-worker --replicas 0 >/dev/null
  t_zero=$(ms)
  # KEDA's own poll may have set 0 before the push came (its cooldown runs from the
  # last wake): then the push woke it the usual way, and this try shows nothing
  if awk -v a="$t_up" -v b="$t_took" '$1 > a && $1 < b && $2 == 0 {f = 1} END {exit !f}' "$dir/replicas.log"; then
    say "repeat: KEDA set the replicas to 0 itself before the push; again"
    clear_to_zero
    continue
  fi
  tw=$(until_at "$dir/replicas.log" "$t_zero" 1 30000 "the task pushed at one replica")
  rep1=$(metric dtq_scaler_push_repeats_total)
  if [ "$rep1" -le "$rep0" ] && polled_active_since "$t_zero"; then
    say "repeat: KEDA's own poll woke the replicas before the scaler's first repeat; again"
    clear_to_zero
    continue
  fi
  tried=$try
  break
done
# three tries KEDA's own scaling disturbed leave no wake to judge (and tw, rep1 unset)
[ -n "$tried" ] || fail "repeat: KEDA's own scaling disturbed all three tries (as it would a scaler that never repeats)"
[ "$rep1" -gt "$rep0" ] || fail "woken $((tw - t0)) ms after the enqueue with no repeat sent (repeats $rep0 → $rep1)"
[ $((tw - t0)) -lt 8000 ] || fail "the task pushed at one replica woke the Deployment $((tw - t0)) ms after the enqueue: not by a repeat (1/3/7 s)"
repeat_line="a push KEDA took at one replica (lastActiveTime stamped $((t_took - t0)) ms after the enqueue), the replicas then set to 0: woken again $((tw - t0)) ms after the enqueue by the scaler's repeat of true ($((rep1 - rep0)) sent by then)"
say "$repeat_line"
clear_to_zero

# ---- the runner: a kubelet and deployment controller for dtq-worker ------------------
# Each "pod" is a `dtq worker` process with the pod template's environment (its name in
# place of metadata.name) and PORT=0 (pods share loopback here). runner.log: "MS start
# SEQ", "MS stop SEQ" (SIGTERM), "MS exit SEQ CODE". The Deployment's status follows the
# processes: replicas and readyReplicas count those started and not stopped or exited,
# as the HPA reads status.replicas to average a metric over the pods.
worker_env=$(podenv deployment dtq-worker @POD@)
mapfile -t worker_env <<<"$worker_env"
grace=$(k -n $ns get deployment dtq-worker -o jsonpath='{.spec.template.spec.terminationGracePeriodSeconds}')
[ -n "$grace" ] || fail "dtq-worker has no terminationGracePeriodSeconds"
# start_pod SEQ NAME: a worker process; its pid in pids/worker-SEQ, its end in runner.log
start_pod() {
  (
    env -i PATH="$PATH" "${worker_env[@]//@POD@/$2}" PORT=0 "$dir/bin/dtq" worker >"$dir/logs/$2.log" 2>&1 &
    p=$!
    echo $p >"$dir/pids/worker-$1"
    wait $p && c=0 || c=$?
    echo "$(ms) exit $1 $c" >>"$dir/runner.log"
  ) &
  for _ in $(seq 200); do [ -s "$dir/pids/worker-$1" ] && break; sleep 0.005; done
  echo "$(ms) start $1" >>"$dir/runner.log"
}
# grace_kill PID START: SIGKILL after terminationGracePeriodSeconds, if PID is still the
# process that started at START: a worker that exited in time may have its pid handed
# to another process by then
grace_kill() {
  sleep "$grace"
  if [ -n "$2" ] && [ "$(starttime "$1")" = "$2" ]; then kill -KILL "$1" 2>/dev/null || true; fi
}
# stop_pod SEQ: SIGTERM, and SIGKILL after terminationGracePeriodSeconds
stop_pod() {
  local p st
  p=$(cat "$dir/pids/worker-$1")
  st=$(starttime "$p")
  kill -TERM "$p" 2>/dev/null || true
  echo "$(ms) stop $1" >>"$dir/runner.log"
  bg "grace-$1" grace_kill "$p" "$st"
}
runner() {
  set +e # a background loop: one failed kubectl call must not end it
  local -a seqs=()
  local want seq=0 up status=-1
  while :; do
    want=$(tail -1 "$dir/replicas.log" | awk '{print $2}')
    want=${want:-0}
    while [ "${#seqs[@]}" -lt "$want" ]; do
      seq=$((seq + 1))
      start_pod $seq "dtq-worker-e2e-$seq"
      seqs+=($seq)
    done
    while [ "${#seqs[@]}" -gt "$want" ]; do
      stop_pod "${seqs[-1]}"
      unset 'seqs[-1]'
    done
    # started, not stopped, not exited
    up=$(awk '$2 == "start" {u[$3] = 1} $2 == "stop" || $2 == "exit" {delete u[$3]} END {print length(u)}' "$dir/runner.log")
    if [ "$up" != "$status" ]; then
      k -n $ns patch deployment dtq-worker --subresource status --type merge \
        -p "{\"status\":{\"replicas\":$up,\"updatedReplicas\":$up,\"readyReplicas\":$up,\"availableReplicas\":$up}}" >/dev/null \
        && status=$up
    fi
    sleep 0.05
  done
}
: >"$dir/runner.log"
bg runner runner
# backlog.log: "MS WAITING RUNNING" of queue default every 250 ms, as the scaler's
# /metrics reads them (undelivered entries; delivered, not yet acknowledged ones)
sampler() {
  set +e # a background loop: one failed kubectl call must not end it
  while :; do
    curl -sf "http://127.0.0.1:$scaler_http/metrics" 2>/dev/null \
      | awk -v t="$(ms)" '/^dtq_queue_lag\{.*queue="default"/ {w += $2} /^dtq_queue_pending\{.*queue="default"/ {r += $2; n++}
          END {if (n) print t, w + 0, r + 0}' >>"$dir/backlog.log" || true
    sleep 0.25
  done
}
bg sampler sampler
# tally QUEUE FIELD: how many of the queue's tasks hold each value of FIELD ("64 succeeded")
tally() {
  rc --scan --pattern "$prefix:{$1}:t:*" | while read -r key; do echo "HGET $key $2"; done \
    | rc | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}'
}
# until_tally QUEUE FIELD WANT LIMIT_MS T0 WHAT
until_tally() {
  until [ "$(tally "$1" "$2")" = "$3" ]; do
    [ $(($(ms) - $5)) -lt "$4" ] || fail "$6: $(tally "$1" "$2"), want $3"
    sleep 0.2
  done
}
hpa_value() { k -n $ns get hpa dtq-worker -o jsonpath='{range .status.currentMetrics[*]}{.external.metric.name}={.external.current.averageValue} {end}'; }

# ---- burst: 1 → N, and further for urgent work (bandTargets) ------------------------
target=16 band_target=4
want_n=$(((burst + target - 1) / target))
mark "burst of $burst tasks"
say "1 → N: $burst tasks of 4 s at zero replicas (targetPerReplica $target: N = $want_n)"
t0=$(ms)
for i in $(seq "$burst"); do "$dir/bin/dtq" enqueue --queue default --function sleep --payload '{"ms":4000}' >/dev/null; done
t_enq=$(ms)
tn=$(until_at "$dir/replicas.log" "$t0" "$want_n" 60000 "the burst")
t1=$(first_at "$dir/replicas.log" "$t0" 1)
hpa_mid=$(hpa_value)
say "1 → N: the burst enqueued in $((t_enq - t0)) ms; replicas 1 after $((t1 - t0)) ms, $want_n after $((tn - t0)) ms; HPA current values: $hpa_mid"
case $hpa_mid in *=-*|'') fail "the HPA's current values are not sane: '$hpa_mid'" ;; esac
until_tally default status "$burst succeeded" 120000 "$t0" "the burst"
[ "$(tally default attempt)" = "$burst 1" ] || fail "attempts of the burst's tasks: $(tally default attempt) (want every one 1)"
burst_line="1 → N: $burst tasks at zero replicas: replicas 1 after $((t1 - t0)) ms, $want_n after $((tn - t0)) ms; all succeeded at their first attempt $(($(ms) - t0)) ms after the burst began"
say "$burst_line"
# Urgent work: the band metric (bands 9..7, target 4) asks for more than the total
# does. The tasks run 20 s: the manifest's scale-up adds at most 4 pods or 100 % per
# 15 s, and the burst above used that up, so 8 comes once its 15 s have passed.
urgent=32 want_u=$(((32 + band_target - 1) / band_target))
mark "$urgent urgent tasks (priority 9)"
t0=$(ms)
for i in $(seq "$urgent"); do "$dir/bin/dtq" enqueue --queue default --priority 9 --function sleep --payload '{"ms":20000}' >/dev/null; done
tu=$(until_at "$dir/replicas.log" "$t0" "$want_u" 60000 "the urgent burst")
until_tally default status "$((burst + urgent)) succeeded" 120000 "$t0" "the urgent burst"
[ "$(tally default attempt)" = "$((burst + urgent)) 1" ] || fail "attempts after the urgent burst: $(tally default attempt) (want every one 1)"
urgent_line="bandTargets: $urgent tasks at priority 9 (9-7:$band_target) raised the replicas to $want_u $((tu - t0)) ms after they began, the scale-up policy's pace (the total alone asks for $(((urgent + target - 1) / target)))"
say "$urgent_line"

# ---- drain: N → 0 with work in flight ------------------------------------------------
# The manifest's scale-down is cautious (a 120 s window, half the replicas a minute,
# cooldownPeriod 120 s before zero); the test shortens those on the live object. A
# burst mixes 1 s and 8 s tasks: as the short ones finish, the HPA lowers the replicas
# while workers still run long ones, and the runner SIGTERMs those workers, which drain
# (DTQ_DRAIN_TIMEOUT_S) and finish them.
k -n $ns patch scaledobject dtq-worker --type merge -p '{"spec":{"cooldownPeriod":5,"advanced":{"horizontalPodAutoscalerConfig":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0,"policies":[{"type":"Percent","value":100,"periodSeconds":1}]}}}}}}' >/dev/null
# until_zero waits for every worker to be gone too: one still draining (idle, registered
# for hand-offs) when the burst comes would take tasks it then hands back at attempt 1
# (they start at attempt 2)
until_zero 60 "after the scale-down was shortened"
done_before=$((burst + urgent))
stops_before=$(grep -c ' stop ' "$dir/runner.log" || true)
mark "burst of $burst tasks, 1 s and 8 s"
t2=$(ms)
say "N → 0: scale-down shortened (cooldownPeriod 5 s, no window); a burst of $burst tasks, half 1 s, half 8 s"
for i in $(seq "$burst"); do
  d=1000; [ $((i % 2)) = 0 ] && d=8000
  "$dir/bin/dtq" enqueue --queue default --function sleep --payload "{\"ms\":$d}" >/dev/null
done
total=$((done_before + burst))
until_tally default status "$total succeeded" 120000 "$t2" "the drain burst"
# when the last task ended, as its record says
t_done=$(tally default finished_at | tr ',' '\n' | awk '{if ($2 > m) m = $2} END {printf "%.0f\n", m}')
tz=
until [ -n "$tz" ]; do
  tz=$(awk -v t0="$t_done" '$1 >= t0 - 60000 {last=$2; at=$1} END {if (last == 0) print at}' "$dir/replicas.log")
  [ $(($(ms) - t_done)) -lt 120000 ] || fail "replicas $(replicas) two minutes after the last task ended"
  [ -n "$tz" ] || sleep 0.2
done
[ "$(tally default attempt)" = "$total 1" ] || fail "attempts: $(tally default attempt) (want every one 1)"
stopped=$(($(grep -c ' stop ' "$dir/runner.log") - stops_before))
killed=$(awk '$2 == "exit" && $4 == 137' "$dir/runner.log" | wc -l)
[ "$killed" = 0 ] || fail "$killed workers were SIGKILLed after terminationGracePeriodSeconds"
# every worker has exited by now, each with 0
for _ in $(seq 600); do [ "$(grep -c ' exit ' "$dir/runner.log")" = "$(grep -c ' start ' "$dir/runner.log")" ] && break; sleep 0.1; done
bad=$(awk '$2 == "exit" && $4 != 0' "$dir/runner.log")
[ -z "$bad" ] || fail "workers exited with an error: $bad"
drain_line="N → 0: $burst tasks (1 s and 8 s) all succeeded at attempt 1 while $stopped workers were SIGTERMed mid-run (none handed back: every task at attempt 1); replicas 0 $((tz - t_done)) ms after the last task ended"
say "$drain_line"
awk -v t0="$t2" '$1 >= t0 {printf "%s%s@%d", sep, $2, $1 - t0; sep=" → "} END {print ""}' "$dir/replicas.log" \
  | sed 's/^/replicas since the drain burst (count@ms): /' >&2
timeline_to=$(ms)

# ---- delayed: a delayed task at zero replicas ----------------------------------------
# With scheduledLead the Deployment is woken that long before the task falls due (no
# worker runs to move it, so the scaler's timer must). The lead is set on the live
# trigger (the manifest leaves the 0 s default).
lead_ms=2000
# KEDA rebuilds the trigger's scaler on the change: its old push stream ends, a new one
# (with the lead) opens
streams_ended() { curl -sf "http://127.0.0.1:$scaler_http/metrics" | awk '/^dtq_scaler_grpc_requests_total\{.*StreamIsActive/ {n += $2} END {print n + 0}'; }
ended0=$(streams_ended)
k -n $ns patch scaledobject dtq-worker --type json \
  -p '[{"op":"add","path":"/spec/triggers/0/metadata/scheduledLead","value":"2s"}]' >/dev/null
t2=$(ms)
until [ "$(streams_ended)" -gt "$ended0" ] && [ "$(metric dtq_scaler_push_streams)" -ge 1 ]; do
  [ $(($(ms) - t2)) -lt 30000 ] || fail "KEDA did not reopen its push stream after scheduledLead was set"
  sleep 0.05
done
[ "$(replicas)" = 0 ] || fail "replicas $(replicas) before the delayed task, want 0"
t3=$(ms)
# An idle scaler sees a new delayed task (a ZADD: no stream entry to wake its blocking
# read) at its next resync, within DTQ_SCALER_PUSH_MAX_BLOCK_MS (5 s): due later than
# the lead plus that, the timer is set in time.
delay_ms=10000
id=$("$dir/bin/dtq" enqueue --queue default --function noop --delay "${delay_ms}ms")
due=$((t3 + delay_ms))
tw=$(until_at "$dir/replicas.log" "$t3" 1 30000 "the delayed task")
early=$((due - tw))
[ "$early" -ge $((lead_ms - 500)) ] && [ "$early" -le $((lead_ms + 500)) ] \
  || fail "delayed task: woken $early ms before it fell due, want about $lead_ms"
until [ "$(rc hget "$prefix:{default}:t:$id" status)" = succeeded ]; do
  [ $(($(ms) - t3)) -lt 60000 ] || fail "the delayed task did not succeed"
  sleep 0.1
done
delayed_line="a delayed task at zero replicas: replicas 1 $early ms before it fell due (scheduledLead $lead_ms ms), run at attempt $(rc hget "$prefix:{default}:t:$id" attempt)"
say "$delayed_line"

# ---- cron: ticks at zero replicas ----------------------------------------------------
# A periodic entry with no worker running: its next tick is in the queue's cron set,
# which the scaler's timer reads like the schedule, so each tick wakes the Deployment
# scheduledLead early, and the worker's leader enqueues and runs it.
until_zero 30 "before the cron entry"
"$dir/bin/dtq" cron add --name e2e-tick --spec '@every 30s' --queue default --function noop >"$dir/cron.json"
cron_lines=
for tick in 1 2; do
  until_zero 30 "before cron tick $tick"
  next=$(rc zscore "$prefix:{default}:cron" e2e-tick)
  next=${next%.*}
  [ -n "$next" ] || fail "no next tick for e2e-tick in $prefix:{default}:cron"
  t4=$(ms)
  [ $((next - t4)) -gt $((lead_ms + 500)) ] || fail "cron tick $tick due in $((next - t4)) ms: too soon to see an early wake"
  tw=$(until_at "$dir/replicas.log" "$t4" 1 30000 "cron tick $tick")
  early=$((next - tw))
  [ "$early" -ge $((lead_ms - 500)) ] && [ "$early" -le $((lead_ms + 500)) ] \
    || fail "cron tick $tick: woken $early ms before it, want about $lead_ms"
  until [ "$(rc hget "$prefix:{default}:t:cron-e2e-tick-$next" status)" = succeeded ]; do
    [ $(($(ms) - t4)) -lt 60000 ] || fail "cron tick $tick's task did not succeed"
    sleep 0.1
  done
  cron_lines="$cron_lines${cron_lines:+, }$early ms"
  say "cron tick $tick at zero replicas: replicas 1 $early ms before it; its task ran at attempt $(rc hget "$prefix:{default}:t:cron-e2e-tick-$next" attempt)"
done
"$dir/bin/dtq" cron remove e2e-tick >/dev/null
cron_line="cron ticks at zero replicas (@every 30s, scheduledLead $lead_ms ms): woken $cron_lines before them, each tick run once"

# ---- restart: the scaler killed at zero replicas, a task waiting, then restarted ------
# KEDA's push stream breaks; it retries (2 s, doubling). Nothing may be stranded: the
# task waiting when the scaler comes back wakes the Deployment, and a later task wakes
# it by push again.
until_zero 30 "before the scaler restart"
push_streams() { metric dtq_scaler_push_streams; }
mark "scaler killed"
kill -KILL "$(cat "$dir/pids/dtq-scaler")"
t5=$(ms)
id=$("$dir/bin/dtq" enqueue --queue default --function noop)
sleep 3
[ "$(replicas)" = 0 ] || fail "replicas $(replicas) with the scaler down (nothing should have woken them)"
start_scaler
t6=$(ms)
tw=$(until_at "$dir/replicas.log" "$t6" 1 60000 "after the scaler's restart")
until [ "$(rc hget "$prefix:{default}:t:$id" status)" = succeeded ]; do
  [ $(($(ms) - t6)) -lt 60000 ] || fail "the task enqueued while the scaler was down did not succeed"
  sleep 0.1
done
for _ in $(seq 600); do [ "$(push_streams)" -ge 1 ] 2>/dev/null && break; sleep 0.1; done
t_stream=$(ms)
[ "$(push_streams)" -ge 1 ] || fail "no push stream open a minute after the scaler's restart"
until_zero 60 "after the task"
t7=$(ms)
"$dir/bin/dtq" enqueue --queue default --function noop >/dev/null
tw2=$(until_at "$dir/replicas.log" "$t7" 1 30000 "the first task after the restart")
[ $((tw2 - t7)) -lt 5000 ] || fail "the first task after the restart woke the Deployment in $((tw2 - t7)) ms: not by push"
restart_line="scaler killed (SIGKILL) at zero replicas with a task enqueued, restarted 3 s later: replicas 1 $((tw - t6)) ms after the restart, the task run once; KEDA's push stream back $((t_stream - t6)) ms after the restart; the next task woke the Deployment in $((tw2 - t7)) ms"
say "$restart_line"
until_zero 60 "after the restart's tasks"

# ---- job: deploy/kubernetes/keda-job, one Job per task ------------------------------
# The overlay's ScaledJob (an "external" trigger, polled every 10 s). A second runner
# plays the job controller and kubelet: each Job KEDA creates gets a `dtq worker` with
# its template's environment, and its status (started, then succeeded or failed) as
# the process ends; KEDA counts Jobs without a Complete or Failed condition as running.
k kustomize "$root/deploy/kubernetes/keda-job" \
  | sed -e "s#scalerAddress: .*#scalerAddress: 127.0.0.1:$scaler_port#" -e 's#image: registry.example.com/dtq:latest#image: dtq:e2e#' \
  >"$dir/keda-job.yaml"
k apply --server-side -f "$dir/keda-job.yaml" >"$dir/logs/apply-job.log"
k -n $ns wait scaledjob/dtq-worker-long --for condition=Ready --timeout 120s >/dev/null
now3339() { date -u +%Y-%m-%dT%H:%M:%SZ; }
job_status() { k -n $ns patch job "$1" --subresource status --type merge -p "$2" >>"$dir/logs/job-status.log" 2>&1; }
run_job() { # NAME
  local env
  env=$(podenv job "$1" "$1-pod")
  mapfile -t env <<<"$env"
  job_status "$1" "{\"status\":{\"startTime\":\"$(now3339)\",\"active\":1}}" || echo "$(ms) status-failed $1" >>"$dir/jobs.log"
  echo "$(ms) start $1" >>"$dir/jobs.log"
  env -i PATH="$PATH" "${env[@]}" PORT=0 "$dir/bin/dtq" worker >"$dir/logs/$1.log" 2>&1 && c=0 || c=$?
  echo "$(ms) exit $1 $c" >>"$dir/jobs.log"
  local t
  t=$(now3339)
  if [ "$c" = 0 ]; then
    job_status "$1" "{\"status\":{\"active\":0,\"succeeded\":1,\"completionTime\":\"$t\",\"conditions\":[{\"type\":\"SuccessCriteriaMet\",\"status\":\"True\",\"lastProbeTime\":\"$t\",\"lastTransitionTime\":\"$t\"},{\"type\":\"Complete\",\"status\":\"True\",\"lastProbeTime\":\"$t\",\"lastTransitionTime\":\"$t\"}]}}"
  else
    job_status "$1" "{\"status\":{\"active\":0,\"failed\":1,\"conditions\":[{\"type\":\"FailureTarget\",\"status\":\"True\",\"lastProbeTime\":\"$t\",\"lastTransitionTime\":\"$t\"},{\"type\":\"Failed\",\"status\":\"True\",\"lastProbeTime\":\"$t\",\"lastTransitionTime\":\"$t\"}]}}"
  fi || echo "$(ms) status-failed $1" >>"$dir/jobs.log"
}
job_runner() {
  set +e # a background loop: one failed kubectl call must not end it
  local -A seen=()
  local j
  while :; do
    for j in $(k -n $ns get jobs -l scaledjob.keda.sh/name=dtq-worker-long -o jsonpath='{.items[*].metadata.name}'); do
      [ -n "${seen[$j]:-}" ] && continue
      seen[$j]=1
      echo "$(ms) created $j" >>"$dir/jobs.log"
      run_job "$j" &
    done
    sleep 0.3
  done
}
: >"$dir/jobs.log"
bg job-runner job_runner
n_jobs=3
mark "$n_jobs long tasks (ScaledJob)"
t8=$(ms)
for i in $(seq $n_jobs); do "$dir/bin/dtq" enqueue --queue long --function sleep --payload '{"ms":2000}' >/dev/null; done
until_tally long status "$n_jobs succeeded" 90000 "$t8" "the ScaledJob's tasks"
for _ in $(seq 300); do [ "$(grep -c ' exit ' "$dir/jobs.log")" -ge $n_jobs ] && break; sleep 0.1; done
# one more poll and a bit: no Job is created for work that is done
sleep 12
created=$(grep -c ' created ' "$dir/jobs.log")
[ "$created" = $n_jobs ] || fail "KEDA created $created Jobs for $n_jobs tasks: $(cat "$dir/jobs.log")"
[ "$(tally long attempt)" = "$n_jobs 1" ] || fail "the ScaledJob's tasks ran at attempts $(tally long attempt), want 1"
bad=$(awk '$2 == "exit" && $4 != 0 || $2 == "status-failed"' "$dir/jobs.log")
[ -z "$bad" ] || fail "Jobs: $bad (see $dir/logs/job-status.log)"
complete=$(k -n $ns get jobs -l scaledjob.keda.sh/name=dtq-worker-long -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Complete")].status}{"\n"}{end}' | grep -c True || true)
[ "$complete" = $n_jobs ] || fail "$complete of $n_jobs Jobs Complete"
first_job=$(awk '$2 == "created" {print $1; exit}' "$dir/jobs.log")
job_line="ScaledJob: $n_jobs tasks on queue long, $n_jobs Jobs created by KEDA (the first $((first_job - t8)) ms after the enqueue: pollingInterval 10 s), each worker ran one task at attempt 1 and exited 0, no Job more"
say "$job_line"

# ---- the figures, and the timeline ---------------------------------------------------
{
  echo "e2e figures ($(date -u +%Y-%m-%dT%H:%MZ)):"
  for l in "$push_line" "$polled_line" "$repeat_line" "$burst_line" "$urgent_line" "$drain_line" "$delayed_line" "$cron_line" "$restart_line" "$job_line"; do
    echo "  $l"
  done
} >&2
if [ -n "${E2E_TIMELINE:-}" ]; then
  out=$(realpath -m "$E2E_TIMELINE")
  from=$(awk 'NR == 1 {printf "%.0f\n", $1 - 1000}' "$dir/marks.log")
  (cd "$root/deploy" && go run ./e2e/timeline -dir "$dir" -from "$from" -to "$timeline_to" \
    -title "dtq on KEDA: replicas follow the backlog ($(date -u +%Y-%m-%d))" -out "$out") \
    || fail "the timeline could not be drawn"
  say "timeline drawn: $E2E_TIMELINE"
fi
