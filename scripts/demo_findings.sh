#!/usr/bin/env bash
# `make demo-findings`: the paper's other findings in the miniature of `make demo` (same 8 MiniWoB++ tasks,
# tiny CPU model, held-out EVAL_SEEDS), each a stage that writes its own eval/results.{md,json}.
# They were measured before the demo started from the pretrained base, and keep that configuration so that
# the numbers of docs/results.md reproduce: the untrained tiny model ($MODEL), 80 demonstrations per task, BC 300 steps
# at lr 2e-3 (the demo's run with those settings goes to runs/demo-scratch).
#
#   tts     test-time scaling (Fig. 5): untrained, BC and BC + M-GRPO of `make demo` at 2, 4, 6, 8, 12 interactions
#   plain   thinking vs plain format (Table 3): BC on the same demonstrations written without <think>
#   cot     R1-CoT (Sec. 3.4): BC on long-thought demonstrations (demos.py --thoughts long), then M-GRPO
#   zero    R1-Zero: M-GRPO from the untrained model with the demo's RL budget
#   r1zero  R1-Zero in `make demo` itself: M-GRPO from the pretrained base on make demo's 8 tasks with its RL
#           budget and settings (RL_DEMO_* of demo_common.sh), evaluated beside the base on its held-out seeds
#           (runs/demo's BC + M-GRPO is the row to compare with; this stage left make demo to keep it in 45 min)
#   filtered the practitioner's fix that make demo's M-GRPO is measured against: BC of $BASE with make demo's
#           recipe on its log (demos.py --mistakes 0.5, the same command, so the same file) filtered to the
#           successes, evaluated on make demo's held-out pages at its decoding; make demo's own evaluation
#           (MAIN_EVAL, default runs/demo/eval) joins the table when it is there, so RL - filtered BC is paired.
#           ~17 minutes. Five seeds of the comparison: experiments/demo_recipe.sh (docs/results.md)
#
# It reuses that demo run (DEMO_OUT, default runs/demo-scratch: its demos, BC and RL models) and runs it first
# when it is missing (unless the stages picked are r1zero and filtered only, which do not use it).
# FINDINGS="tts plain cot zero r1zero filtered" picks stages; FINDINGS_OUT=runs/findings is where
# they go.
# Budgets are that configuration's (80 demonstrations per task, BC 300 steps, RL 48 steps of 4 x G=4, 20 episodes per task);
# FINDINGS_SIZE=smoke runs every stage in seconds-long budgets on 2 tasks.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # TASKS, SATURATED_TASKS, MODEL, BASE, RL_DEMO_*, stage, bc, rl
MAIN_TASKS=$TASKS                        # make demo's tasks (the r1zero stage)
TASKS=$SATURATED_TASKS                   # the tasks these findings were measured on (scripts/demo.sh reads it)
DEMO=${DEMO_OUT:-runs/demo-scratch}
OUT=${FINDINGS_OUT:-runs/findings}
STAGES=${FINDINGS:-tts plain cot zero r1zero filtered}

EPISODES=80; BC_STEPS=300; RL_STEPS=48; B=4; G=4; EVAL=20; NEW=64
# make demo's RL budget and flags and its held-out pages per task: the r1zero and filtered stages
MAIN_STEPS=$RL_DEMO_STEPS; MAIN_B=$RL_DEMO_B; MAIN_G=$RL_DEMO_G; MAIN_FLAGS="$RL_DEMO_FLAGS $IN_PLACE"; MAIN_PAGES=50
COT_NEW=192     # a long thought is ~100 tokens of the tiny tokenizer before the action
TTS_STEPS=2,4,6,8,12
# the filtered stage: make demo's tasks, data, BC recipe and decoding (scripts/demo.sh)
F_TASKS=$MAIN_TASKS; F_EPISODES=20; F_BC_STEPS=300; F_NEW=64; F_TURNS=$TURNS
MAIN_EVAL=${MAIN_EVAL:-runs/demo/eval}
if [ "${FINDINGS_SIZE:-default}" = smoke ]; then      # the test suite's end-to-end check (tests/test_demo.py)
  TASKS=miniwob:click-button,login-user; EPISODES=2; BC_STEPS=2; RL_STEPS=1; B=2; G=2; EVAL=1; BC_BATCH=4
  MAIN_TASKS=$TASKS; MAIN_STEPS=1; MAIN_B=2; MAIN_G=2; MAIN_PAGES=1; IN_PLACE=""   # (in place: make demo's tasks only)
  COT_NEW=64; TURNS=2   # the smoke's barely trained models write to the limit: shorter runs the same code
  TTS_STEPS=1,2; MAIN_FLAGS="$RL_DEMO_FLAGS --eval-pages 1"   # a sweep of two budgets; the in-run check on one page per task
  # make demo's smoke settings and 2 tasks (scripts/demo.sh), so that its run in DEMO_OUT joins the table
  F_TASKS=$(echo "$F_TASKS" | cut -d, -f1,8); F_EPISODES=3; F_BC_STEPS=2; F_NEW=48; F_TURNS=2; MAIN_EVAL=$DEMO/eval
fi
mkdir -p "$OUT"

needs_demo=""
for s in $STAGES; do case "$s" in r1zero|filtered) ;; *) needs_demo=1 ;; esac; done
if [ -n "$needs_demo" ] && [ ! -d "$DEMO/rl/hf" ]; then
  stage "make demo first ($DEMO)"
  DEMO_OUT="$DEMO" DEMO_TASKS="$TASKS" DEMO_DATA=clean DEMO_RL_FLAGS="" DEMO_MODEL="$MODEL" DEMO_EPISODES=$EPISODES \
    DEMO_BC_STEPS=$BC_STEPS DEMO_BC_LR=2e-3 DEMO_RL_STEPS=$RL_STEPS DEMO_B=$B DEMO_G=$G DEMO_EVAL=$EVAL \
    bash scripts/demo.sh
fi

for s in $STAGES; do
  case "$s" in
  tts)
    stage "test-time scaling: untrained / BC / BC + M-GRPO at $TTS_STEPS interactions"
    $PY eval.py --temperature 0 --model "untrained=$MODEL,bc=$DEMO/bc/hf,rl=$DEMO/rl/hf" --tasks "$TASKS" --episodes "$EVAL" \
      --prompt short --max-new-tokens "$NEW" --max-steps "$TTS_STEPS" --out "$OUT/tts" ;;
  plain)
    stage "thinking vs plain: BC on plain-format demonstrations (same pages), evaluated beside the demo's BC"
    $PY demos.py --tasks "$TASKS" --episodes "$EPISODES" --prompt short_plain --out "$OUT/plain/demos.jsonl"
    bc "$OUT/plain/demos.jsonl" "$OUT/plain/bc" "$BC_STEPS" short_plain
    $PY eval.py --temperature 0 --model "bc-plain=$OUT/plain/bc/hf" --tasks "$TASKS" --episodes "$EVAL" --prompt short_plain \
      --max-new-tokens "$NEW" --max-steps "$TURNS" --out "$OUT/plain/eval" ;;
  cot)
    stage "R1-CoT: BC on long-thought demonstrations (same pages), then M-GRPO with the demo's budget"
    $PY demos.py --tasks "$TASKS" --episodes "$EPISODES" --thoughts long --out "$OUT/cot/demos.jsonl"
    bc "$OUT/cot/demos.jsonl" "$OUT/cot/bc" "$BC_STEPS" short
    rl "$OUT/cot/bc/hf" "$OUT/cot/rl" "$RL_STEPS" "$COT_NEW"
    $PY eval.py --temperature 0 --model "bc-cot=$OUT/cot/bc/hf,rl-cot=$OUT/cot/rl/hf" --tasks "$TASKS" --episodes "$EVAL" \
      --prompt short --max-new-tokens "$COT_NEW" --max-steps "$TURNS" --out "$OUT/cot/eval" ;;
  zero)
    stage "R1-Zero: M-GRPO from the untrained model, the demo's RL budget"
    rl "$MODEL" "$OUT/zero/rl" "$RL_STEPS" "$NEW"
    $PY eval.py --temperature 0 --model "r1-zero=$OUT/zero/rl/hf" --tasks "$TASKS" --episodes "$EVAL" --prompt short \
      --max-new-tokens "$NEW" --max-steps "$TURNS" --out "$OUT/zero/eval" ;;
  r1zero)
    stage "R1-Zero on make demo's tasks: M-GRPO from $BASE (no BC), $MAIN_STEPS steps of $MAIN_B x G=$MAIN_G"
    # shellcheck disable=SC2086  # the flags split into words
    TASKS=$MAIN_TASKS B=$MAIN_B G=$MAIN_G rl "$BASE" "$OUT/r1zero/rl" "$MAIN_STEPS" "$NEW" $MAIN_FLAGS
    $PY eval.py --temperature 0 --model "base=$BASE,r1-zero=$OUT/r1zero/rl/hf" --tasks "$MAIN_TASKS" --episodes "$MAIN_PAGES" \
      --prompt short --max-new-tokens "$NEW" --max-steps "$TURNS" --out "$OUT/r1zero/eval" ;;
  filtered)
    stage "make demo's log filtered to successes: BC of $BASE, $F_BC_STEPS steps, beside make demo's rows"
    # shellcheck disable=SC2086  # the flags split into words
    $PY demos.py --tasks "$F_TASKS" --episodes "$F_EPISODES" $DEMO_LOG_FLAGS --out "$OUT/filtered/demos.jsonl"
    bc "$OUT/filtered/demos.jsonl" "$OUT/filtered/bc" "$F_BC_STEPS" short "$BASE" 1e-3
    f_eval=(--tasks "$F_TASKS" --episodes "$MAIN_PAGES" --samples "$EVAL_SAMPLES" --greedy --prompt short
            --max-new-tokens "$F_NEW" --max-steps "$F_TURNS")
    # shellcheck disable=SC2086  # IN_PLACE: no word, or one
    $PY eval.py --model "bc-filtered=$OUT/filtered/bc/hf" "${f_eval[@]}" --concurrency 8 --out "$OUT/filtered/eval" \
      $IN_PLACE
    rm -rf "$OUT/filtered/table"      # make demo's base, BC and RL joined (RL paired with the filtered BC), if it ran
    if [ -s "$MAIN_EVAL/results.json" ]; then   # (with the same settings: eval.py names what differs, if anything)
      cmp -s "$OUT/filtered/demos.jsonl" "$(dirname "$MAIN_EVAL")/demos.jsonl" \
        || echo "$(dirname "$MAIN_EVAL") cloned other demonstrations (DEMO_DATA=clean?): not its log filtered" >&2
      # the filtered BC first, so that each of make demo's rows is paired against it (rl - bc-filtered)
      $PY eval.py --model "" --reuse "$OUT/filtered/eval,$MAIN_EVAL" "${f_eval[@]}" --out "$OUT/filtered/table" \
        || echo "$MAIN_EVAL not joined (above: why); the table is without make demo's rows" >&2
    fi ;;
  *) echo "unknown stage $s (tts plain cot zero r1zero filtered)" >&2; exit 2 ;;
  esac
  echo "stage $s done at $(( $(date +%s) - start ))s"
done

stage "done in $(( $(date +%s) - start ))s"
for d in tts/results.md plain/eval/results.md cot/eval/results.md zero/eval/results.md r1zero/eval/results.md; do
  [ -f "$OUT/$d" ] && { echo "== $OUT/$d"; sed -n '1,12p' "$OUT/$d"; }
done
# the filtered table: every decoding side by side, with the paired differences (rl - bc-filtered among them)
for d in filtered/table filtered/eval; do
  if [ -f "$OUT/$d/results.md" ]; then
    echo "== $OUT/$d/results.md"
    sed -n '/^## Every decoding/,/^## Prompting/p' "$OUT/$d/results.md" | sed '$d'
    break
  fi
done
