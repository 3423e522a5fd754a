#!/usr/bin/env bash
# P99 spikes set beside GC cycles, on the three patients of internal/load's
# tests (testdata/spiky), side by side in one run: a server whose spikes
# come from GC bursts (-cause gc: a cache of 600,000 pointer-rich entries
# that expires at once and is filled again), one whose spikes come from a
# lock held periodically (-cause lock) and one whose handler sleeps
# periodically (-cause sleep).
#
# Each round loads each patient at RATE/s for DURATION twice, in alternating
# order: with the GC clock read every 10 ms (the default) and with it off
# (--gc-poll 0), the anchor for what the clock costs gosleuth and the
# target. Prints one row per run and the medians; needs jq and root (or the
# same user, for process_vm_readv).
#
#   bench/load-gc/run.sh [ROUNDS] [DURATION] [RATE]     # defaults: 3 15s 1000
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
duration=${2:-15s}
rate=${3:-1000}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/gosleuth" ./cmd/gosleuth
go build -o "$tmp/spiky" ./internal/load/testdata/spiky

# start CAUSE: runs the patient, sets pid and url.
start() {
	"$tmp/spiky" -cause "$1" >"$tmp/$1.out" 2>&1 &
	pid=$!
	for _ in $(seq 200); do grep -qs listening "$tmp/$1.out" && break; sleep 0.1; done
	url="http://$(sed -n 's/^listening on //p' "$tmp/$1.out")/"
}

echo "rate ${rate}/s, ${duration} per run, ${rounds} rounds; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %5s %6s %7s %6s %9s %8s %8s %6s %9s %9s %9s\n' cause round poll spikes in_gc by_chance p tied assist gen_cpu% tgt_cpu% tgt_p99ms
rows="$tmp/rows"
: >"$rows"
for r in $(seq "$rounds"); do
	for p in gc lock sleep; do
		start "$p"
		polls=("10ms" "0")
		if [ $((r % 2)) -eq 0 ]; then polls=("0" "10ms"); fi
		for poll in "${polls[@]}"; do
			"$tmp/gosleuth" load "$url" --rate "$rate" --duration "$duration" --quiet --max-lag 1h \
				--gc-poll "$poll" --watch "$pid" --out-dir "$tmp/o" >/dev/null 2>&1 || true
			jq -r --arg p "$p" --arg r "$r" --arg poll "$poll" '
				.gc_spikes as $g | .steps[0] as $s |
				[$p, $r, $poll,
				 ($g.spikes // "-"), ($g.spikes_in_gc // "-"),
				 (if $g then ($g.expected_in_gc_by_chance*10|round/10) else "-" end),
				 (if $g == null then "-" elif $g.p_value < 0.001 then ($g.p_value|tostring|sub("(?<m>[0-9]\\.[0-9])[0-9]*e"; "\(.m)e")) else ($g.p_value*1000|round/1000) end),
				 (if $g then $g.tied else "-" end),
				 (if $g.assist_share_in_spike_cycles then ($g.assist_share_in_spike_cycles*100|round) else "-" end),
				 ($s.generator_cpu_cores*1000|round/10),
				 (($s.target.cpu_user_cores+$s.target.cpu_sys_cores)*1000|round/10),
				 $s.latency_ms.p99] | @tsv' "$tmp/o/report.json" | tee -a "$rows" |
				awk -F'\t' '{printf "%-6s %5s %6s %7s %6s %9s %8s %8s %6s %9s %9s %9s\n", $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12}'
		done
		kill "$pid"; wait "$pid" 2>/dev/null || true
	done
done
echo
echo "medians over the rounds (gen_cpu%: gosleuth's CPU in % of a core; with the clock against without, same rounds)"
for p in gc lock sleep; do
	awk -F'\t' -v p="$p" '
		function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
			return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
		$1 == p && $3 == "10ms" { n++; tied += ($8 == "true"); sp[n] = $4; in_[n] = $5; ch[n] = $6; g1[n] = $10; t1[n] = $11; q1[n] = $12 }
		$1 == p && $3 == "0" { m++; g0[m] = $10; t0[m] = $11; q0[m] = $12 }
		END { printf "%-6s tied %d of %d runs; spikes %s, in GC %s, by chance %s; gosleuth CPU %s%% with the clock, %s%% without; target CPU %s%% / %s%%; target p99 %s / %s ms\n",
			p, tied, n, med(sp, n), med(in_, n), med(ch, n), med(g1, n), med(g0, m), med(t1, n), med(t0, m), med(q1, n), med(q0, m) }' "$rows"
done
