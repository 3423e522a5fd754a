#!/bin/sh
# Measures what "gosleuth syscalls" costs the counted process and others,
# against perf stat and strace, in one run (see main.go). Needs root, perf
# and strace (apt-get install -y linux-perf strace). Extra flags go to the
# bench, e.g. ./run.sh -rounds 5 -window 3s.
set -eu
cd "$(dirname "$0")"
command -v perf >/dev/null || { echo "run.sh: perf not found (apt-get install -y linux-perf)" >&2; exit 1; }
command -v strace >/dev/null || { echo "run.sh: strace not found (apt-get install -y strace)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/gosleuth" ../../cmd/gosleuth
go build -o "$dir/bench" .
"$dir/bench" -gosleuth "$dir/gosleuth" "$@"
