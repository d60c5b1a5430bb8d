#!/usr/bin/env bash
# Issue 70, R1-CoT at 320 new tokens a turn: is make demo's invalid-action penalty what spends M-GRPO on the long
# thoughts' format instead of the tasks? An ablation row the cot stage's numbers point at, not a row of the plan;
# nothing is chosen from it. What points at it (experiments/cot_bc_limits.sh's last lines, seeds 0 and 1): the
# seeds' rollouts succeeded in 1 and 2 of the 768 on the three email reply and forward tasks, yet only 1.2% and
# 5.1% of their groups had equal rewards (make demo's M-GRPO seeds: 28.5-30.9%): there the penalty (0.1 for each
# turn that does not parse) is the whole signal, and the seeds parse better (unparsable 29.3% -> 11.6%, 10.4%)
# without succeeding more (CoT RL - CoT BC +0.1, +1.0 at T = 1).
# The run: the cot stage's M-GRPO seed 0 (the same CoT BC, seed, steps, budget and flags) with --invalid-penalty 0
# into $FINDINGS_OUT/cot320/cot-rl-s0-nopenalty, evaluated as the stage evaluates (held-out pages, T = 1 x 2 samples
# with greedy beside it) into cot320/test/cot-rl-s0-nopenalty; then one paired table of CoT BC, the stage's seed 0
# and this run, and cot_bc_limits.sh's turn counts and rollouts (every cot-rl-s* evaluated at 320).
# The rule (2026-11-30, 23:10, before the run): one seed, so it reads a direction, not a claim about seeds. Against
# the stage's seed 0 (the same seed: the same first rollouts, paired by page): no-penalty - penalty at T = 1 >= 2 SE
# above 0: the penalty held success back; <= 2 SE below 0: the penalty's format repair is what lifted CoT RL;
# otherwise no difference this one seed can show. Reported with its unparsable share, its groups of equal rewards
# and its email rollouts either way.
#
#   FINDINGS_OUT=runs/findings DEMO_OUT=runs/demo bash experiments/cot_rl_penalty.sh   (needs FINDINGS=cot's seed 0
#                                                                                      at 320, evaluated)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, RL_DEMO_*, RL_DEMO_FLAGS, IN_PLACE, stage, rl, paper_*
OUT=${FINDINGS_OUT:-runs/findings}; DEMO=${DEMO_OUT:-runs/demo}
NEW=320; SET=$OUT/cot$NEW/test; RUN=cot-rl-s0-nopenalty               # the cot stage's layout and budget
B=$RL_DEMO_B; G=$RL_DEMO_G; TEST=50
for need in "$OUT/cot/bc/hf/config.json" "$SET/cot-bc/results.json" "$SET/cot-rl-s0/results.json"; do
  [ -s "$need" ] || { echo "missing $need: run FINDINGS=cot make demo-findings (FINDINGS_OUT=$OUT) first" >&2; exit 2; }
done

# the stage's seeds' recipe (scripts/demo_common.sh's seeded_rl), the penalty at 0
[ -s "$OUT/cot$NEW/$RUN/hf/config.json" ] || { stage "M-GRPO from CoT BC, seed 0, --invalid-penalty 0"
  seeded_rl "$OUT/cot/bc/hf" "$OUT/cot$NEW/$RUN" "$RL_DEMO_STEPS" "$NEW" 0 --invalid-penalty 0; }
paper_eval "$SET/$RUN" "$RUN=$OUT/cot$NEW/$RUN/hf" "$TEST"
stage "one table: cot-bc, cot-rl-s0 and $RUN at $NEW tokens (held-out pages, paired)"
paper_table "$SET/cot-bc,$SET/cot-rl-s0,$SET/$RUN" "$OUT/cot-penalty$NEW" "$TEST"
FINDINGS_OUT=$OUT DEMO_OUT=$DEMO COT_STEPS=300 COT_TOKENS=$NEW bash experiments/cot_bc_limits.sh | tail -n 20
