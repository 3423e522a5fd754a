#!/usr/bin/env bash
# Runs every fuzz target for a while, one after the other (two at a time would
# starve the tests on a 2-core machine). CI runs it for ~15 s each; for the
# long campaign (10 minutes each) run: bench/fuzz/run.sh 10m; a second
# argument keeps the targets whose line matches it (grep -E), e.g.
# bench/fuzz/run.sh 10m gomem for the runtime books' decoders.
# New crashers are written under the package's testdata/fuzz/ by go test:
# commit them with the fix, so they stay in the corpus.
set -euo pipefail
cd "$(dirname "$0")/../.."
time=${1:-15s}
targets=(
  "./internal/stacks FuzzGoTable"       # pclntab of any binary on the host
  "./internal/stacks FuzzObject"        # ELF headers and segments
  "./internal/stacks FuzzImage"         # another process's binary, for GOMAXPROCS's address
  "./internal/goruntime FuzzRipLoads32" # that binary's code, for the load of runtime.gomaxprocs
  "./internal/gomem FuzzRipRefs"        # a binary's code, for the runtime's variables in a stripped binary
  "./internal/gomem FuzzCensus"         # another process's memory: goroutines (allgs and each g)
  "./internal/gomem FuzzStats"          # another process's memory: GC, memory, scheduler, each P's timers
  "./internal/gomem FuzzGCClock"        # another process's memory: the GC clock and its ring of cycles
  "./internal/gomem FuzzHeapProfile"    # another process's memory: the heap profile's buckets
  "./internal/proc FuzzContainer"       # cgroup paths and mountinfo lines, for a process's container
  "./internal/escape FuzzParse"         # the compiler's escape-analysis diagnostics
  "./internal/stacks FuzzParseSample"   # perf sample records
  "./internal/stacks FuzzKallsyms"      # /proc/kallsyms, against a strings/strconv reference
  "./internal/perf FuzzReadRecords"     # the perf ring walk
  "./internal/proc FuzzParsers"         # /proc stat, status, io, limits, cmdline
  "./internal/proc FuzzTaskstats"       # taskstats replies over generic netlink
  "./internal/goruntime FuzzParsers"    # /metrics pages, goroutine dumps, MemStats
  "./internal/load FuzzReadResponse"    # HTTP/1 replies, against net/http
  "./internal/probe FuzzProbePoint"     # function prologues of any binary
  "./internal/probe FuzzStaleEvents"    # tracefs uprobe_events, shared with every tracer
)
only=${2:-.}
fail=0
for t in "${targets[@]}"; do
  grep -Eq -- "$only" <<<"$t" || continue
  set -- $t
  echo "== fuzz $2 ($1) for $time"
  out=$(mktemp)
  ok=0
  for try in 1 2; do
    if go test -run '^$' -fuzz "^$2\$" -fuzztime "$time" -parallel 1 "$1" >"$out" 2>&1; then
      ok=1
      break
    fi
    # The fuzzing engine itself can fail as the time runs out, a worker
    # caught mid-input: "context deadline exceeded" with no input found
    # (a CI run saw it once in 13 targets). That, and only that, is run
    # again; a crasher's failure says "Failing input written to".
    if grep -q 'Failing input written to' "$out" || ! grep -q 'context deadline exceeded' "$out"; then
      break
    fi
    echo "(the fuzzing engine stopped with 'context deadline exceeded' and no failing input: running again)"
  done
  if [ "$ok" = 1 ]; then
    tail -n 3 "$out"
  else
    # The whole tail: a failure's cause (a crasher's input and stack, or
    # the fuzzing engine's own error) is above its last lines.
    tail -n 40 "$out"
    fail=1
  fi
  rm -f "$out"
done
exit $fail
