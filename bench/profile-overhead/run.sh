#!/usr/bin/env bash
# bench/profile-overhead: what sampling costs the target. In one run, for
# each workload (hash: crypto/sha256; syscall: getppid(2) loop; WORKERS busy
# goroutines, 1 by default so the tools have a CPU of their own), ROUNDS
# rounds of three runs of DURATION s each, in rotating order:
#   alone     the target by itself
#   gosleuth  under `gosleuth profile --hz 99 -- target`
#   perf      under `perf record -F 99 -g -- target`
#   gosleuth  is the default (--events auto); with MODES=1 also
#   thread    under `gosleuth profile --events thread` (one event per thread,
#             the only mode without root), and
#   cpu       under `gosleuth profile --events cpu` (one event per CPU)
#   offcpu    (with OFFCPU=1) under `gosleuth profile --off-cpu`, on a third
#             workload too: switch, two goroutines ping-ponging over pipes
# The target prints its operations and its own CPU time. Reported per
# workload: the medians of throughput (ops/s, wall) and of CPU per operation,
# the slowdowns of those medians against "alone" (1.00 = no cost), and the
# median over rounds of each round's own ratio (the three runs of a round
# are adjacent in time, so that ratio cancels slow drifts of a shared host).
# Then the time to load symbols from a large Go binary (the compiler).
#
# Needs root (kernel stacks) and perf (apt-get install linux-perf).
# Usage: bench/profile-overhead/run.sh   (env: ROUNDS=7 DURATION=5 HZ=99 WORKERS=1 OFFCPU=0 MODES=0 WORKS='hash syscall switch')
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
ROUNDS=${ROUNDS:-7}
DURATION=${DURATION:-5}
HZ=${HZ:-99}
WORKERS=${WORKERS:-1}
OFFCPU=${OFFCPU:-0}
MODES=${MODES:-0}
out=${OUT:-$(mktemp -d)}
command -v perf >/dev/null || { echo "run.sh: perf is missing (apt-get install linux-perf)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run.sh: run as root (kernel stacks)"; exit 1; }

(cd "$repo" && go build -o "$out/gosleuth" ./cmd/gosleuth && go build -o "$out/target" ./bench/profile-overhead/target)
echo "profile-overhead: $ROUNDS rounds x ${DURATION}s, ${HZ} Hz, $WORKERS workers, $(nproc) CPUs, $(uname -r), out $out"

run() { # TOOL WORK -> "ops cpu wall"
  local t=(-work "$2" -d "${DURATION}s" -workers "$WORKERS") line
  case $1 in
    alone) line=$("$out/target" "${t[@]}") ;;
    gosleuth) line=$("$out/gosleuth" profile --hz "$HZ" --duration 0 -o "$out/g.pb.gz" \
                       --format json -- "$out/target" "${t[@]}" 2>&1 >"$out/g.json" | grep '^ops=') ;;
    thread) line=$("$out/gosleuth" profile --hz "$HZ" --duration 0 --events thread -o "$out/t.pb.gz" \
                     --format json -- "$out/target" "${t[@]}" 2>&1 >"$out/t.json" | grep '^ops=') ;;
    cpu) line=$("$out/gosleuth" profile --hz "$HZ" --duration 0 --events cpu -o "$out/c.pb.gz" \
                  --format json -- "$out/target" "${t[@]}" 2>&1 >"$out/c.json" | grep '^ops=') ;;
    offcpu) line=$("$out/gosleuth" profile --hz "$HZ" --duration 0 --off-cpu -o "$out/o.pb.gz" \
                     --format json -- "$out/target" "${t[@]}" 2>&1 >"$out/o.json" | grep '^ops=') ;;
    perf) line=$(perf record -q -F "$HZ" -g -o "$out/perf.data" -- "$out/target" "${t[@]}" 2>/dev/null | grep '^ops=') ;;
  esac
  echo "$line" | sed 's/ops=//; s/cpu=//; s/wall=//'
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

tools=(alone gosleuth perf)
works=(hash syscall)
if [ "$MODES" = 1 ]; then tools+=(thread cpu); fi
if [ "$OFFCPU" = 1 ]; then tools+=(offcpu); fi
if [ "$OFFCPU" = 1 ] || [ "$MODES" = 1 ]; then works+=(switch); fi
if [ -n "${WORKS:-}" ]; then read -r -a works <<<"$WORKS"; fi
nt=${#tools[@]}
for work in "${works[@]}"; do
  declare -A thr=() cpo=() t1=() c1=() rthr=() rcpo=()
  for ((r = 0; r < ROUNDS; r++)); do
    for ((i = 0; i < nt; i++)); do
      tool=${tools[$(((r + i) % nt))]}
      read -r ops cpu wall < <(run "$tool" "$work")
      t1[$tool]=$(awk -v o="$ops" -v w="$wall" 'BEGIN {printf "%.0f", o / w}')
      c1[$tool]=$(awk -v o="$ops" -v c="$cpu" 'BEGIN {printf "%.2f", 1e9 * c / o}')
      thr[$tool]+="${t1[$tool]} "
      cpo[$tool]+="${c1[$tool]} "
      case $tool in gosleuth|thread|cpu)
        j=$out/${tool:0:1}.json
        cov=$(sed -n 's/.*"coverage": \([0-9.]*\).*/\1/p' "$j")
        lost=$(sed -n 's/.*"lost": \([0-9]*\).*/\1/p' "$j")
        moved=$(grep -c 'moved from per-thread' "$j" || true)
        echo "  $work round $r $tool: coverage ${cov:-?} lost ${lost:-?} moved-to-per-CPU ${moved}"
      esac
    done
    for tool in "${tools[@]:1}"; do
      rthr[$tool]+="$(awk -v a="${t1[alone]}" -v b="${t1[$tool]}" 'BEGIN {printf "%.4f", a / b}') "
      rcpo[$tool]+="$(awk -v a="${c1[$tool]}" -v b="${c1[alone]}" 'BEGIN {printf "%.4f", a / b}') "
    done
  done
  base_t=$(tr ' ' '\n' <<<"${thr[alone]}" | grep . | median)
  base_c=$(tr ' ' '\n' <<<"${cpo[alone]}" | grep . | median)
  echo "== $work"
  printf '  %-9s %14s %10s %14s %10s   rounds: ops/s\n' tool "median ops/s" slowdown "ns CPU/op" "x CPU/op"
  for tool in "${tools[@]}"; do
    t=$(tr ' ' '\n' <<<"${thr[$tool]}" | grep . | median)
    c=$(tr ' ' '\n' <<<"${cpo[$tool]}" | grep . | median)
    printf '  %-9s %14.0f %10.3f %14.1f %10.3f   %s\n' "$tool" "$t" "$(awk -v a="$base_t" -v b="$t" 'BEGIN {print a / b}')" \
      "$c" "$(awk -v a="$c" -v b="$base_c" 'BEGIN {print a / b}')" "${thr[$tool]}"
  done
  for tool in "${tools[@]:1}"; do
    printf '  %-9s median of per-round ratios: slowdown %.3f, x CPU/op %.3f\n' "$tool" \
      "$(tr ' ' '\n' <<<"${rthr[$tool]}" | grep . | median)" "$(tr ' ' '\n' <<<"${rcpo[$tool]}" | grep . | median)"
  done
  unset thr cpo t1 c1 rthr rcpo
done

echo "== symbol loading (internal/stacks BenchmarkLoadObject: ELF + pclntab of the Go compiler, $(du -h "$(go env GOROOT)/pkg/tool/$(go env GOOS)_$(go env GOARCH)/compile" | cut -f1))"
(cd "$repo" && go test -run '^$' -bench 'LoadObject' -benchtime 5x ./internal/stacks/ | grep -E '^Benchmark')
