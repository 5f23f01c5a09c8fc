#!/usr/bin/env bash
# controlplane.sh down stops the processes its pid files name, and only those: a pid
# file written before its process started names a number the kernel has handed to
# another process since (pid_max may be 32768), and that process is left alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/dtq-down-test.XXXXXX)
mine='' other=''
trap 'kill $mine $other 2>/dev/null || true; rm -rf "$dir"' EXIT
mkdir -p "$dir/pids"

# shellcheck source=proc.sh
. "$here/proc.sh"
# alive PID: running, not a zombie waiting to be reaped (field 3: the state)
alive() {
  local st
  st=$(proc_stat "$1" 3)
  [ -n "$st" ] && [ "$st" != Z ]
}

sleep 600 &
mine=$!
echo "$mine" >"$dir/pids/mine"
sleep 600 &
other=$!
echo "$other" >"$dir/pids/reused"
# the file is older than the process now holding its pid: another process reused it
touch -d '-1 hour' "$dir/pids/reused"

"$here/controlplane.sh" down "$dir"
if alive "$mine"; then
  echo "down_test: FAIL: the process its pid file names still runs" >&2
  exit 1
fi
if ! alive "$other"; then
  echo "down_test: FAIL: down stopped a process that only reused a recorded pid" >&2
  exit 1
fi
[ -z "$(ls -A "$dir/pids")" ] || { echo "down_test: FAIL: pid files left: $(ls "$dir/pids")" >&2; exit 1; }
echo "down_test: ok"
