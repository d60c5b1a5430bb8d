#!/usr/bin/env bash
# `make setup` of a fresh .venv through pip (WEBAGENT_UV=0) against through uv (the default), side by side:
# REPS rounds (default 2), the two taking turns, each into a new venv, uv's cache emptied before each of its runs
# (a fresh machine's). Prints each run's seconds and the ratio pip / uv.
#
#   bash bench/bench_setup.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

seconds() {   # seconds MODE: one fresh setup, its wall time
  local start
  rm -rf "$work/venv" "$work/uv-cache"
  start=$(date +%s.%N)
  if [ "$1" = pip ]; then
    WEBAGENT_UV=0 VENV="$work/venv" bash scripts/setup.sh >"$work/log" 2>&1
  else
    UV_CACHE_DIR="$work/uv-cache" VENV="$work/venv" bash scripts/setup.sh >"$work/log" 2>&1
  fi || { cat "$work/log" >&2; exit 1; }
  awk "BEGIN { print $(date +%s.%N) - $start }"
}

runs=""
for r in $(seq "$REPS"); do
  p=$(seconds pip); u=$(seconds uv)
  awk -v r="$r" -v p="$p" -v u="$u" 'BEGIN { printf "round %d: pip %.1f s, uv %.1f s, x%.2f\n", r, p, u, p / u }'
  runs="$runs $p $u"
done
echo "$runs" | awk '{ for (i = 1; i < NF; i += 2) { p += $i; u += $(i + 1) }
  printf "mean of %d rounds: pip %.1f s, uv %.1f s, x%.2f\n", NF / 2, 2 * p / NF, 2 * u / NF, p / u }'
