#!/usr/bin/env bash
# `make demo`: the whole WebAgent-R1 pipeline on the embedded default (MiniWoB++ in headless Chromium, a tiny
# model on the CPU): a demonstrator's log -> behavior cloning of the pretrained tiny base -> M-GRPO from the
# BC checkpoint -> evaluation of the base, BC and BC + M-GRPO on held-out pages at the paper's decoding (T = 1,
# EVAL_SAMPLES samples per page, common random numbers) with greedy and pass@K beside it, then one table with
# paired differences. (R1-Zero and BC on the log filtered to successes are stages of `make demo-findings`,
# r1zero and filtered: a fourth training run does not fit the demo's 40 minutes.)
#
#   DEMO_DATA=log|clean            (default: log) what BC learns from. log: a demonstrator's unfiltered log, 20
#                                  episodes per task of which about half carry a failing mistake (demos.py
#                                  --mistakes 0.5), cloned as logged, as the paper's BC data are not solutions
#                                  of the tasks RL trains on: what RL is for. clean: the scripted experts'
#                                  successes, where BC is hard to beat (docs/results.md: the exchange rate)
#   DEMO_SIZE=smoke|default|long   (default: default, 38 minutes on a 2-core CPU box from a fresh clone,
#                                  measured at 78a6eb4; smoke: a few minutes, on 2 of the tasks; long: twice
#                                  the RL budget and 100 held-out pages per task)
#   DEMO_TASKS=saturated           the first demo's 8 tasks, where BC saturates, with that demo's settings
#                                  (clean data, BC 150 steps, M-GRPO 48 steps of B 4 x G 4 at lr 1e-4):
#                                  docs/history.md
#   DEMO_OUT=runs/demo             where everything goes
#   DEMO_MODEL=$BASE               the model BC starts from: assets/tiny-web-base (pretrained on synthetic
#                                  pages, docs/training.md), or tiny:layers=4,hidden=192 (untrained)
#   DEMO_EPISODES, DEMO_BC_STEPS, DEMO_BC_LR, DEMO_EVAL, DEMO_SAMPLES, DEMO_RL_STEPS, DEMO_B, DEMO_G,
#   DEMO_RL_FLAGS                  override the budgets and settings (DEMO_SAMPLES: samples per held-out page)
#
# Settings for this CPU miniature, each fixed on validation pages (seeds 500000..), never on the test seeds
# (docs/history.md, "Choosing the demo's tasks", "Issue 32" and "Issue 68"): 20 demonstrations per task, as in
# the paper's regime (WebArena-Lite's BC set is small, interaction is plentiful); BC 300 steps at lr 1e-3
# (converged: 600 steps scored -2.1 +- 3.5 against it); M-GRPO 32 steps of B 8 x G 8 at lr 1e-4 (RL_DEMO_* in
# demo_common.sh: the budget rule of experiments/demo_budget.sh, at commit e8dff0f), on the log with
# RL_LOG_FLAGS (experiments/demo_recipe.sh's rule), T = 1, task rotation, the paper's Eq. 2 weights (the rl
# function of demo_common.sh); 50 held-out pages per task, each EVAL_SAMPLES (2) times at T = 1 and once greedy
# (experiments/eval_precision.sh: what K buys).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # TASKS, SATURATED_TASKS, MODEL, BASE, RL_DEMO_*, stage, bc, rl
TASKS=${DEMO_TASKS:-$TASKS}
BC_DEFAULT=$BC_DEMO_STEPS; RL_DEFAULT=$RL_DEMO_STEPS; B=$RL_DEMO_B; G=$RL_DEMO_G; RL_FLAGS=${DEMO_RL_FLAGS-$RL_DEMO_FLAGS}
[ -n "${DEMO_TASKS:-}" ] && IN_PLACE=""   # pages restarted in place only on the demo's own tasks (demo_common.sh)
DATA=log
if [ "$TASKS" = saturated ]; then   # set but empty DEMO_RL_FLAGS: the rl function's own settings (lr 1e-4)
  TASKS=$SATURATED_TASKS; BC_DEFAULT=150; RL_DEFAULT=48; B=4; G=4; RL_FLAGS=${DEMO_RL_FLAGS-}; DATA=clean
fi
DATA=${DEMO_DATA:-$DATA}
case "$DATA" in   # the demonstrator's flags, BC's and the M-GRPO recipe's additions (demo_common.sh)
  log)   DEMOS_FLAGS=$DEMO_LOG_FLAGS; BC_FLAGS=--no-only-successes   # DEMO_RL_FLAGS, when set, is every RL flag
         [ -n "${DEMO_RL_FLAGS+x}" ] || RL_FLAGS="$RL_FLAGS $RL_LOG_FLAGS" ;;
  clean) DEMOS_FLAGS=""; BC_FLAGS="" ;;
  *) echo "DEMO_DATA must be log or clean" >&2; exit 2 ;;
esac
OUT=${DEMO_OUT:-runs/demo}
SIZE=${DEMO_SIZE:-default}
SAMPLES=$EVAL_SAMPLES                     # samples per held-out page at T = 1 (demo_common.sh)
INIT=${DEMO_MODEL:-$BASE}
case "$SIZE" in
  smoke)   EPISODES=3;  BC_STEPS=2;   RL_STEPS=1;   B=2; G=2; EVAL=1;   NEW=48; BC_BATCH=4; TURNS=2; SAMPLES=2
           if [ -z "${DEMO_TASKS:-}" ]; then TASKS=$(echo "$TASKS" | cut -d, -f1,8); fi ;;   # 2 tasks, one multi-step
  default) EPISODES=20; BC_STEPS=$BC_DEFAULT; RL_STEPS=$RL_DEFAULT;       EVAL=50;  NEW=64 ;;
  long)    EPISODES=20; BC_STEPS=$BC_DEFAULT; RL_STEPS=$((2 * RL_DEFAULT)); EVAL=100; NEW=64 ;;
  *) echo "DEMO_SIZE must be smoke, default or long" >&2; exit 2 ;;
esac
EPISODES=${DEMO_EPISODES:-$EPISODES}; BC_STEPS=${DEMO_BC_STEPS:-$BC_STEPS}; EVAL=${DEMO_EVAL:-$EVAL}
SAMPLES=${DEMO_SAMPLES:-$SAMPLES}
RL_STEPS=${DEMO_RL_STEPS:-$RL_STEPS}; B=${DEMO_B:-$B}; G=${DEMO_G:-$G}
[ "$SIZE" = smoke ] && RL_FLAGS="$RL_FLAGS --eval-pages 1"      # its in-run check on one page per task
BC_LR=${DEMO_BC_LR:-$BC_DEMO_LR}
mkdir -p "$OUT"

stage "1/4 demonstrations ($DATA): $EPISODES episodes per task (demos.py $DEMOS_FLAGS)"
# shellcheck disable=SC2086  # the flags: no word, or words
$PY demos.py --tasks "$TASKS" --episodes "$EPISODES" --out "$OUT/demos.jsonl" $DEMOS_FLAGS

stage "2/4 behavior cloning of $INIT: $BC_STEPS steps at lr $BC_LR (train_bc.py, Eq. 1) $BC_FLAGS"
# shellcheck disable=SC2086  # the flag: no word, or one
bc "$OUT/demos.jsonl" "$OUT/bc" "$BC_STEPS" short "$INIT" "$BC_LR" $BC_FLAGS

stage "3/4 M-GRPO from the BC checkpoint: $RL_STEPS steps of $B tasks x G=$G $RL_FLAGS (train_mgrpo.py, Eq. 2)"
# shellcheck disable=SC2086  # RL_FLAGS splits into words
rl "$OUT/bc/hf" "$OUT/rl" "$RL_STEPS" "$NEW" $RL_FLAGS $IN_PLACE

stage "4/4 evaluation on held-out pages: $EVAL per task, T = 1 x $SAMPLES samples each, and greedy (eval.py)"
# shellcheck disable=SC2086  # IN_PLACE: no word, or one
$PY eval.py --model "base=$INIT,bc=$OUT/bc/hf,rl=$OUT/rl/hf" --tasks "$TASKS" --episodes "$EVAL" --samples "$SAMPLES" \
  --greedy --prompt short --max-new-tokens "$NEW" --max-steps "$TURNS" --concurrency 8 --out "$OUT/eval" $IN_PLACE

stage "done in $(( $(date +%s) - start ))s"
cat "$OUT/eval/results.md"
echo
echo "plots: $OUT/bc/loss.png $OUT/rl/dynamics.png"
echo "trajectory viewer: $OUT/eval/viewer/index.html"
