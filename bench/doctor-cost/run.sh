#!/usr/bin/env bash
# bench/doctor-cost: what a whole-host `gosleuth doctor` costs, against the
# issue's goal (<= 1% of a core outside the close looks at ~650 tasks, the
# verdict within --duration + 3 s), side by side with `pidstat -t 1` over the
# same window as the anchor for a /proc sampler.
#
# Population: ~150 sleeping processes with ~650 threads (the sleepers of
# bench/top-vs-htop), plus whatever runs on the host. ROUNDS rounds of:
# doctor --max-looks 0 (/proc only), doctor with close looks, pidstat.
# Prints medians of CPU (% of one core over the run) and wall time.
#
# Needs root, gcc and sysstat (apt-get install gcc sysstat).
# Usage: bench/doctor-cost/run.sh   (env: ROUNDS=3 DURATION=10s, BASE=REV, BIN=PATH, BASE_BIN=PATH)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
secs=${DURATION%s}
out=${OUT:-$here/out}
mkdir -p "$out"
for tool in gcc pidstat; do
  command -v $tool >/dev/null || { echo "run.sh: $tool is missing (apt-get install gcc sysstat)"; exit 1; }
done
gcc -O2 -pthread -o "$out/sleepers" "$repo/bench/top-vs-htop/sleepers.c"
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

pids=()
cleanup() { for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
setsid "$out/sleepers" 120 4 & pids+=($!)
sleep 2
echo "tasks on the host: $(ls -d /proc/[0-9]*/task/[0-9]* 2>/dev/null | wc -l)"

# run NAME CMD...: prints "NAME cpu_pct wall_s" (CPU of the command and its
# children, from GNU time's format, over its own wall time).
run() {
  local name=$1; shift
  /usr/bin/time -f "%U %S %e" -o "$out/time" "$@" >/dev/null 2>&1 || true
  read -r u s e < "$out/time"
  awk -v n="$name" -v u="$u" -v s="$s" -v e="$e" 'BEGIN { printf "%s %.2f %.2f\n", n, 100*(u+s)/e, e }'
}

: > "$out/results"
for r in $(seq "$ROUNDS"); do
  run doctor-proc "$out/gosleuth" doctor --duration "$DURATION" --max-looks 0 | tee -a "$out/results"
  run doctor-looks "$out/gosleuth" doctor --duration "$DURATION" | tee -a "$out/results"
  run pidstat-t pidstat -t -u -w 1 "$secs" | tee -a "$out/results"
  if [ -n "${BASE:-}" ]; then
    run doctor-proc-base "$out/gosleuth-base" doctor --duration "$DURATION" --max-looks 0 | tee -a "$out/results"
    run doctor-looks-base "$out/gosleuth-base" doctor --duration "$DURATION" | tee -a "$out/results"
  fi
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo
echo "medians over $ROUNDS rounds, window $DURATION:"
names="doctor-proc doctor-looks pidstat-t"
[ -n "${BASE:-}" ] && names="$names doctor-proc-base doctor-looks-base"
for n in $names; do
  c=$(awk -v n=$n '$1==n {print $2}' "$out/results" | median)
  w=$(awk -v n=$n '$1==n {print $3}' "$out/results" | median)
  echo "$n cpu ${c}% of a core, wall ${w} s"
done
p=$(awk '$1=="doctor-proc" {print $2}' "$out/results" | median)
a=$(awk '$1=="pidstat-t" {print $2}' "$out/results" | median)
awk -v p="$p" -v a="$a" 'BEGIN { if (a > 0) printf "doctor /proc window vs pidstat -t: %.2fx CPU\n", p/a }'
if [ -n "${BASE:-}" ]; then
  for n in doctor-proc doctor-looks; do
    c=$(awk -v n=$n '$1==n {print $2}' "$out/results" | median)
    b=$(awk -v n=$n-base '$1==n {print $2}' "$out/results" | median)
    awk -v n=$n -v c="$c" -v b="$b" -v base="$BASE" 'BEGIN { if (b > 0) printf "%s: this tree vs %s: %.2fx CPU\n", n, base, c/b }'
  done
fi
