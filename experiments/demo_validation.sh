#!/usr/bin/env bash
# Step 4 of the demo's task-selection protocol (docs/history.md, "Choosing the demo's tasks"), on validation pages only
# (eval.py --seed-start 500000, 30 greedy episodes per task; never env.EVAL_SEEDS): BC with the demo's recipe
# (the pretrained base, 20 demonstrations per task, 150 steps at lr 1e-3), BC continued to 300 steps (the
# convergence check, and the "BC continued for RL's wall time" control), M-GRPO from the 150-step BC with the
# demo's RL settings (+ VAL_RL_ARGS: a lever under test, its run named VAL_RL_NAME), then one evaluation of
# every model on the same pages (paired). A stage whose output exists is not run again.
#
#   VAL_TASKS=miniwob:...   (default: the demo's TASKS)     VAL_OUT=runs/validation
#   VAL_RL_ARGS="--dynamic-sampling 3"  VAL_RL_NAME=rl-ds3  VAL_EVAL=30
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # TASKS, BASE, stage, bc, rl
TASKS=${VAL_TASKS:-$TASKS}
OUT=${VAL_OUT:-runs/validation}
RL_NAME=${VAL_RL_NAME:-rl}
EVAL=${VAL_EVAL:-30}
B=4; G=4; RL_STEPS=48; NEW=64
mkdir -p "$OUT"

[ -s "$OUT/demos.jsonl" ] || { stage "expert demonstrations: 20 per task of $TASKS"
  $PY demos.py --tasks "$TASKS" --episodes 20 --out "$OUT/demos.jsonl"; }
[ -d "$OUT/bc/hf" ] || { stage "BC of $BASE: 150 steps at lr 1e-3"; bc "$OUT/demos.jsonl" "$OUT/bc" 150 short "$BASE" 1e-3; }
[ -d "$OUT/$RL_NAME/hf" ] || { stage "M-GRPO from the 150-step BC: $RL_STEPS steps of $B x G=$G ${VAL_RL_ARGS:-}"
  rl "$OUT/bc/hf" "$OUT/$RL_NAME" "$RL_STEPS" "$NEW" ${VAL_RL_ARGS:-}; }
[ -d "$OUT/bc300/hf" ] || { stage "BC continued: 300 steps at lr 1e-3"
  demo_bc "$OUT/demos.jsonl" "$OUT/bc300"; }

MODELS="base=$BASE,bc=$OUT/bc/hf,bc300=$OUT/bc300/hf"
for run in "$OUT"/rl*/hf; do MODELS="$MODELS,$(basename "$(dirname "$run")")=$run"; done
stage "validation pages: $EVAL per task, seeds 500000.. ($MODELS)"
$PY eval.py --temperature 0 --model "$MODELS" --tasks "$TASKS" --episodes "$EVAL" --seed-start 500000 --prompt short \
  --max-new-tokens "$NEW" --max-steps 6 --out "$OUT/val"
stage "done in $(( $(date +%s) - start ))s"
cat "$OUT/val/results.md"
