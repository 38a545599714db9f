#!/usr/bin/env bash
# Simulator speed and memory, one core, release build: the seed-004 1M
# configuration (closed loop, 3 algorithms × 1,000,000 requests, five
# events per request, one of them queued: its hops take no time) and
# fleet-1000 (open loop, 64 balancers, 1,000 servers, 3 algorithms ×
# 10,000,000 requests, six events per request, all queued: four on the
# lane of the 100 µs hops, two in the radix heap) side by side. Runs are interleaved (seed-004, fleet-1000, seed-004, …) and
# never overlap, so the seed-004 figure is the baseline of the same
# machine state: on a shared, noisy machine compare the ratio, not the
# absolute figures.
#
#   bench/sim-speed.sh [REPEATS] [FLEET_SCENARIO]
#   FULCRUM_BIN=/path/to/old/fulcrum bench/sim-speed.sh   (another build, e.g.
#       an older commit built in its own directory, for before/after figures)
#
# REPEATS (default 3) runs of each; prints the median wall and CPU µs per
# simulated request, million events per CPU second, the fleet/seed-004
# ratio of CPU per request, and the largest peak resident memory of the
# runs (/usr/bin/time -v). A shorter
# fleet scenario can stand in as the second argument (the figures are per
# request, so its duration does not matter except for memory).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
fleet="${2:-scenarios/fleet-1000.toml}"
if [ -n "${FULCRUM_BIN:-}" ]; then
  bin="$FULCRUM_BIN"
else
  cargo build --release --locked -q -p fulcrum
  bin="${CARGO_TARGET_DIR:-target}/release/fulcrum"
fi
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (GNU time) for peak memory" >&2; exit 1; }

# One run, one thread → "wall_µs_per_request cpu_µs_per_request
# M_events_per_CPU_second peak_kB" from the simulator's own summary line and GNU
# time's report (both on stderr). CPU time (user + system) per request is
# the steadier figure when other processes compete for the cores.
once() {
  /usr/bin/time -v "$bin" sim "$1" --threads 1 2>&1 >/dev/null | awk '
    /^simulated .* µs per request/ {
      n = $2; events = ($5 == "events)") ? substr($4, 2) : ""
      for (i = 1; i <= NF; i++) {
        if ($(i+1) == "µs") us = substr($i, 2)
      }
    }
    /User time \(seconds\)|System time \(seconds\)/ { split($0, a, ": "); cpu += a[2] }
    /Maximum resident/ { split($0, a, ": "); rss = a[2] + 0 }
    END { printf "%s %.3f %s %s\n", us, cpu * 1e6 / n, (events == "" ? "?" : sprintf("%.2f", events / cpu / 1e6)), rss }'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A us cpu ev rss med
for _ in $(seq "$repeats"); do
  for s in scenarios/seed-004-1m.toml "$fleet"; do
    read -r u c e r < <(once "$s")
    us[$s]+="$u "; cpu[$s]+="$c "; ev[$s]+="$e "; rss[$s]+="$r "
  done
done
printf '%-20s %16s %16s %15s %14s\n' "median of $repeats" "wall µs/request" "CPU µs/request" "M events/CPU s" "peak RSS (MB)"
for s in scenarios/seed-004-1m.toml "$fleet"; do
  u=$(tr ' ' '\n' <<<"${us[$s]}" | grep . | median)
  c=$(tr ' ' '\n' <<<"${cpu[$s]}" | grep . | median)
  e=$(tr ' ' '\n' <<<"${ev[$s]}" | grep . | median)
  r=$(tr ' ' '\n' <<<"${rss[$s]}" | grep . | sort -g | tail -1)
  printf '%-20s %16s %16s %15s %14s\n' "$(basename "$s" .toml)" "$u" "$c" "$e" "$(awk -v k="$r" 'BEGIN{printf "%.0f", k/1024}')"
  med[$s]=$c
done
awk -v a="${med[scenarios/seed-004-1m.toml]}" -v b="${med[$fleet]}" \
  'BEGIN {printf "fleet / seed-004 CPU per request: %.2fx\n", b/a}'
