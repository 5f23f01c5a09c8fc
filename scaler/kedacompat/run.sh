#!/usr/bin/env bash
# KEDA compatibility tests: dtq's scaler driven by KEDA v2.21.0's own external and
# external-push scalers. A module of its own: pkg/scalers compiles in about 15 min cold
# on two cores (longer with -race); the build cache makes later runs take seconds.
#
#   scaler/kedacompat/run.sh                   # what CI runs: vet, then go test -race
#   KEDACOMPAT_RACE=0 scaler/kedacompat/run.sh # without the race detector
#   scaler/kedacompat/run.sh -run Push         # extra go test flags pass through
set -euo pipefail
cd "$(dirname "$0")"
command -v redis-server >/dev/null || { echo "kedacompat: redis-server is not on PATH" >&2; exit 1; }
race=-race
[ "${KEDACOMPAT_RACE:-1}" = 0 ] && race=
go vet ./...
exec go test $race -count=1 ./... "$@"
