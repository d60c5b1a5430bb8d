#!/usr/bin/env bash
# `make demo`: the whole WebAgent-R1 pipeline on the embedded default (MiniWoB++ in headless Chromium, a tiny
# model on the CPU): expert demonstrations -> behavior cloning -> M-GRPO from the BC checkpoint -> evaluation of
# the untrained, BC and RL models on held-out seeds, then one success-rate table.
#
#   DEMO_SIZE=smoke|default|long   (default: default, about 30 minutes on a 2-core CPU box)
#   DEMO_ZERO=1                    also run R1-Zero (M-GRPO from the untrained model, same budget)
#   DEMO_OUT=runs/demo             where everything goes
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=${DEMO_OUT:-runs/demo}
SIZE=${DEMO_SIZE:-default}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.torch_extensions}

# 8 MiniWoB++ tasks, the last three multi-step (3+ actions)
TASKS=miniwob:click-button,click-link,click-dialog,click-tab,focus-text,click-checkboxes,click-collapsible-2,login-user
MODEL=tiny:layers=4,hidden=192
case "$SIZE" in
  smoke)   EPISODES=3;   BC_STEPS=4;   RL_STEPS=2;  B=2; G=2; EVAL=2;  NEW=48 ;;
  default) EPISODES=80;  BC_STEPS=300; RL_STEPS=48;  B=4; G=4; EVAL=20; NEW=64 ;;
  long)    EPISODES=200; BC_STEPS=600; RL_STEPS=150; B=4; G=4; EVAL=50; NEW=64 ;;
  *) echo "DEMO_SIZE must be smoke, default or long" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
start=$(date +%s)
stage() { echo; echo "==== [$(( $(date +%s) - start ))s] $* ===="; }

stage "1/4 expert demonstrations: $EPISODES episodes per task (experts.py)"
$PY experts.py --tasks "$TASKS" --episodes "$EPISODES" --out "$OUT/demos.jsonl"

stage "2/4 behavior cloning of $MODEL: $BC_STEPS steps (train_bc.py, Eq. 1)"
$PY train_bc.py --model "$MODEL" --data "$OUT/demos.jsonl" --out "$OUT/bc" --max-steps "$BC_STEPS" \
  --batch-size 16 --micro-batch 16 --lr 2e-3 --warmup-frac 0.05 --prompt short --torch-threads 0   # no browser runs during BC: every core

stage "3/4 M-GRPO from the BC checkpoint: $RL_STEPS steps of $B tasks x G=$G (train_mgrpo.py, Eq. 2)"
$PY train_mgrpo.py --model "$OUT/bc/hf" --tasks "$TASKS" --out "$OUT/rl" --steps "$RL_STEPS" \
  --tasks-per-step "$B" --group-size "$G" --lr 1e-4 --beta 0.001 --max-turns 6 --max-new-tokens "$NEW" \
  --prompt short --save-every 0

MODELS="untrained=$MODEL,bc=$OUT/bc/hf,rl=$OUT/rl/hf"
if [ "${DEMO_ZERO:-0}" = 1 ]; then
  stage "3b R1-Zero: M-GRPO from the untrained model, same budget"
  $PY train_mgrpo.py --model "$MODEL" --tasks "$TASKS" --out "$OUT/r1zero" --steps "$RL_STEPS" \
    --tasks-per-step "$B" --group-size "$G" --lr 1e-4 --beta 0.001 --max-turns 6 --max-new-tokens "$NEW" \
    --prompt short --save-every 0
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
