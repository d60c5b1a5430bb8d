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
#            ~40 + 2 x 20 minutes (with a make demo's output already in $OUT/ref: 2 x 20)
#   r1zero   R1-Zero: M-GRPO from the base (no BC), the same budget and flags, seeds 0-2. ~3 x 20 minutes
#   cot      R1-CoT: the same log with long thoughts (demos.py --thoughts long), BC of the base by make demo's
#            recipe, M-GRPO seeds 0-2, all at up to 192 new tokens a turn, and make demo's BC evaluated again at
#            192 (the pairs). After ref. ~2 hours
#   plain    the thinking format's ablation: the same log in the plain format (--prompt short_plain, the bare
#            action), BC, M-GRPO seeds 0-2, evaluated with that prompt. ~70 minutes
#   tts      test-time interactions: base, BC and BC + M-GRPO seeds 0-2 evaluated at budgets 2,4,6,8,12 (each
#            budget read from the budget-12 episodes), and BC in a run of its own at 2, 4 and 8 (6: make demo's),
#            each of whose episodes must be the first interactions of its budget-12 one. After ref. ~70 minutes
#   login    the log-in argument: make demo-suite's command from the base (SUITE_MODEL), --seed 0-4. ~5 x 22 min
#   table    the findings from every stage's evaluations so far (experiments/findings_base.py): per row its seeds
#            and their mean with a 95% interval, the paper's number beside it
# A step whose output exists is not run again (a stopped stage resumes at its first missing step).
#   bash experiments/findings_base.sh ref | r1zero | cot | plain | tts | login | table
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, BASE, RL_DEMO_*, RL_LOG_FLAGS, IN_PLACE, stage, rl, paper_*
OUT=${FINDINGS_OUT:-runs/findings-base}
MAIN_EVAL=${MAIN_EVAL:-runs/demo/eval}   # an earlier make demo's evaluation, which $OUT/ref's must equal
B=$RL_DEMO_B; G=$RL_DEMO_G; NEW=64; TEST=50
mkdir -p "$OUT/test"

# seed_run INIT NAME SEED [FLAGS...]: make demo's M-GRPO from INIT with --seed SEED (and FLAGS) into
# $OUT/NAME-sSEED, evaluated on the held-out pages into $OUT/test/NAME-sSEED
seed_run() {
  [ -s "$OUT/$2-s$3/hf/config.json" ] || { stage "M-GRPO $2 from $1, seed $3 ${*:4}"
    # shellcheck disable=SC2086  # the flags split into words
    rl "$1" "$OUT/$2-s$3" "$RL_DEMO_STEPS" "$NEW" $RL_DEMO_FLAGS $RL_LOG_FLAGS $IN_PLACE --seed "$3" "${@:4}"; }
  paper_eval "$OUT/test/$2-s$3" "$2-s$3=$OUT/$2-s$3/hf" "$TEST"
}

# variant_bc DIR PROMPT [DEMOS_FLAGS...]: make demo's log (the same pages and mistakes) written with more demos.py
# flags into DIR/demos.jsonl, and BC of the base on it by make demo's recipe (every logged episode) into DIR/bc
variant_bc() {
  local dir=$1 prompt=$2
  [ -s "$dir/bc/hf/config.json" ] && return
  stage "make demo's log ($DEMO_LOG_FLAGS ${*:3}) and BC of the base on it, into $dir"
  mkdir -p "$dir"
  # shellcheck disable=SC2086  # the flags split into words
  $PY demos.py --tasks "$TASKS" --episodes 20 --out "$dir/demos.jsonl" $DEMO_LOG_FLAGS "${@:3}"
  bc "$dir/demos.jsonl" "$dir/bc" 300 "$prompt" "$BASE" 1e-3 --no-only-successes
}

# the BC + M-GRPO model of reference seed S
ref_rl() { if [ "$1" = 0 ]; then echo "$OUT/ref/rl/hf"; else echo "$OUT/rl-s$1/hf"; fi; }

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

cot_stage() {
  local NEW=192 s   # a long thought is ~100 tokens of the tiny tokenizer before its action
  variant_bc "$OUT/cot" short --thoughts long
  paper_eval "$OUT/test192/bc" "bc=$OUT/ref/bc/hf" "$TEST"
  paper_eval "$OUT/test192/cot-bc" "cot-bc=$OUT/cot/bc/hf" "$TEST"
  for s in 0 1 2; do
    seed_run "$OUT/cot/bc/hf" cot-rl "$s"
  done
}

plain_stage() {
  local PAPER_PROMPT=short_plain s
  variant_bc "$OUT/plain" short_plain --prompt short_plain
  paper_eval "$OUT/test/plain-bc" "plain-bc=$OUT/plain/bc/hf" "$TEST"
  for s in 0 1 2; do
    seed_run "$OUT/plain/bc/hf" plain-rl "$s" --prompt short_plain
  done
}

tts_stage() {
  local PAPER_STEPS=2,4,6,8,12 s k
  paper_eval "$OUT/tts/base" "base=$BASE" "$TEST"
  paper_eval "$OUT/tts/bc" "bc=$OUT/ref/bc/hf" "$TEST"
  for s in 0 1 2; do
    paper_eval "$OUT/tts/rl-s$s" "rl-s$s=$(ref_rl "$s")" "$TEST"
  done
  for k in 2 4 8; do
    PAPER_STEPS=$k paper_eval "$OUT/tts/bc-at-$k" "bc=$OUT/ref/bc/hf" "$TEST"
  done
}

login_stage() {
  local s
  for s in 0 1 2 3 4; do
    [ -s "$OUT/login/s$s/eval/results.json" ] || { stage "make demo-suite from the base, seed $s"
      SUITE_OUT="$OUT/login/s$s" SUITE_MODEL="$BASE" SUITE_RL_FLAGS="--seed $s" bash scripts/demo_suite.sh; }
  done
}

table_stage() {
  stage "the findings so far (experiments/findings_base.py)"
  $PY experiments/findings_base.py --out "$OUT"
}

case "${1:-}" in
  ref) ref_stage ;;
  r1zero) r1zero_stage ;;
  cot) cot_stage ;;
  plain) plain_stage ;;
  tts) tts_stage ;;
  login) login_stage ;;
  table) table_stage ;;
  *) echo "usage: findings_base.sh ref | r1zero | cot | plain | tts | login | table" >&2; exit 2 ;;
esac
stage "done in $(( $(date +%s) - start ))s"
