#!/usr/bin/env bash
# Headroom of a policy before any RL tuning (issue 32, step 3): on the validation pages (seeds 500000.., 30 per
# task; never env.EVAL_SEEDS), greedy success beside pass@8 (8 samples at T = 1 per page: a page counts if any
# of them succeeds) and the mean success of those samples, per task. RL that only sharpens the policy towards
# what it already samples cannot lift greedy success above pass@8.
#   bash experiments/demo_headroom.sh MODEL_DIR OUT     (e.g. runs/budget/bc300/hf runs/budget/headroom)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, stage
MODEL=$1; OUT=$2; K=${HEADROOM_K:-8}; EVAL=${HEADROOM_PAGES:-30}
val() {   # NAME TEMPERATURE SEED
  [ -s "$OUT/$1/results.json" ] || $PY eval.py --model "$1=$MODEL" --tasks "$TASKS" --episodes "$EVAL" \
    --seed-start 500000 --prompt short --max-new-tokens 64 --max-steps 6 --temperature "$2" --seed "$3" \
    --concurrency 8 --no-screenshots --out "$OUT/$1"
}
stage "greedy on the validation pages"
val greedy 0 0
for k in $(seq 0 $((K - 1))); do stage "sample $k at T = 1"; val "t1-$k" 1 "$k"; done
$PY experiments/demo_headroom.py "$OUT" "$K"
stage "done in $(( $(date +%s) - start ))s: $OUT/headroom.md"
