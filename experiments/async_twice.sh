#!/usr/bin/env bash
# Issue 100, item 4: make demo's M-GRPO recipe one step off (--async-steps 1) run twice with one command, from the
# committed reference BC, seed 0, the two runs one after the other while other work shares the cores (the timing
# differs, the result must not): the sha256 of the two runs' weights, and their metrics without wall-clock figures.
#
#   TWICE_OUT=runs/twice bash experiments/async_twice.sh      (~20 min a run on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, RL_DEMO_*, seeded_rl, stage
OUT=${TWICE_OUT:-runs/twice}; BC=experiments/evidence/reference_bc
NEW=64; B=$RL_DEMO_B; G=$RL_DEMO_G
for run in a b; do
  [ -s "$OUT/$run/hf/config.json" ] || { stage "make demo's recipe at --async-steps 1, seed 0: run $run"
    seeded_rl "$BC" "$OUT/$run" "$RL_DEMO_STEPS" "$NEW" 0 --async-steps 1; }
done
$PY experiments/async_twice.py "$OUT/a" "$OUT/b"
