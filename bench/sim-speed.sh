#!/usr/bin/env bash
# Simulator speed and memory on the seed-004 1M configuration (3 algorithms,
# 3,000,000 simulated requests), release build.
#
#   bench/sim-speed.sh [REPEATS]
#
# Prints the best and median wall time over REPEATS runs (default 5) with
# all cores, the same with one thread (the baseline, measured in the same
# run), their ratio, µs per simulated request, and the peak resident memory
# reported by /usr/bin/time -v.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-5}"
cargo build --release --locked -q -p fulcrum
bin="${CARGO_TARGET_DIR:-target}/release/fulcrum"
scenario=scenarios/seed-004-1m.toml

wall() { # threads → wall seconds as the simulator reports it
  "$bin" sim "$scenario" --json --threads "$1" | sed -n 's/.*"wall_seconds": \([0-9.e-]*\).*/\1/p'
}
stats() { # threads → "best median"
  local xs=()
  for _ in $(seq "$repeats"); do xs+=("$(wall "$1")"); done
  printf '%s\n' "${xs[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.3f %.3f\n", a[1], a[int((NR+1)/2)]}'
}
read -r best med < <(stats "$(nproc)")
read -r best1 med1 < <(stats 1)
if [ -x /usr/bin/time ]; then
  rss=$(/usr/bin/time -v "$bin" sim "$scenario" --json 2>&1 >/dev/null | awk -F: '/Maximum resident/ {gsub(/ /,"",$2); print $2}')
else
  rss="?"
fi
echo "scenario:            $scenario (3 algorithms, 3,000,000 requests), $repeats repeats"
echo "threads=$(nproc):           best ${best} s, median ${med} s  ($(awk -v w="$med" 'BEGIN{printf "%.3f", w*1e6/3e6}') µs per request)"
echo "threads=1 (baseline): best ${best1} s, median ${med1} s"
echo "speed-up:            $(awk -v a="$med1" -v b="$med" 'BEGIN{printf "%.2f", a/b}')x"
echo "peak memory:         ${rss} KB (max resident set, threads=$(nproc))"
