#!/usr/bin/env bash
# How precise is the evaluation: the paired SE of RL - BC at the paper's decoding (T = 1) against the number of
# samples per page K and with or without common random numbers (issue 56), on validation pages (seeds 500000..,
# never env.EVAL_SEEDS), from one make demo run's BC and BC + M-GRPO checkpoints.
#
# Fixed before the runs: 25 validation pages per task of make demo's 8 tasks (200 pages), K = 4 samples per page at
# T = 1, top-p 1, at most 6 interactions of 64 tokens, --concurrency 8; the greedy column beside it.
#   common:      bc and rl in one evaluation, common noise (both draw with --seed 0's noise on each page and sample)
#   independent: rl again under another name with independent noise (its own noise, unrelated to bc's)
# experiments/eval_precision.py then reads the paired SE of rl - bc for the first k = 1..4 samples of each page,
# common against independent, scaled to make demo's 400 held-out pages (x sqrt(200 / 400)). The rule for make
# demo's K: the smallest K whose common-noise SE at 400 pages is <= 1.5 points.
#
#   DEMO=runs/demo OUT=runs/eval_precision bash experiments/eval_precision.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh
DEMO=${DEMO:-runs/demo}
OUT=${OUT:-runs/eval_precision}
PAGES=${PAGES:-25}
K=${K:-4}
valid() {   # NAME MODELS FLAGS...: one evaluation on the validation pages into $OUT/NAME, unless done
  [ -s "$OUT/$1/results.json" ] || { stage "validation pages, T = 1 x $K: $1 ($2)"
    $PY eval.py --model "$2" --tasks "$TASKS" --episodes "$PAGES" --seed-start 500000 --samples "$K" --prompt short \
      --max-new-tokens 64 --max-steps "$TURNS" --concurrency 8 --no-screenshots --out "$OUT/$1" "${@:3}"; }
}
valid common "bc=$DEMO/bc/hf,rl=$DEMO/rl/hf" --greedy --noise common
valid independent "rl-indep=$DEMO/rl/hf" --noise independent
$PY experiments/eval_precision.py "$OUT" | tee "$OUT/precision.md"
