#!/usr/bin/env bash
# Steps 1-3 of the demo's task-selection protocol (docs/history.md, "Choosing the demo's tasks"): BC on every MiniWoB++
# task with a scripted expert except the saturated 8, its greedy success on validation pages, and the rule that
# picks the 8 tasks where BC leaves room. Fixed before any result was seen:
#   - the demo's BC recipe: the pretrained base, 20 expert demonstrations per task, lr 1e-3, batches of 16, and
#     the same number of passes over the data as the demo's 150 steps on 8 x 20 demonstrations (so 150 steps per
#     160 demonstrations: each task gets the exposure it would get in an 8-task demo);
#   - validation pages only (eval.py --seed-start 500000), 30 greedy episodes per task, at most 6 interactions;
#   - the rule: the 8 candidates with validation success in [20%, 70%], closest to 45% first, ties by name;
#     fewer than 8: widen to [10%, 80%]; still fewer: what qualifies (at least 5).
#
#   CAND_OUT=runs/candidates   where everything goes; CAND_EPISODES=20; CAND_VAL=30
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, BASE, SATURATED_TASKS, stage, bc
OUT=${CAND_OUT:-runs/candidates}
EPISODES=${CAND_EPISODES:-20}
VAL=${CAND_VAL:-30}
mkdir -p "$OUT"

CANDIDATES=$($PY experiments/demo_candidates.py candidates "$SATURATED_TASKS")
echo "candidates: $CANDIDATES"

stage "1/3 expert demonstrations: $EPISODES per candidate"
$PY demos.py --tasks "$CANDIDATES" --episodes "$EPISODES" --out "$OUT/demos.jsonl"
DEMOS=$(wc -l < "$OUT/demos.jsonl")
STEPS=$(( (150 * DEMOS + 80) / 160 ))

stage "2/3 behavior cloning of $BASE on $DEMOS demonstrations: $STEPS steps at lr 1e-3"
bc "$OUT/demos.jsonl" "$OUT/bc" "$STEPS" short "$BASE" "$BC_DEMO_LR"

stage "3/3 greedy success on validation pages ($VAL per task, seeds 500000..)"
$PY eval.py --temperature 0 --model "bc=$OUT/bc/hf" --tasks "$CANDIDATES" --episodes "$VAL" --seed-start 500000 --prompt short \
  --max-new-tokens 64 --max-steps 6 --out "$OUT/val"

$PY experiments/demo_candidates.py choose "$OUT/val/results.json" | tee "$OUT/chosen.txt"
stage "done in $(( $(date +%s) - start ))s"
