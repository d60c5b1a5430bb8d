#!/usr/bin/env bash
# `make demo-suite`: the paper's on-policy argument (Sec. 1: after "log out", "edit your profile" needs a log-in
# first) trained end to end on the site suite (env/sitesuite.py), with the tiny CPU model:
#
#   1. expert demonstrations that never start logged out (the off-policy data of the paper's example):
#      stop-newsletter started logged in (on the profile page: Edit profile -> newsletter "never" -> Save ->
#      exit) and log-in (type the username and the password, click "Log in", exit), so both skills are in the
#      data but never one after the other (SUITE_OUT_DEMOS adds a few logged-out stop-newsletter ones);
#   2. behavior cloning on them;
#   3. M-GRPO from the BC checkpoint on stop-newsletter with mixed starts (even seeds logged in, odd logged out);
#   4. BC and BC + M-GRPO evaluated on held-out seeds, separately on logged-in and logged-out starts.
#
# No value is copied from the intent (the credentials and "never" are the same in every episode), so the tiny
# model can represent every action; what the data lacks is the logged-out start of the task itself.
#
#   SUITE_SIZE=smoke|default   (default: default, 22 minutes on a 2-core CPU box, measured)
#   SUITE_OUT_DEMOS=0          logged-out stop-newsletter demonstrations to add (0: the paper's example; with
#                              3, BC already solves the logged-out starts: docs/site-suite.md)
#   SUITE_EVAL=30              held-out episodes per column (start type) in the evaluation
#   SUITE_MODEL=tiny:...       the model BC starts from (an HF checkpoint dir works too)
#   SUITE_BC=DIR               a BC checkpoint (an hf dir) this script made before: steps 1-2 are skipped and
#                              M-GRPO starts from it (make demo-findings' log-in seeds share seed 0's BC)
#   SUITE_OUT=runs/demo-suite  where everything goes
#   SUITE_RL_FLAGS="..."       more train_mgrpo.py flags, which win over the ones below (e.g. "--seed 1"; the
#                              ablation "--score-temperature 1", the T = 0.5 samples scored at T = 1 off-policy as
#                              before issue 32's fix, lives at commit e8dff0f: docs/site-suite.md)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # stage, bc, suite_rl (MODEL is set below)
OUT=${SUITE_OUT:-runs/demo-suite}
SIZE=${SUITE_SIZE:-default}

MODEL=${SUITE_MODEL:-tiny:layers=4,hidden=192}
DEMO_TASKS=suite:stop-newsletter@in,log-in                # the off-policy data: never a logged-out stop-newsletter
EVAL_TASKS=suite:stop-newsletter@in,stop-newsletter@out,log-in
OUT_DEMOS=${SUITE_OUT_DEMOS:-0}
case "$SIZE" in
  smoke)   EPISODES=2;  BC_STEPS=2;  RL_STEPS=1;  B=2; G=2; EVAL=1; BC_BATCH=4 ;;
  default) EPISODES=30; BC_STEPS=100; RL_STEPS=14; B=4; G=4; EVAL=30 ;;
  *) echo "SUITE_SIZE must be smoke or default" >&2; exit 2 ;;
esac
EVAL=${SUITE_EVAL:-$EVAL}
TURNS=10        # the logged-out expert needs 7 interactions
RL_TEMP=0.5     # rollout temperature: at the paper's T = 1 the tiny BC policy breaks the action format in ~70% of
                # its responses (greedy: none), so few groups hold a success to learn from (docs/site-suite.md)
NEW=80          # response tokens: the longest expert response is ~60 tokens of the tiny tokenizer
if [ "$SIZE" = smoke ]; then TURNS=3; NEW=48; fi   # the smoke's barely trained model: shorter, the same code

BC=${SUITE_BC:-$OUT/bc/hf}
if [ -n "${SUITE_BC:-}" ] && [ ! -s "$BC/config.json" ]; then
  echo "SUITE_BC=$BC holds no checkpoint (config.json)" >&2; exit 2      # before anything is written
fi
mkdir -p "$OUT"

if [ -n "${SUITE_BC:-}" ]; then
  stage "1-2/4 skipped: M-GRPO starts from the BC checkpoint SUITE_BC=$BC"
else
  stage "1/4 expert demonstrations: $EPISODES episodes each of $DEMO_TASKS, $OUT_DEMOS of stop-newsletter@out"
  $PY demos.py --tasks "$DEMO_TASKS" --episodes "$EPISODES" --out "$OUT/demos.jsonl"
  if [ "$OUT_DEMOS" -gt 0 ]; then        # other seeds than the logged-in ones
    $PY demos.py --tasks suite:stop-newsletter@out --episodes "$OUT_DEMOS" --seed-offset 500 \
      --out "$OUT/demos_out.jsonl"
    cat "$OUT/demos_out.jsonl" >> "$OUT/demos.jsonl"
  fi
  got=$(wc -l < "$OUT/demos.jsonl"); want=$(( 2 * EPISODES + OUT_DEMOS ))
  if [ "$got" -lt "$want" ]; then echo "only $got of $want expert demonstrations succeeded" >&2; exit 1; fi

  stage "2/4 behavior cloning of $MODEL: $BC_STEPS steps (train_bc.py)"
  bc "$OUT/demos.jsonl" "$OUT/bc" "$BC_STEPS" short
fi

stage "3/4 M-GRPO from the BC checkpoint on mixed starts: $RL_STEPS steps of $B groups x G=$G (train_mgrpo.py)"
# shellcheck disable=SC2086  # SUITE_RL_FLAGS splits into words
suite_rl "$BC" "$OUT/rl" ${SUITE_RL_FLAGS:-}

stage "4/4 evaluation on held-out seeds, by start type: $EVAL episodes each (eval.py)"
$PY eval.py --temperature 0 --model "bc=$BC,rl=$OUT/rl/hf" --tasks "$EVAL_TASKS" --episodes "$EVAL" --prompt short \
  --max-new-tokens "$NEW" --max-steps "$TURNS" --out "$OUT/eval"

stage "done in $(( $(date +%s) - start ))s"
cat "$OUT/eval/results.md"
echo
echo "trajectory viewer: $OUT/eval/viewer/index.html"
