#!/usr/bin/env bash
# Issue 86, item 5: what the engine/trainer mismatch does to M-GRPO here. make demo's recipe (its BC, tasks, budget,
# invalid-action penalty, seeds) with three rollout engines: float32 (make demo's own: the trainer's module decoding
# through its batch-invariant float64 copy, --rollout-correction none; make demo's RL is its seed 0 where make demo's
# BC is the reference, below), a bf16 copy of the policy without a correction (--engine-dtype bfloat16
# --rollout-correction none) and with TIS (--engine-dtype bfloat16 --rollout-correction tis, cap 2). Seeds SEEDS
# (the plan: 0 1 2).
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
# The plan's amendment (2026-12-02, 13:40, before any run from it; docs/history.md): BC's weights depend on the
# kind of machine, so every arm starts from one committed BC, MISMATCH_BC (issue 87's reference BC, sha256
# c089fa1c...), on any machine. Where make demo's BC is that BC (DEMO_OUT, on a machine of its kind), make demo's
# RL is the float32 arm's seed 0 and its evaluation gives the base and BC rows; elsewhere the BC is evaluated and
# the float32 arm's seed 0 run like the others (make demo is not run).
#
# A run's episodes are merged into EVIDENCE by run name, replacing that run's, and its metrics copied beside them: a
# later sitting passes only the seeds not kept yet (seeds 0-2 of every arm are, from 2026-12-02: the plan is done).
#
#   MISMATCH_OUT=runs/mismatch SEEDS="1 2" bash experiments/engine_mismatch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, RL_DEMO_*, RL_LOG_FLAGS, IN_PLACE, stage, rl, paper_*
DEMO=${DEMO_OUT:-runs/demo}; OUT=${MISMATCH_OUT:-runs/mismatch}; SEEDS=${SEEDS:-0 1 2}
BC=${MISMATCH_BC:-experiments/evidence/reference_bc}
# every arm's episodes (the first pair's, from the other BC, are issue86_engine_mismatch_outcomes.jsonl.gz)
EVIDENCE=${MISMATCH_EVIDENCE:-experiments/evidence/issue86_arms_outcomes.jsonl.gz}
METRICS=$(dirname "$EVIDENCE")           # and each run's metrics.jsonl, as issue86_refbc_<arm>-s<seed>_metrics.jsonl
B=$RL_DEMO_B; G=$RL_DEMO_G; NEW=64; TEST=50
declare -A ARM=([f32]="--rollout-correction none" [bf16-none]="--engine-dtype bfloat16 --rollout-correction none"
                [bf16-tis]="--engine-dtype bfloat16 --rollout-correction tis")
if [ -s "$DEMO/eval/results.json" ] && cmp -s "$DEMO/bc/hf/model.safetensors" "$BC/model.safetensors"; then
  reuse="$DEMO/eval"; demo_rl="$DEMO/rl"        # make demo's base, BC and RL (the float32 arm's seed 0)
else
  paper_eval "$OUT/test/bc" "bc=$BC" "$TEST"; reuse="$OUT/test/bc"; demo_rl=""
fi
runs=""
for seed in $SEEDS; do
  for arm in f32 bf16-none bf16-tis; do
    run=$arm-s$seed
    if [ "$run" = f32-s0 ] && [ -n "$demo_rl" ]; then   # make demo's RL: evaluated already
      runs="$runs $demo_rl"; cp "$demo_rl/metrics.jsonl" "$METRICS/issue86_refbc_${run}_metrics.jsonl"; continue
    fi
    [ -s "$OUT/$run/hf/config.json" ] || { stage "M-GRPO from the reference BC: $run (${ARM[$arm]})"
      # shellcheck disable=SC2086  # the arm's flags split into words
      seeded_rl "$BC" "$OUT/$run" "$RL_DEMO_STEPS" "$NEW" "$seed" ${ARM[$arm]}; }   # (until 9523ea1: --save-every 8)
    cp "$OUT/$run/metrics.jsonl" "$METRICS/issue86_refbc_${run}_metrics.jsonl"   # kept beside its episodes
    paper_eval "$OUT/test/$run" "$run=$OUT/$run/hf" "$TEST"
    reuse="$reuse,$OUT/test/$run"; runs="$runs $OUT/$run"
    # shellcheck disable=SC2086  # the directories split into words
    $PY experiments/ledger.py --keep "$EVIDENCE" ${reuse//,/ }     # every episode so far, kept as it finishes
  done
done
stage "one table: the BC and every arm evaluated (held-out pages, paired; make demo's base and RL where it is seed 0)"
paper_table "$reuse" "$OUT/table" "$TEST"
# shellcheck disable=SC2086  # the run directories split into words
$PY experiments/engine_mismatch.py $runs
