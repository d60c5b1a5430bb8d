#!/usr/bin/env bash
# `make demo-findings`: the paper's other findings in make demo's miniature, from its pretrained base, on its 8
# tasks, its log and its RL recipe, every RL row in seeds 0-2, every model evaluated on make demo's held-out pages
# (50 per task) at the paper's decoding (T = 1, 2 samples per page, common random numbers) with greedy beside it.
# The plan, committed before any run: docs/history.md, "Issue 70: the paper's other findings from the base, in
# seeds". Minutes measured on this 2-core box (docs/results.md):
#
#   ref      make demo's run (DEMO_OUT, default runs/demo; made first where it is missing, 38 min) is seed 0 of
#            the reference rows; M-GRPO seeds 1 and 2 from its BC, each evaluated. ~2 x 20 min
#   r1zero   R1-Zero: make demo's M-GRPO from the base (no BC), seeds 0-2. ~3 x 20 min
#   cot      R1-CoT: make demo's log written with long thoughts (demos.py --thoughts long), BC of the base on it by
#            make demo's recipe, M-GRPO seeds 0-2, all at up to FINDINGS_COT_TOKENS (320) new tokens a turn,
#            into $FINDINGS_OUT/cot320; make demo's BC evaluated again at that budget (the pairs). ~5 hours
#            (2026-11-30, alone, at 320: the long log and its BC ~10 min, an M-GRPO seed 64-67 min, ~2 min a step;
#            evaluations BC 4 min, CoT BC 26, each CoT RL seed 16-19; at 192 about the same)
#   plain    the thinking format: the same log in the plain format (--prompt short_plain: the same thought line
#            and action, no tags), BC, M-GRPO seeds 0-2, evaluated with that prompt. ~70 min (2026-11-30: 67)
#   tts      test-time interactions: base, BC and the ref seeds evaluated at budgets 2,4,6,8,12 (each read from
#            the budget-12 episodes), and BC in runs of its own at 2, 4 and 8 (make demo's is at 6), whose episodes
#            must be the first interactions of its budget-12 ones (the table counts them). ~70 min
#   login    the log-in argument: make demo-suite's command from the base (SUITE_MODEL), seeds 0-4, each seed's
#            M-GRPO from the first seed's BC (SUITE_BC), that BC sampled on logged-out validation pages (T = 0.5
#            and 1, 4 x 30 episodes each) before the other seeds; FINDINGS_LOGIN_OUT_DEMOS=K adds K logged-out
#            demonstrations (the data condition, into $FINDINGS_OUT/login-outK). ~16 + 2 x 5 + 4 x 11 min (K = 1
#            alone: 70 min on 2026-11-30's Intel box, ~100 on 2026-12-03's AMD EPYC)
#   filtered the practitioner's fix make demo's M-GRPO is measured against: BC of the base with make demo's recipe
#            on its log filtered to the successes, joined to make demo's table (RL - filtered BC paired). ~17 min
# Then the table of every stage run so far, scripts/findings_table.py -> $FINDINGS_OUT/findings.md (each row with
# its seeds, their mean and 95% interval, and the plan's rule). A step whose output exists is not run again: a
# stopped stage resumes at its first missing step, a stopped M-GRPO run at its last checkpoint (every 4 steps).
#
#   FINDINGS="ref r1zero cot plain tts login filtered"   the stages (default: all, about 11-12 hours)
#   FINDINGS_OUT=runs/findings   where they go;   DEMO_OUT=runs/demo   make demo's run
#   FINDINGS_COT_TOKENS=320      R1-CoT's new tokens a turn (the plan's 192 cut most of its demonstrations)
#   FINDINGS_SIZE=smoke          every stage in seconds-long budgets on 2 tasks, one seed (make test runs ref,
#                                plain, tts and filtered so)
#   FINDINGS_OUTCOMES=FILE       the model rows' episodes kept in FILE (.jsonl.gz, small enough to commit): read
#                                beside the stages' directories and written back with them, so that a stage run
#                                on another machine is paired with the reference rows run here; with it, plain,
#                                r1zero and login need no make demo run, cot only its log and BC (made where
#                                missing, 6 min), and ref, tts and filtered its whole run
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, BASE, RL_DEMO_*, RL_LOG_FLAGS, IN_PLACE, stage, bc, rl, paper_*
DEMO=${DEMO_OUT:-runs/demo}
OUT=${FINDINGS_OUT:-runs/findings}
STAGES=${FINDINGS:-ref r1zero cot plain tts login filtered}
SIZE=${FINDINGS_SIZE:-default}
OUTCOMES=${FINDINGS_OUTCOMES:-}

# make demo's budgets (scripts/demo.sh), its size's
SEEDS="0 1 2"; LOGIN_SEEDS="0 1 2 3 4"; EPISODES=20; BC_STEPS=$BC_DEMO_STEPS; RL_STEPS=$RL_DEMO_STEPS; B=$RL_DEMO_B; G=$RL_DEMO_G
NEW=64; TEST=50
# R1-CoT's new tokens a turn: above the longest long-thought response of make demo's log (294 tokens of the tiny
# tokenizer, 206 at the median); the plan's 192 cut 236 of its 378 (docs/history.md, "R1-CoT: what holds")
COT_NEW=${FINDINGS_COT_TOKENS:-320}
TTS_STEPS=2,4,6,8,12; TTS_ALONE="2 4 8"; RL_FLAGS="$RL_DEMO_FLAGS $RL_LOG_FLAGS $IN_PLACE"
LOGIN_OUT_DEMOS=${FINDINGS_LOGIN_OUT_DEMOS:-0}; LOGIN_EXPLORE=30; LOGIN_NEW=80; LOGIN_TURNS=10   # demo_suite.sh's
case "$SIZE" in
  smoke)   # make demo's smoke (its 2 tasks, budgets and 2 interactions), one seed: the same code, in seconds
    TASKS=$(echo "$TASKS" | cut -d, -f1,8); SEEDS=0; LOGIN_SEEDS=0; EPISODES=3; BC_STEPS=2; BC_BATCH=4; RL_STEPS=1
    B=2; G=2; NEW=48; TEST=1; COT_NEW=48; TURNS=2; PAPER_STEPS=2; TTS_STEPS=1,2; TTS_ALONE=1
    LOGIN_EXPLORE=1; LOGIN_NEW=48; LOGIN_TURNS=3
    RL_FLAGS="$RL_DEMO_FLAGS --eval-every 0 $RL_LOG_FLAGS $IN_PLACE" ;;   # (make demo's smoke checks in-run checks)
  default) ;;
  *) echo "FINDINGS_SIZE must be smoke or default" >&2; exit 2 ;;
esac
mkdir -p "$OUT/test"

needs_demo=0      # make demo's checkpoints and files, or (without OUTCOMES) only its evaluation for the table
for s in $STAGES; do case "$s" in ref|tts|filtered) needs_demo=1 ;; esac; done
[ "$STAGES" = login ] || [ -s "$OUTCOMES" ] || needs_demo=1
if [ "$needs_demo" = 1 ] && [ ! -s "$DEMO/eval/results.json" ]; then
  stage "make demo first, into $DEMO (seed 0 of the reference rows)"
  DEMO_OUT="$DEMO" DEMO_SIZE=$SIZE bash scripts/demo.sh
fi

# seed_train INIT NAME SEED [FLAGS...]: make demo's M-GRPO from INIT with --seed SEED (and FLAGS) into $OUT/NAME-sSEED,
# checkpointed every 4 steps and resumed from its last checkpoint (a stage spans sittings; a resumed run equals the
# uninterrupted one); seed_run: the same, then evaluated on the held-out pages into $OUT/test/NAME-sSEED
seed_train() {
  [ -s "$OUT/$2-s$3/hf/config.json" ] || { stage "M-GRPO $2 from $1, seed $3 ${*:4}"
    # shellcheck disable=SC2086  # the flags split into words
    seeded_rl "$1" "$OUT/$2-s$3" "$RL_STEPS" "$NEW" "$3" "${@:4}"; }
}
seed_run() {
  seed_train "$@"
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
  $PY demos.py --tasks "$TASKS" --episodes "$EPISODES" --out "$dir/demos.jsonl" $DEMO_LOG_FLAGS "${@:3}"
  bc "$dir/demos.jsonl" "$dir/bc" "$BC_STEPS" "$prompt" "$BASE" "$BC_DEMO_LR" --no-only-successes
}

# the BC + M-GRPO model of reference seed S (seed 0: make demo's)
ref_rl() { if [ "$1" = 0 ]; then echo "$DEMO/rl/hf"; else echo "$OUT/rl-s$1/hf"; fi; }

ref_stage() {
  local s
  for s in $SEEDS; do [ "$s" = 0 ] || seed_run "$DEMO/bc/hf" rl "$s"; done
}

r1zero_stage() {
  local s
  for s in $SEEDS; do seed_run "$BASE" r1zero "$s"; done
}

# plain and tts evaluate their models together, one eval.py run a stage (the same episodes as one run a model:
# common random numbers, batch-invariant decoding), so that a stage starts its browser and loads pages once; cot
# evaluates one model a run, kept as it finishes (7-45 min a model: a stage that spans sittings loses at most the
# model being evaluated). Its long-thought log and BC ($OUT/cot) do not depend on the token budget; its runs at a
# budget of N new tokens go to $OUT/cotN: the M-GRPO seeds, and test/ the evaluations of make demo's BC, CoT BC and
# the seeds
cot_stage() {
  local log=$OUT/cot NEW=$COT_NEW OUT=$OUT/cot$COT_NEW s      # (words are expanded before local assigns them)
  variant_bc "$DEMO" short            # make demo's own log and BC (there already where make demo ran)
  variant_bc "$log" short --thoughts long
  paper_eval "$OUT/test/bc" "bc=$DEMO/bc/hf" "$TEST"
  paper_eval "$OUT/test/cot-bc" "cot-bc=$log/bc/hf" "$TEST"
  for s in $SEEDS; do seed_run "$log/bc/hf" cot-rl "$s"; done
}

plain_stage() {
  local PAPER_PROMPT=short_plain s models="plain-bc=$OUT/plain/bc/hf"
  variant_bc "$OUT/plain" short_plain --prompt short_plain
  for s in $SEEDS; do
    seed_train "$OUT/plain/bc/hf" plain-rl "$s" --prompt short_plain
    models="$models,plain-rl-s$s=$OUT/plain-rl-s$s/hf"
  done
  paper_eval "$OUT/test/plain" "$models" "$TEST"
}

tts_stage() {
  local s k models="base=$BASE,bc=$DEMO/bc/hf"
  for s in $SEEDS; do models="$models,rl-s$s=$(ref_rl "$s")"; done
  PAPER_STEPS=$TTS_STEPS paper_eval "$OUT/tts/sweep" "$models" "$TEST"
  for k in $TTS_ALONE; do PAPER_STEPS=$k paper_eval "$OUT/tts/bc-at-$k" "bc=$DEMO/bc/hf" "$TEST"; done
}

login_stage() {
  local s first="" bc="" dir=$OUT/login t
  [ "$LOGIN_OUT_DEMOS" = 0 ] || dir=$OUT/login-out$LOGIN_OUT_DEMOS
  for s in $LOGIN_SEEDS; do
    [ -s "$dir/s$s/eval/results.json" ] || { stage "make demo-suite from the base, seed $s${bc:+ (BC: $bc)}"
      SUITE_OUT="$dir/s$s" SUITE_MODEL="$BASE" SUITE_SIZE=$SIZE SUITE_OUT_DEMOS=$LOGIN_OUT_DEMOS \
        SUITE_RL_FLAGS="--seed $s" SUITE_BC="$bc" bash scripts/demo_suite.sh; }
    [ -n "$first" ] && continue
    # the seeds differ in M-GRPO only: BC (seeded by its command) is trained once, in the first seed's run; before
    # the other seeds, BC sampled on logged-out validation pages as M-GRPO samples (T = 0.5) and at T = 1: how often
    # does a rollout reach the composition at all?
    first=$s; bc=$dir/s$first/bc/hf
    for t in 0.5 1.0; do
      [ -s "$dir/explore-t$t/results.json" ] || { stage "BC sampled at T = $t on logged-out validation pages"
        $PY eval.py --model "bc=$bc" --tasks suite:stop-newsletter@out --episodes "$LOGIN_EXPLORE" --seed-start 500000 \
          --temperature $t --samples 4 --prompt short --max-new-tokens "$LOGIN_NEW" --max-steps "$LOGIN_TURNS" \
          --concurrency 8 --no-screenshots --out "$dir/explore-t$t"; }
    done
  done
}

filtered_stage() {
  # make demo's own log, its failed episodes left out (train_bc.py's default --only-successes)
  grep -q '"imperfection"' "$DEMO/demos.jsonl" \
    || echo "$DEMO cloned demonstrations without mistakes (DEMO_DATA=clean?): not a log filtered" >&2
  [ -s "$OUT/filtered/eval/results.json" ] || {
    stage "make demo's log ($DEMO/demos.jsonl) filtered to successes: BC of $BASE"
    bc "$DEMO/demos.jsonl" "$OUT/filtered/bc" "$BC_STEPS" short "$BASE" "$BC_DEMO_LR"
    paper_eval "$OUT/filtered/eval" "bc-filtered=$OUT/filtered/bc/hf" "$TEST"; }
  # the filtered BC first, so that each of make demo's rows is paired against it (rl - bc-filtered)
  rm -rf "$OUT/filtered/table"
  paper_table "$OUT/filtered/eval,$DEMO/eval" "$OUT/filtered/table" "$TEST" \
    || echo "$DEMO/eval not joined (above: why); the table is without make demo's rows" >&2
}

for s in $STAGES; do
  case "$s" in
    ref|r1zero|cot|plain|tts|login|filtered) "${s}_stage" ;;
    *) echo "unknown stage $s (ref r1zero cot plain tts login filtered)" >&2; exit 2 ;;
  esac
  echo "stage $s done at $(( $(date +%s) - start ))s"
done

stage "the findings so far (scripts/findings_table.py), done in $(( $(date +%s) - start ))s"
table=(--out "$OUT" --demo "$DEMO")
if [ -n "$OUTCOMES" ]; then
  [ ! -s "$OUTCOMES" ] || table+=(--outcomes "$OUTCOMES")
  [ "$STAGES" = login ] || table+=(--save-outcomes "$OUTCOMES")   # (the log-in stage has no model rows)
fi
$PY scripts/findings_table.py "${table[@]}"
if [ -f "$OUT/filtered/table/results.md" ]; then   # every decoding side by side, rl - bc-filtered among them
  echo; echo "== $OUT/filtered/table/results.md"
  sed -n '/^## Every decoding/,/^## Prompting/p' "$OUT/filtered/table/results.md" | sed '$d'
fi
