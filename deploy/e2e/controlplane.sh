#!/usr/bin/env bash
# The control plane of the end-to-end scaling test, as local processes on loopback:
# etcd, kube-apiserver (self-signed certificates, a service-account key pair, the
# front-proxy settings aggregation needs) and kube-controller-manager running the HPA
# controller only, with KEDA's CRDs installed server-side. No kubelet: the test reads
# the Deployment's spec.replicas and runs the workers itself.
#
#   deploy/e2e/controlplane.sh up DIR     # start everything, state (pids, certs, logs) in DIR
#   deploy/e2e/controlplane.sh down DIR   # stop every process up started, whatever happened
#
# The binaries come from build.sh (its cache). Ports: $E2E_PORT_BASE (default 27400) + 0..9.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:?usage: controlplane.sh up|down DIR}
dir=${2:?usage: controlplane.sh up|down DIR}
base=${E2E_PORT_BASE:-27400}
etcd_port=$((base)) etcd_peer=$((base + 1)) api_port=$((base + 2)) kcm_port=$((base + 3))

say() { printf '%s controlplane: %s\n' "$(date -u +%H:%M:%S.%3N)" "$*" >&2; }

# shellcheck source=proc.sh
. "$here/proc.sh"

# ours PID FILE: PID is still the process FILE recorded. The kernel hands out pids
# again (pid_max may be 32768), and a pid file outlives a process that ended by
# itself (a worker, a grace timer): a process that started after the file was written
# is another one, stopping it (or, with kill -- -PID, its whole group) would hit
# whatever now has the number.
ours() {
  local t btime hz mt
  t=$(starttime "$1")
  [ -n "$t" ] || return 1
  mt=$(stat -c %Y "$2" 2>/dev/null) || return 1
  btime=$(awk '$1 == "btime" {print $2}' /proc/stat)
  hz=$(getconf CLK_TCK)
  # btime is whole seconds, the file's time too: 2 s of slack, far less than it takes to
  # hand out every pid again
  [ $((btime + t / hz)) -le $((mt + 2)) ]
}

down() {
  [ -d "$dir/pids" ] || return 0
  for f in "$dir"/pids/*; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    ours "$pid" "$f" || continue
    # a process group of its own (run.sh's background parts) is stopped whole
    kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  done
  for f in "$dir"/pids/*; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if ours "$pid" "$f"; then
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      if ours "$pid" "$f"; then
        kill -9 -- "-$pid" 2>/dev/null || kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      fi
    fi
    rm -f "$f"
  done
}

if [ "$cmd" = down ]; then
  down
  exit 0
fi
[ "$cmd" = up ] || { echo "usage: controlplane.sh up|down DIR" >&2; exit 2; }

mapfile -t bins < <("$here/build.sh")
# a failure on the way up stops what was started
trap 'st=$?; [ $st = 0 ] || { say "failed; stopping what was started"; down; }' EXIT
etcd=${bins[0]} apiserver=${bins[1]} kcm=${bins[2]} kubectl=${bins[3]}
mkdir -p "$dir"/{pids,logs,pki,etcd}
pki=$dir/pki

# start NAME CMD...: a background process whose pid and log live in DIR
start() {
  local name=$1
  shift
  "$@" >"$dir/logs/$name.log" 2>&1 &
  echo $! >"$dir/pids/$name"
}

# Certificates: one CA for serving and clients, one for the front proxy (the
# aggregation layer's client identity), the service-account key pair.
cert() { # cert NAME CN [O] [SAN] [CA]
  local name=$1 cn=$2 o=${3:-} san=${4:-} ca=${5:-ca}
  local subj="/CN=$cn"
  [ -n "$o" ] && subj="/O=$o$subj"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  local ext=$pki/$name.ext
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/$ca.crt" -CAkey "$pki/$ca.key" -CAcreateserial \
    -days 2 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
}
if [ ! -f "$pki/admin.crt" ]; then
  say "certificates"
  for ca in ca front-proxy-ca; do
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$pki/$ca.key" -subj "/CN=dtq-e2e-$ca" -days 2 -out "$pki/$ca.crt" 2>/dev/null
  done
  cert apiserver kube-apiserver "" "DNS:localhost,IP:127.0.0.1,IP:10.0.0.1,DNS:kubernetes.default.svc"
  cert admin dtq-e2e-admin system:masters
  cert front-proxy-client front-proxy-client "" "" front-proxy-ca
  cert serving localhost "" "DNS:localhost,IP:127.0.0.1"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi
kubeconfig=$dir/kubeconfig
cat >"$kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
KC

say "etcd on 127.0.0.1:$etcd_port"
start etcd "$etcd" --name e2e --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "e2e=http://127.0.0.1:$etcd_peer" --log-level warn

say "kube-apiserver on 127.0.0.1:$api_port"
start kube-apiserver "$apiserver" --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
  --service-account-signing-key-file "$pki/sa.key" --service-cluster-ip-range 10.0.0.0/24 \
  --requestheader-client-ca-file "$pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$pki/front-proxy-client.crt" --proxy-client-key-file "$pki/front-proxy-client.key" \
  --enable-admission-plugins NamespaceLifecycle,ServiceAccount --disable-admission-plugins StorageObjectInUseProtection

ok=
for _ in $(seq 600); do
  if "$kubectl" --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then ok=1; break; fi
  kill -0 "$(cat "$dir/pids/kube-apiserver")" 2>/dev/null || break
  sleep 0.1
done
[ -n "$ok" ] || { say "kube-apiserver not ready; its log:"; tail -20 "$dir/logs/kube-apiserver.log" >&2; down; exit 1; }
say "kube-apiserver ready"

say "kube-controller-manager (the HPA controller only)"
start kube-controller-manager "$kcm" --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" \
  --authorization-kubeconfig "$kubeconfig" --controllers horizontalpodautoscaling \
  --horizontal-pod-autoscaler-sync-period 1s --leader-elect=false \
  --bind-address 127.0.0.1 --secure-port "$kcm_port" --use-service-account-credentials=false

keda_dir=$(go mod download -json "github.com/kedacore/keda/v2@v2.21.0" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
say "KEDA's CRDs (server-side apply: the ScaledObject CRD is too big for a client-side one)"
"$kubectl" --kubeconfig "$kubeconfig" apply --server-side -f "$keda_dir/config/crd/bases/" >"$dir/logs/crds.log"
# (kubectl wait fails at once on a CRD whose status has no conditions yet: poll instead)
for crd in scaledobjects scaledjobs triggerauthentications; do
  for _ in $(seq 600); do
    [ "$("$kubectl" --kubeconfig "$kubeconfig" get "crd/$crd.keda.sh" \
      -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" = True ] && break
    sleep 0.1
  done
done
if [ "${DTQ_E2E_NO_KEDA:-}" = 1 ]; then
  say "up without KEDA (DTQ_E2E_NO_KEDA=1): KUBECONFIG=$kubeconfig"
  exit 0
fi

# KEDA, out of cluster: the operator (its metrics gRPC service on loopback, with the
# serving certificate in its cert dir) and the metrics adapter, registered as the
# external.metrics.k8s.io APIService through a Service of type ExternalName localhost
# (no kube-proxy: the aggregator dials the name).
keda_op=${bins[4]} keda_ad=${bins[5]} keda_wh=${bins[6]}
op_metrics=$((base + 4)) op_probe=$((base + 5)) op_grpc=$((base + 6)) ad_port=$((base + 7)) ad_http=$((base + 8))
wh_port=$((base + 9)) wh_metrics=$((base + 13)) wh_probe=$((base + 14))
mkdir -p "$dir/keda-certs"
cp "$pki/ca.crt" "$dir/keda-certs/ca.crt"
cp "$pki/serving.crt" "$dir/keda-certs/tls.crt"
cp "$pki/serving.key" "$dir/keda-certs/tls.key"
"$kubectl" --kubeconfig "$kubeconfig" apply -f - >"$dir/logs/keda-objects.log" <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: keda}
---
apiVersion: v1
kind: Service
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{name: https, port: $ad_port}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  service: {name: keda-metrics-apiserver, namespace: keda, port: $ad_port}
  group: external.metrics.k8s.io
  version: v1beta1
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
YAML
say "KEDA operator (metrics gRPC on 127.0.0.1:$op_grpc)"
# debug: the push handler says at V(1) when it drops an activation (no metric name for
# the trigger in the ScaledObject's status), which a failed run's log should show
start keda-operator env KUBECONFIG="$kubeconfig" KEDA_CLUSTER_OBJECT_NAMESPACE=keda POD_NAMESPACE=keda WATCH_NAMESPACE= \
  "$keda_op" --leader-elect=false --enable-cert-rotation=false --cert-dir "$dir/keda-certs" \
  --metrics-bind-address "127.0.0.1:$op_metrics" --health-probe-bind-address "127.0.0.1:$op_probe" \
  --metrics-service-bind-address "127.0.0.1:$op_grpc" --enable-webhook-patching=false \
  --enable-apiservice-patching=false --ca-dir "$dir/keda-certs" --zap-log-level=debug
say "KEDA metrics adapter on 127.0.0.1:$ad_port"
start keda-adapter env KUBECONFIG="$kubeconfig" KEDA_CLUSTER_OBJECT_NAMESPACE=keda POD_NAMESPACE=keda WATCH_NAMESPACE= \
  "$keda_ad" --secure-port "$ad_port" --bind-address 127.0.0.1 --port "$ad_http" \
  --tls-cert-file "$dir/keda-certs/tls.crt" --tls-private-key-file "$dir/keda-certs/tls.key" --cert-dir "$dir/keda-certs" \
  --lister-kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" --authorization-kubeconfig "$kubeconfig" \
  --metrics-service-address "localhost:$op_grpc" --metrics-service-grpc-authority localhost --zap-log-level=info
ok=
for _ in $(seq 600); do
  if "$kubectl" --kubeconfig "$kubeconfig" get --raw /apis/external.metrics.k8s.io/v1beta1 >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.1
done
[ -n "$ok" ] || { say "external.metrics.k8s.io not served; the adapter's log:"; tail -20 "$dir/logs/keda-adapter.log" >&2; exit 1; }
say "external.metrics.k8s.io served through the aggregator"

# KEDA's admission webhooks, registered from KEDA's own configuration with the service
# reference turned into a URL on loopback and failurePolicy Fail (KEDA ships Ignore: an
# unreachable webhook would then let every object through unchecked).
say "KEDA admission webhooks on localhost:$wh_port"
start keda-webhooks env KUBECONFIG="$kubeconfig" KEDA_CLUSTER_OBJECT_NAMESPACE=keda POD_NAMESPACE=keda WATCH_NAMESPACE= \
  "$keda_wh" --port "$wh_port" --cert-dir "$dir/keda-certs" \
  --metrics-bind-address "127.0.0.1:$wh_metrics" --health-probe-bind-address "127.0.0.1:$wh_probe" --zap-log-level=info
ok=
for _ in $(seq 600); do
  if curl -sf "http://127.0.0.1:$wh_probe/readyz" >/dev/null 2>&1; then ok=1; break; fi
  kill -0 "$(cat "$dir/pids/keda-webhooks")" 2>/dev/null || break
  sleep 0.1
done
[ -n "$ok" ] || { say "KEDA's webhooks not ready; their log:"; tail -20 "$dir/logs/keda-webhooks.log" >&2; exit 1; }
ca_bundle=$(base64 -w0 "$pki/ca.crt")
awk -v port="$wh_port" -v ca="$ca_bundle" '
  /^    service:$/ {svc = 1; next}
  svc && /^      (name|namespace):/ {next}
  svc && /^      path:/ {print "    url: https://localhost:" port $2; print "    caBundle: " ca; svc = 0; next}
  /^  failurePolicy: Ignore$/ {print "  failurePolicy: Fail"; next}
  {print}' "$keda_dir/config/webhooks/validation_webhooks.yaml" >"$dir/keda-webhooks.yaml"
[ "$(grep -c "url: https://localhost:$wh_port/validate-" "$dir/keda-webhooks.yaml")" -ge 6 ] \
  || { say "KEDA's webhook configuration did not take the loopback URLs: $dir/keda-webhooks.yaml"; exit 1; }
"$kubectl" --kubeconfig "$kubeconfig" apply -f "$dir/keda-webhooks.yaml" >>"$dir/logs/keda-objects.log"
say "KEDA's ValidatingWebhookConfiguration registered (failurePolicy Fail)"
say "up: KUBECONFIG=$kubeconfig"
