#!/usr/bin/env bash
# bench/top-vs-htop: CPU, syscalls and RSS of `gosleuth top` against htop, in
# one run, both in tmux with threads shown and a 1 s refresh.
#
# Population 1: ~150 sleeping processes with ~650 threads. Population 2: ~3,600
# threads. For each population, ROUNDS rounds alternate the tools; each
# measurement is WARMUP s of warm-up, a CPU window of WINDOW s from
# the threads' schedstat (nothing attached), then a separate PERFWIN s `perf stat` of
# every syscalls:sys_enter_* tracepoint. Prints medians and the ratios.
#
# Needs root, gcc, tmux, htop and perf (apt-get install htop tmux linux-perf gcc).
# Usage: bench/top-vs-htop/run.sh   (env: ROUNDS=2 WINDOW=30 PERFWIN=10 WARMUP=5, BASE=REV, BIN=PATH, BASE_BIN=PATH)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
ROUNDS=${ROUNDS:-2}
WINDOW=${WINDOW:-30}
PERFWIN=${PERFWIN:-10}
WARMUP=${WARMUP:-5}
out=${OUT:-$here/out}
mkdir -p "$out"
for tool in gcc tmux htop perf; do
  command -v $tool >/dev/null || { echo "run.sh: $tool is missing (apt-get install htop tmux linux-perf gcc)"; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run.sh: run as root (perf stat on tracepoints)"; exit 1; }

gcc -O2 -pthread -o "$out/sleepers" "$here/sleepers.c"
[ -n "${BIN:-}" ] || (cd "$repo" && go build -o "$out/gosleuth" ./cmd/gosleuth)
# BASE=REV also builds gosleuth at that git revision and measures it beside
# the current tree in the same run (before/after figures of a change).
# BIN=PATH and BASE_BIN=PATH take binaries built elsewhere instead (a clean
# checkout of a commit, where the tree holds changes not committed); with
# BASE_BIN, BASE only names the base in the summary.
if [ -n "${BIN:-}" ]; then
  cp "$BIN" "$out/gosleuth"
fi
if [ -n "${BASE_BIN:-}" ]; then
  BASE=${BASE:-base}
  cp "$BASE_BIN" "$out/gosleuth-base"
elif [ -n "${BASE:-}" ]; then
  rm -rf "$out/base-src"; mkdir -p "$out/base-src"
  git -C "$repo" archive "$BASE" | tar -x -C "$out/base-src"
  (cd "$out/base-src" && go build -o "$out/gosleuth-base" ./cmd/gosleuth)
fi
export HOME=$out/home   # htop with its default settings (userland threads shown)
rm -rf "$HOME"; mkdir -p "$HOME"

pids=()
cleanup() {
  tmux kill-session -t bench 2>/dev/null || true
  for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

spawn() { # NPROC NTHREAD
  setsid "$out/sleepers" "$1" "$2" &
  pids+=($!)
}

tasks() { ls -d /proc/[0-9]*/task/[0-9]* 2>/dev/null | wc -l; }
# ticks: CPU time in 10 ms units (stat's ticks), but from every thread's
# schedstat run time in ns: stat's ticks quantize a 30 s window of a tool at
# 0.25% of a core to 7 or 8 ticks, +-13%.
ticks() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s+=$1} END {printf "%.4f", s/1e7}'; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# measure NAME CMD...: prints "name cpu_pct ms_per_refresh syscalls_per_refresh per_task openat_per_refresh rss_mb"
measure() {
  local name=$1; shift
  tmux kill-session -t bench 2>/dev/null || true
  tmux new-session -d -s bench -x 200 -y 50 "$*"
  sleep 1
  local pid
  pid=$(pgrep -n -f "^$1( |$)" || true)
  [ -n "$pid" ] || { echo "run.sh: $name did not start" >&2; return 1; }
  sleep "$WARMUP"
  local t0 t1 s0 s1
  t0=$(ticks "$pid"); s0=$(date +%s.%N)
  sleep "$WINDOW"
  t1=$(ticks "$pid"); s1=$(date +%s.%N)
  local rss; rss=$(rss_kb "$pid")
  local ntask; ntask=$(tasks)
  perf stat -x, -e 'syscalls:sys_enter_*' -p "$pid" -o "$out/perf-$name.txt" -- sleep "$PERFWIN" 2>/dev/null || true
  tmux kill-session -t bench 2>/dev/null || true
  sleep 1
  awk -F, -v name="$name" -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v rss="$rss" -v win="$PERFWIN" -v ntask="$ntask" '
    $3 ~ /syscalls:sys_enter_/ && $1 ~ /^[0-9]+$/ { n=$1; sub(/syscalls:sys_enter_/, "", $3); total+=n; by[$3]=n }
    END {
      cpu = (t1-t0) / (s1-s0)          # ticks per second = percent of one CPU
      top = ""
      for (k in by) if (by[k] >= win) top = top sprintf("%s=%.0f ", k, by[k]/win)
      printf "%s %.2f %.2f %.0f %.2f %.1f %.1f %d %s\n", name, cpu, cpu*10, total/win, total/win/ntask, by["openat"]/win, rss/1024, ntask, top
    }' "$out/perf-$name.txt"
}

calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }

med() { # TOOL COLUMN LABEL: median of a column over the rounds
  awk -v t="$1" -v c="$2" '$1 == t { print $c }' "$out/$3.txt" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR+1)/2]; else printf "%.2f\n", (v[NR/2] + v[NR/2+1]) / 2 }'
}

population() { # label
  local label=$1
  echo "== $label: $(tasks) tasks in $(ls -d /proc/[0-9]* | wc -l) processes"
  : > "$out/$label.txt"
  for r in $(seq "$ROUNDS"); do
    measure gosleuth "$out/gosleuth" top -H --interval 1s | tee -a "$out/$label.txt"
    measure htop htop -d 10 | tee -a "$out/$label.txt"
    if [ -n "${BASE:-}" ]; then
      measure gosleuth-base "$out/gosleuth-base" top -H --interval 1s | tee -a "$out/$label.txt"
    fi
  done
  local g h
  g=$(med gosleuth 2 "$label"); h=$(med htop 2 "$label")
  {
    echo "$label: gosleuth cpu $g% ($(calc "$g*10") ms/refresh), htop $h% ($(calc "$h*10") ms/refresh): ratio $(calc "$g/$h")x"
    echo "$label: syscalls per task per refresh: gosleuth $(med gosleuth 5 "$label"), htop $(med htop 5 "$label"); openat/s: gosleuth $(med gosleuth 6 "$label"), htop $(med htop 6 "$label")"
    echo "$label: RSS: gosleuth $(med gosleuth 7 "$label") MB, htop $(med htop 7 "$label") MB"
    if [ -n "${BASE:-}" ]; then
      local b; b=$(med gosleuth-base 2 "$label")
      echo "$label: this tree vs $BASE: cpu $g% vs $b%: $(calc "$g/$b")x; syscalls/task/refresh $(med gosleuth 5 "$label") vs $(med gosleuth-base 5 "$label")"
    fi
  } | tee -a "$out/summary.txt"
}

: > "$out/summary.txt"
echo "columns: tool cpu% ms/refresh syscalls/s syscalls/task/refresh openat/s rss_MB tasks top-syscalls/s"
spawn 100 1
spawn 50 11
sleep 2
population small
spawn 140 21
sleep 3
population large
# Accuracy: a busy process's CPU% from gosleuth and from pidstat over the same
# window (both sample the kernel's utime/stime once a second).
accuracy() { # label CMD...
  local label=$1; shift
  "$@" >/dev/null 2>&1 &
  local pid=$!
  pids+=($pid)
  sleep 1
  pidstat -u -p "$pid" 1 10 > "$out/pidstat-$label.txt" &
  local ps=$!
  "$out/gosleuth" top --pid "$pid" --format json --count 10 > "$out/gosleuth-$label.json"
  wait $ps || true
  kill "$pid" 2>/dev/null || true
  local p g
  p=$(awk '/^Average:/ && $3 ~ /^[0-9]+$/ { printf "%.2f %.2f", $4, $5 }' "$out/pidstat-$label.txt")
  g=$(python3 -c 'import json,sys
rs=[json.loads(l)["processes"][0] for l in open(sys.argv[1])]
print("%.2f %.2f" % (sum(r["cpu_user_pct"] for r in rs)/len(rs), sum(r["cpu_sys_pct"] for r in rs)/len(rs)))' "$out/gosleuth-$label.json")
  echo "accuracy $label: usr/sys % pidstat $p, gosleuth $g" | tee -a "$out/summary.txt"
}
accuracy busy-user yes
accuracy busy-sys dd if=/dev/zero of=/dev/null bs=64

echo; cat "$out/summary.txt"
