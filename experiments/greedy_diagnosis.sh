#!/usr/bin/env bash
# Issue 99, item 1: why M-GRPO moves the sampled policy and not the greedy one, measured before any lever, on
# validation pages only (env.VALID_SEEDS: eval.py --seed-start 500000, the first 30 a task of make demo's 8: 240
# pages, never the findings' or the test pages). The plan, committed before its first run (2026-12-05):
#
#   bc       the committed reference BC (experiments/evidence/reference_bc, sha256 c089fa1c...: every run of issues
#            86-87 starts from it): greedy and K = 8 samples at T = 1 per page (the group size G of make demo's
#            recipe), common random numbers (eval.py --samples 8 --greedy --seed 0). Each page falls in one class:
#            solved (greedy succeeds), reachable (greedy fails, a sample succeeds), unreached (neither).
#   rl-s0    make demo's M-GRPO recipe from that BC, seed 0 (seeded_rl, as experiments/findings_fresh.sh's ref):
#            the same evaluation, and greedy at its half-way checkpoint (rl-s0-half, step 16 of 32); per class:
#            greedy flips both ways, T = 1 success before and after.
#   bc-s1    BC by make demo's recipe on make demo's log (demos.py --mistakes 0.5, deterministic), seed 1: greedy
#            only; its greedy flips against the reference BC are the noise floor of a flip (two BCs that differ in
#            seed, and in the machine that trained them).
#   signal   where Eq. 2's positive advantage lands: BC's K samples of a page taken as one group of G = 8
#            (A_i = (r_i - mean) / std, train_mgrpo.group_advantages), the sum of positive A by class.
#
# The rule, fixed with the plan (each limit named when its test holds; more than one may):
#   exploration  unreached pages are at least half of BC's greedy failures (no sample, no gradient there);
#   signal       reachable pages are at least half of BC's greedy failures, and RL's greedy wins on them
#                (fail -> success) exceed the BC-BC churn's wins on them by less than a third of the reachable
#                pages (the signal is present and does not flip the mode);
#   forgetting   RL's greedy losses on solved pages (success -> fail) exceed the BC-BC churn's losses there by more
#                than 2 SE (the binomial SE of the difference of the two rates over the solved pages).
# Standard errors are the pages'; one RL seed (a diagnosis, not a claim about RL: issue 99's item 3 is the claim).
#
#   DIAG_OUT=runs/diag bash experiments/greedy_diagnosis.sh     (~60 min on the 2-core box; resumes by stage)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, BASE, RL_DEMO_*, RL_LOG_FLAGS, DEMO_LOG_FLAGS, IN_PLACE, ...
OUT=${DIAG_OUT:-runs/diag}; BC=${DIAG_BC:-experiments/evidence/reference_bc}
PAGES=${DIAG_PAGES:-30}; K=8; NEW=64; STEPS=$RL_DEMO_STEPS; B=$RL_DEMO_B; G=$RL_DEMO_G
mkdir -p "$OUT/valid"

# diag_eval NAME PATH [SAMPLES]: greedy (and SAMPLES at T = 1, common random numbers) on the validation pages
diag_eval() {
  local samples=${3:-0} how=(--temperature 0)
  [ "$samples" -gt 0 ] && how=(--samples "$samples" --greedy --seed 0)
  [ -s "$OUT/valid/$1/results.json" ] || { stage "validation pages: $1 ($2)"
    # shellcheck disable=SC2086  # IN_PLACE: no word, or a word
    $PY eval.py --model "$1=$2" --tasks "$TASKS" --episodes "$PAGES" --seed-start 500000 "${how[@]}" --prompt short \
      --max-new-tokens "$NEW" --max-steps 6 --concurrency 8 --no-screenshots --out "$OUT/valid/$1" $IN_PLACE; }
}

diag_eval bc "$BC" "$K"
[ -s "$OUT/rl-s0/hf/config.json" ] || { stage "M-GRPO from the reference BC, seed 0 (make demo's recipe)"
  seeded_rl "$BC" "$OUT/rl-s0" "$STEPS" "$NEW" 0; }
diag_eval rl-s0 "$OUT/rl-s0/hf" "$K"
diag_eval rl-s0-half "$OUT/rl-s0/step_$((STEPS / 2))/hf"
[ -s "$OUT/demos.jsonl" ] || { stage "make demo's log (demos.py $DEMO_LOG_FLAGS)"
  # shellcheck disable=SC2086  # the flags split into words
  $PY demos.py --tasks "$TASKS" --episodes 20 --out "$OUT/demos.jsonl" $DEMO_LOG_FLAGS; }
[ -s "$OUT/bc-s1/hf/config.json" ] || { stage "BC by make demo's recipe, seed 1"
  demo_bc "$OUT/demos.jsonl" "$OUT/bc-s1" --no-only-successes --seed 1; }
diag_eval bc-s1 "$OUT/bc-s1/hf"
EVIDENCE=experiments/evidence/issue99_diagnosis_outcomes.jsonl.gz     # every episode kept, the table read from it
$PY experiments/ledger.py --keep "$EVIDENCE" "$OUT"/valid/*/ --set diag
cp "$OUT/rl-s0/metrics.jsonl" experiments/evidence/issue99_diag_rl-s0_metrics.jsonl
$PY experiments/greedy_diagnosis.py "$EVIDENCE" "$K" | tee "$OUT/diagnosis.md"
stage "done: $OUT/diagnosis.md"
