#!/usr/bin/env bash
# What one demonstration is worth in RL trajectories (issue 57, item 3), on clean data: BC's success against the
# number of clean demonstrations per task, and M-GRPO from make demo's BC (20 per task) at 1x, 2x and 4x make
# demo's budget, on make demo's 8 tasks with make demo's recipes.
#
# The plan, fixed (committed) before any run of this script:
#  1. Data: demos.py's clean demonstrations, N = 20, 40, 80, 160 per task (env.DEMO_SEEDS 0..N-1, so each set
#     holds the smaller ones; 20 is make demo's data).
#  2. BC of each N by make demo's recipe (from the pretrained base, lr 1e-3, batch 16, 5% warm-up, cosine),
#     trained to convergence by the rule that set make demo's 300 steps (docs/history.md, "BC at 300 steps is
#     converged"): S = 300 steps, doubled while the doubled BC beats S by >= 1 SE at T = 1 on validation pages
#     (paired); at most 1,200 steps (a BC still gaining at 1,200 is reported as not converged). The N's BC is the
#     S that doubling no longer beat. N = 20's is make demo's BC 300 (converged by the same rule).
#  3. M-GRPO from N = 20's BC with make demo's flags for 128 steps of B 8 x G 8 (8,192 trajectories), checkpoints
#     at steps 32, 64 and 128: 1x, 2x and 4x make demo's budget (after 4 warm-up steps the lr is constant, so the
#     first 32 steps are trained as make demo's run is); --seed 0 and --seed 1.
#  4. Validation pages (choosing BC's steps only): 25 per task from seed 500000 (200 pages), T = 1 with 2 samples
#     per page (common random numbers) and greedy beside it, at most 6 interactions.
#  5. The figure's numbers, once, on held-out pages (env.EVAL_SEEDS, 50 per task, T = 1 x 2 and greedy): every
#     chosen BC and every RL checkpoint, each alone on the same pages, joined into one table paired with N = 20's
#     BC. Cost axes: demonstrations (N x 8 tasks), RL trajectories, and minutes of this 2-core box (each training's
#     wall time, in minutes.tsv; an RL checkpoint's share of its run in proportion to its steps). The exchange
#     rate: the N at which BC's curve (linear between the measured N) reaches RL's T = 1 success at each budget;
#     one demonstration is worth trajectories / ((N - 20) x 8) trajectories there (undefined where RL stays below
#     BC at 20 + 1 SE).
#  6. The issue's target: M-GRPO closes >= half of the 20 -> 80 gap at T = 1 within 4x (the moonshot: within 1x).
#     Reported whatever the numbers are.
# A stage whose output exists is not run again (an RL run that stopped resumes from its last checkpoint).
#   bash experiments/demo_exchange.sh bc [N...]      the data, the BCs (doubling by rule 2) and their validation
#   bash experiments/demo_exchange.sh rl [SEED...]   M-GRPO from N = 20's BC, 128 steps (seeds 0 1 by default)
#   bash experiments/demo_exchange.sh test           the held-out evaluation of rule 5 and the figure
#   bash experiments/demo_exchange.sh check20        rule 2 for N = 20 at T = 1 (a check, added later: below)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, BASE, RL_DEMO_*, IN_PLACE, stage, bc, rl, paper_eval
OUT=${EXCHANGE_OUT:-runs/exchange}
B=$RL_DEMO_B; G=$RL_DEMO_G; NEW=64; VALID=25; TEST=50; RL_STEPS=128; CKPTS="32 64 128"
NS=(20 40 80 160)
mkdir -p "$OUT"

# timed NAME CMD...: run CMD, then add NAME and its wall seconds to minutes.tsv
timed() {
  local t0; t0=$(date +%s)
  "${@:2}"
  printf '%s\t%s\n' "$1" "$(( $(date +%s) - t0 ))" >> "$OUT/minutes.tsv"
}

# gain A B: B - A at T = 1 on validation pages, and whether it is >= 1 SE ("yes"/"no"), from one paired table
gain() {
  local dir="$OUT/valid/pair-$1-$2"
  [ -s "$dir/results.json" ] || $PY eval.py --model "" --reuse "$OUT/valid/$1,$OUT/valid/$2" --tasks "$TASKS" \
    --episodes "$VALID" --seed-start 500000 --samples 2 --greedy --prompt short --max-new-tokens "$NEW" \
    --max-steps 6 --out "$dir" > /dev/null
  $PY -c 'import json, sys; p = json.load(open(sys.argv[1]))["paired"][sys.argv[3] + " - " + sys.argv[2]]
d, se = 100 * p["diff"], 100 * p["stderr"]
print(f"{d:+.1f} +- {se:.1f}", "yes" if d >= se else "no")' "$dir/results.json" "$1" "$2"
}

# bc_valid N S: BC of S steps on N demonstrations per task (trained once, timed) and its validation evaluation
bc_valid() {
  [ -s "$OUT/n$1/bc$2/hf/config.json" ] || { stage "BC $2 on $1 demonstrations per task"
    timed "bc-n$1-s$2" bc "$OUT/n$1/demos.jsonl" "$OUT/n$1/bc$2" "$2" short "$BASE" "$BC_DEMO_LR"; }
  paper_eval "$OUT/valid/n$1-s$2" "n$1-s$2=$OUT/n$1/bc$2/hf" "$VALID" 500000
}

# chosen N: the BC of N that rule 2 chose (printed as its directory name), once its doublings are evaluated
chosen() { cat "$OUT/n$1/chosen"; }

bc_stage() {
  local n s verdict
  for n in "${@:-${NS[@]}}"; do
    [ -s "$OUT/n$n/demos.jsonl" ] || { stage "demonstrations: $n per task"; mkdir -p "$OUT/n$n"
      $PY demos.py --tasks "$TASKS" --episodes "$n" --out "$OUT/n$n/demos.jsonl"; }
    [ -s "$OUT/n$n/chosen" ] && continue
    s=300
    while :; do
      bc_valid "$n" "$s"
      [ "$n" = 20 ] && break                       # make demo's BC: converged at 300 (docs/history.md)
      [ "$s" -gt 300 ] || { s=$((s * 2)); continue; }
      verdict=$(gain "n$n-s$((s / 2))" "n$n-s$s")
      echo "BC on $n per task, $((s / 2)) -> $s steps: $verdict (>= 1 SE)" | tee -a "$OUT/convergence.txt"
      if [[ $verdict == *no ]]; then s=$((s / 2)); break; fi
      if [ "$s" -ge 1200 ]; then echo "BC on $n per task: still gaining at 1200 steps (not converged)" \
        | tee -a "$OUT/convergence.txt"; break; fi
      s=$((s * 2))
    done
    echo "bc$s" > "$OUT/n$n/chosen"
  done
}

rl_stage() {
  local seed seeds=("$@")
  [ ${#seeds[@]} -gt 0 ] || seeds=(0 1)
  for seed in "${seeds[@]}"; do
    # shellcheck disable=SC2086  # the flags split into words
    [ -d "$OUT/rl-s$seed/step_$RL_STEPS/hf" ] || { stage "M-GRPO from BC 300 (20 per task), seed $seed, $RL_STEPS steps"
      timed "rl-s$seed" rl "$OUT/n20/$(chosen 20)/hf" "$OUT/rl-s$seed" "$RL_STEPS" "$NEW" $RL_DEMO_FLAGS $IN_PLACE \
        --save-every 32 --resume --seed "$seed"; }
  done
}

# check20_stage: rule 2's first doubling for N = 20 at T = 1 on the validation pages. Added on 2026-11-28 after
# N = 40's 300 -> 600 gained +8.2 +- 2.4, before this check ran: make demo's 300 steps were chosen by a greedy
# check on other pages (docs/history.md). It reports; it does not change rule 2's choice or the RL runs' start.
check20_stage() {
  bc_valid 20 600
  echo "BC on 20 per task, 300 -> 600 steps (the check): $(gain n20-s300 n20-s600) (>= 1 SE)" \
    | tee -a "$OUT/convergence.txt"
}

# test_stage: rule 5, once: each chosen BC and RL checkpoint on the held-out pages, then one paired table and the
# figure. A BC not chosen yet or an RL checkpoint not trained yet is left out; a later run evaluates it and joins the
# table again (an evaluation already on disk is not run again), so the order of the stages changes no number.
test_stage() {
  local n s seed reuse=""
  for n in "${NS[@]}"; do
    [ -s "$OUT/n$n/chosen" ] || { echo "N = $n: no BC chosen yet (bc $n): left out of this table"; continue; }
    paper_eval "$OUT/test/n$n" "n$n=$OUT/n$n/$(chosen "$n")/hf" "$TEST"; reuse="$reuse,$OUT/test/n$n"
  done
  for seed in 0 1; do
    for s in $CKPTS; do
      [ -d "$OUT/rl-s$seed/step_$s/hf" ] || continue
      paper_eval "$OUT/test/rl-s$seed-$((s * B * G))" "rl-s$seed-$((s * B * G))=$OUT/rl-s$seed/step_$s/hf" "$TEST"
      reuse="$reuse,$OUT/test/rl-s$seed-$((s * B * G))"
    done
  done
  stage "one table of the held-out runs"
  $PY eval.py --model "" --reuse "${reuse#,}" --tasks "$TASKS" --episodes "$TEST" --samples 2 --greedy --prompt short \
    --max-new-tokens "$NEW" --max-steps 6 --out "$OUT/test/table"
  $PY experiments/exchange_figure.py --out "$OUT"
}

case "${1:-}" in
  bc) shift; bc_stage "$@" ;;
  rl) shift; rl_stage "$@" ;;
  test) test_stage ;;
  check20) check20_stage ;;
  *) echo "usage: demo_exchange.sh bc [N...] | rl [SEED...] | test | check20" >&2; exit 2 ;;
esac
stage "done in $(( $(date +%s) - start ))s"
