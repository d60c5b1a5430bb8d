#!/usr/bin/env bash
# Step 4 of the demo's task-selection protocol, second part (docs/results.md, "Choosing the demo's tasks"):
# M-GRPO from the converged BC (300 steps; BC 600 scored -2.1 +- 3.5 against it) on the chosen tasks, one
# lever at a time, each run evaluated greedily on the validation pages (seeds 500000.., 30 per task; never
# env.EVAL_SEEDS), then one table of every run with paired differences, beside the first pass's models
# (runs/validation/val: base, BC 150, BC 300, RL from BC 150). The control "BC continued for RL's wall time"
# is BC 600: 300 more BC steps take 7.9 minutes, M-GRPO's 48 steps 7.5.
# The rule, fixed before any of these runs was evaluated: a lever is adopted if its run beats rl300 (no lever)
# by at least one standard error, paired; the adopted levers together make one more run (rl300-combined,
# added here once they are known), and the demo uses it if it is at least as good as the best single adopted
# lever, else that lever alone; nothing adopted: the demo keeps its settings.
# A run or evaluation whose output exists is not run again.  bash experiments/demo_levers.sh [NAME ...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, stage, rl
VAL=${VAL_OUT:-runs/validation}
TASKS=$(tail -1 runs/candidates/chosen.txt)
B=4; G=4; RL_STEPS=48; NEW=64; EVAL=30

# NAME: the run's flags beyond the demo's M-GRPO settings (lr 1e-4, T 1, task rotation, Eq. 2 weights)
declare -A LEVERS=(
  [rl300]=""                                             # no lever: the demo's settings from BC 300
  [rl300-lr1e-5]="--lr 1e-5"                             # the update 10x smaller
  [rl300-ds3-pq]="--dynamic-sampling 3 --task-sampling pq"   # groups whose rewards differ, tasks with room
  [rl300-t07]="--temperature 0.7"                        # rollouts nearer the greedy policy evaluated
  [rl300-flat]="--action-weight flat"                    # every action of a group weighs the same
  # added after the five above were evaluated: the levers the rule adopted (each beat rl300 by >= 1 SE)
  [rl300-combined]="--lr 1e-5 --dynamic-sampling 3 --task-sampling pq --temperature 0.7 --action-weight flat"
)
ORDER=(rl300 rl300-lr1e-5 rl300-ds3-pq rl300-t07 rl300-flat rl300-combined)
[ $# -gt 0 ] && ORDER=("$@")

evaluate() {   # NAME PATH: greedy on the validation pages, alone (the table joins the runs with --reuse)
  [ -s "$VAL/evals/$1/results.json" ] || { stage "validation pages: $1 ($2)"
    $PY eval.py --temperature 0 --model "$1=$2" --tasks "$TASKS" --episodes "$EVAL" --seed-start 500000 --prompt short \
      --max-new-tokens "$NEW" --max-steps 6 --out "$VAL/evals/$1"; }
}

evaluate bc600 "$VAL/bc600/hf"
REUSE="$VAL/val,$VAL/evals/bc600"
for name in "${ORDER[@]}"; do
  [ -n "${LEVERS[$name]+x}" ] || { echo "unknown lever run $name (one of: ${!LEVERS[*]})" >&2; exit 2; }
  [ -d "$VAL/$name/hf" ] || { stage "M-GRPO from BC 300: $name (${LEVERS[$name]:-no lever})"
    # shellcheck disable=SC2086  # the flags split into words
    rl "$VAL/bc300/hf" "$VAL/$name" "$RL_STEPS" "$NEW" ${LEVERS[$name]}; }
  evaluate "$name" "$VAL/$name/hf"
  REUSE="$REUSE,$VAL/evals/$name"
done

stage "one table: $REUSE"
$PY eval.py --temperature 0 --model "" --reuse "$REUSE" --tasks "$TASKS" --episodes "$EVAL" --seed-start 500000 --prompt short \
  --max-new-tokens "$NEW" --max-steps 6 --out "$VAL/levers"
stage "done in $(( $(date +%s) - start ))s"
