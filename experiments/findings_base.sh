#!/usr/bin/env bash
# Issue 70: the paper's other findings from the pretrained base, in seeds, on make demo's tasks, data and RL
# recipe. The plan, committed before any run (docs/history.md, "Issue 70: the paper's other findings from the
# base, in seeds"), in short: every row as `make demo` runs (its 8 tasks; its log, demos.py --mistakes 0.5;
# BC of assets/tiny-web-base; M-GRPO of 2,048 trajectories with RL_DEMO_FLAGS, RL_LOG_FLAGS and in-place
# restarts), each RL row in --seed 0, 1, 2, every model evaluated on the held-out pages (env.EVAL_SEEDS, 50 per
# task) at the paper's decoding (T = 1, 2 samples per page, common random numbers) with greedy beside it; no
# setting is chosen here, so no validation pages; a seed's difference is paired by page, a mean over seeds gets
# its 95% t-interval from the seeds' spread (experiments/recipe_seeds.py reads the tables).
#
#   ref      make demo's own command into $OUT/ref (seed 0: its tables must equal those of an earlier make demo
#            at MAIN_EVAL to the digit, the check of a run made twice), then M-GRPO seeds 1 and 2 from its BC.
#            ~40 + 2 x 20 minutes
#   r1zero   R1-Zero: M-GRPO from the base (no BC), the same budget and flags, seeds 0-2. ~3 x 20 minutes
#   table    one paired table of every held-out evaluation so far: base, BC, then each row's seeds
# A step whose output exists is not run again (a stopped stage resumes at its first missing step).
#   bash experiments/findings_base.sh ref | r1zero | table
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, BASE, RL_DEMO_*, RL_LOG_FLAGS, IN_PLACE, stage, rl, paper_*
OUT=${FINDINGS_OUT:-runs/findings-base}
MAIN_EVAL=${MAIN_EVAL:-runs/demo/eval}   # an earlier make demo's evaluation, which $OUT/ref's must equal
B=$RL_DEMO_B; G=$RL_DEMO_G; NEW=64; TEST=50
mkdir -p "$OUT/test"

# seed_run INIT NAME SEED: make demo's M-GRPO from INIT with --seed SEED into $OUT/NAME-sSEED, evaluated
seed_run() {
  [ -s "$OUT/$2-s$3/hf/config.json" ] || { stage "M-GRPO $2 from $1, seed $3"
    # shellcheck disable=SC2086  # the flags split into words
    rl "$1" "$OUT/$2-s$3" "$RL_DEMO_STEPS" "$NEW" $RL_DEMO_FLAGS $RL_LOG_FLAGS $IN_PLACE --seed "$3"; }
  paper_eval "$OUT/test/$2-s$3" "$2-s$3=$OUT/$2-s$3/hf" "$TEST"
}

ref_stage() {
  [ -s "$OUT/ref/eval/results.json" ] || { stage "make demo's command into $OUT/ref (seed 0)"
    DEMO_OUT="$OUT/ref" bash scripts/demo.sh; }
  if [ -s "$MAIN_EVAL/results.md" ]; then   # the check of a run made twice, where make demo ran before
    if cmp -s <(sed -n '/^## Task success/,/^## Prompting/p' "$MAIN_EVAL/results.md") \
              <(sed -n '/^## Task success/,/^## Prompting/p' "$OUT/ref/eval/results.md"); then
      echo "make demo's tables reproduced to the digit ($MAIN_EVAL, $OUT/ref/eval)"
    else
      echo "make demo's tables differ between $MAIN_EVAL and $OUT/ref/eval" >&2
    fi
  fi
  local s
  for s in 1 2; do seed_run "$OUT/ref/bc/hf" rl "$s"; done
}

r1zero_stage() {
  local s
  for s in 0 1 2; do seed_run "$BASE" r1zero "$s"; done
}

# every held-out evaluation so far in one table: make demo's base, BC and RL (seed 0) first, then the seeds
table_stage() {
  local name s reuse="$OUT/ref/eval"
  for name in rl r1zero; do
    for s in 0 1 2; do
      [ -s "$OUT/test/$name-s$s/results.json" ] && reuse="$reuse,$OUT/test/$name-s$s"
    done
  done
  stage "one table of the held-out runs"
  paper_table "$reuse" "$OUT/test/table" "$TEST"
  sed -n '/^## Every decoding/,/^## Prompting/p' "$OUT/test/table/results.md" | sed '$d'
}

case "${1:-}" in
  ref) ref_stage ;;
  r1zero) r1zero_stage ;;
  table) table_stage ;;
  *) echo "usage: findings_base.sh ref | r1zero | table" >&2; exit 2 ;;
esac
stage "done in $(( $(date +%s) - start ))s"
