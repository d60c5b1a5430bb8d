#!/usr/bin/env bash
# Issue 86, item 5: what the engine/trainer mismatch does to M-GRPO here. make demo's recipe (its BC, tasks, budget,
# invalid-action penalty, seeds) with three rollout engines: float32 (make demo's own: the trainer's module decoding
# through its batch-invariant float64 copy, --rollout-correction none: make demo's RL is this arm's seed 0), a bf16
# copy of the policy without a correction (--engine-dtype bfloat16 --rollout-correction none) and with TIS
# (--engine-dtype bfloat16 --rollout-correction tis, cap 2). Seeds SEEDS (the plan: 0 1 2; the float32 arm's seed 0
# is $DEMO/rl).
#
# The plan (2026-12-02 04:15, committed before any of its runs): nothing is chosen here, so there are no validation
# runs; every arm is reported on the held-out pages (env.EVAL_SEEDS, 50 per task, 400 pages) at the paper's decoding
# (T = 1, 2 samples per page, common random numbers) with greedy beside it, paired by page with make demo's BC and
# RL (one table, eval.py --reuse), and with the run's mismatch (mismatch/kl_k3, max |log ratio|, share of tokens
# outside [0.5, 2]) and its KL to BC (train/kl) over the steps (experiments/engine_mismatch.py).
# The rule: per seed, arm - float32 at T = 1 (paired SE by page) "differs" at >= 2 SE; over the three seeds, the
# mean's 95% t-interval. bf16 without correction hurts RL here when the mean of (bf16-none - float32) lies below 0
# with its interval; TIS repairs it when (bf16-tis - bf16-none) lies above 0 with its interval. When bf16-none -
# float32 is within 2 SE in every seed and its interval holds 0, the miniature's bf16 mismatch is too small to move
# RL: said so, and the larger-mismatch pair (an engine with fewer mantissa bits or noise on its logits, its factor
# chosen on validation pages) is the next step. Whatever the result, the table and the rule's verdict go to
# docs/results.md.
#
#   DEMO_OUT=runs/demo MISMATCH_OUT=runs/mismatch SEEDS="0 1 2" bash experiments/engine_mismatch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, RL_DEMO_*, RL_LOG_FLAGS, IN_PLACE, stage, rl, paper_*
DEMO=${DEMO_OUT:-runs/demo}; OUT=${MISMATCH_OUT:-runs/mismatch}; SEEDS=${SEEDS:-0 1 2}
B=$RL_DEMO_B; G=$RL_DEMO_G; NEW=64; TEST=50
[ -s "$DEMO/eval/results.json" ] || { stage "make demo (its BC, RL seed 0 and evaluation: the float32 arm)"
  DEMO_OUT=$DEMO bash scripts/demo.sh; }
declare -A ARM=([f32]="--rollout-correction none" [bf16-none]="--engine-dtype bfloat16 --rollout-correction none"
                [bf16-tis]="--engine-dtype bfloat16 --rollout-correction tis")
reuse="$DEMO/eval"; runs=""
for seed in $SEEDS; do
  for arm in f32 bf16-none bf16-tis; do
    if [ "$arm$seed" = f320 ]; then runs="$runs $DEMO/rl"; continue; fi        # make demo's RL is f32 seed 0
    run=$arm-s$seed
    [ -s "$OUT/$run/hf/config.json" ] || { stage "M-GRPO from make demo's BC: $run (${ARM[$arm]})"
      # shellcheck disable=SC2086  # the arm's flags split into words
      seeded_rl "$DEMO/bc/hf" "$OUT/$run" "$RL_DEMO_STEPS" "$NEW" "$seed" ${ARM[$arm]}; }   # (until 9523ea1: --save-every 8)
    paper_eval "$OUT/test/$run" "$run=$OUT/$run/hf" "$TEST"
    reuse="$reuse,$OUT/test/$run"; runs="$runs $OUT/$run"
  done
done
stage "one table: make demo's base, BC and RL (float32, seed 0) and every arm evaluated (held-out pages, paired)"
paper_table "$reuse" "$OUT/table" "$TEST"
# shellcheck disable=SC2086  # the run directories split into words
$PY experiments/engine_mismatch.py $runs
