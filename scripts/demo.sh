#!/usr/bin/env bash
# `make demo`: the whole WebAgent-R1 pipeline on the embedded default (MiniWoB++ in headless Chromium, a tiny
# model on the CPU): expert demonstrations -> behavior cloning of the pretrained tiny base -> M-GRPO from the
# BC checkpoint -> evaluation of the base, BC and RL models on held-out seeds, then one success-rate table.
#
#   DEMO_SIZE=smoke|default|long   (default: default, about 22 minutes on a 2-core CPU box)
#   DEMO_ZERO=1                    also run R1-Zero (M-GRPO from the base, no BC, same budget)
#   DEMO_OUT=runs/demo             where everything goes
#   DEMO_MODEL=$BASE               the model BC starts from: assets/tiny-web-base (pretrained on synthetic
#                                  pages, README "The tiny web base"), or tiny:layers=4,hidden=192 (untrained)
#   DEMO_EPISODES, DEMO_BC_STEPS, DEMO_BC_LR, DEMO_EVAL   override the size's budgets
#
# Settings for this CPU miniature, chosen before the RL runs (README "Results on the embedded default"):
# demonstrations are scarce, 20 per task, as in the paper's regime (WebArena-Lite's BC set is small, interaction
# is plentiful); BC runs 150 steps at lr 1e-3 (a pretrained base: 300 steps scored +2.1 +- 2.3 on validation
# pages, within one SE); M-GRPO keeps its lr 1e-4, B 4 x G 4 and 48 steps; 50 held-out episodes per task.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # TASKS, MODEL, BASE, stage, bc, rl
OUT=${DEMO_OUT:-runs/demo}
SIZE=${DEMO_SIZE:-default}
INIT=${DEMO_MODEL:-$BASE}
case "$SIZE" in
  smoke)   EPISODES=3;  BC_STEPS=4;   RL_STEPS=2;   B=2; G=2; EVAL=2;   NEW=48 ;;
  default) EPISODES=20; BC_STEPS=150; RL_STEPS=48;  B=4; G=4; EVAL=50;  NEW=64 ;;
  long)    EPISODES=20; BC_STEPS=150; RL_STEPS=150; B=4; G=4; EVAL=100; NEW=64 ;;
  *) echo "DEMO_SIZE must be smoke, default or long" >&2; exit 2 ;;
esac
EPISODES=${DEMO_EPISODES:-$EPISODES}; BC_STEPS=${DEMO_BC_STEPS:-$BC_STEPS}; EVAL=${DEMO_EVAL:-$EVAL}
BC_LR=${DEMO_BC_LR:-1e-3}
mkdir -p "$OUT"

stage "1/4 expert demonstrations: $EPISODES episodes per task (experts.py)"
$PY experts.py --tasks "$TASKS" --episodes "$EPISODES" --out "$OUT/demos.jsonl"

stage "2/4 behavior cloning of $INIT: $BC_STEPS steps at lr $BC_LR (train_bc.py, Eq. 1)"
bc "$OUT/demos.jsonl" "$OUT/bc" "$BC_STEPS" short "$INIT" "$BC_LR"

stage "3/4 M-GRPO from the BC checkpoint: $RL_STEPS steps of $B tasks x G=$G (train_mgrpo.py, Eq. 2)"
rl "$OUT/bc/hf" "$OUT/rl" "$RL_STEPS" "$NEW"

MODELS="base=$INIT,bc=$OUT/bc/hf,rl=$OUT/rl/hf"
if [ "${DEMO_ZERO:-0}" = 1 ]; then
  stage "3b R1-Zero: M-GRPO from the base (no BC), same budget"
  rl "$INIT" "$OUT/r1zero" "$RL_STEPS" "$NEW"
  MODELS="$MODELS,r1-zero=$OUT/r1zero/hf"
fi

stage "4/4 evaluation on held-out seeds: $EVAL episodes per task (eval.py)"
$PY eval.py --model "$MODELS" --tasks "$TASKS" --episodes "$EVAL" --prompt short --max-new-tokens "$NEW" \
  --max-steps 3,6 --out "$OUT/eval"

stage "done in $(( $(date +%s) - start ))s"
cat "$OUT/eval/results.md"
echo
echo "plots: $OUT/bc/loss.png $OUT/rl/dynamics.png $OUT/eval/test_time_scaling.png"
echo "trajectory viewer: $OUT/eval/viewer/index.html"
