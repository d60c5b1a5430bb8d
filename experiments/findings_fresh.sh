#!/usr/bin/env bash
# Issue 87, item 1: the findings' one reference and R1-Zero in seeds 0-4 on fresh held-out pages, every episode kept.
# The plan and rules, committed before any run: docs/history.md, "Issue 87: findings a reader can re-derive, the
# plan". Every model is evaluated on the first 50 pages a task of env.FINDINGS_SEEDS (400 pages no evaluation had
# touched; eval.py --seed-start 2000000) at the paper's decoding (T = 1 x 2, common random numbers) with greedy beside
# it, at up to 12 interactions, each budget of the test-time rows (2, 4, 6, 8, 12) read from those episodes (a budget
# run alone gives their first interactions: issue 70, 4,800 of 4,800); the reference rows read budget 6, make demo's.
#
#   ref       make demo's M-GRPO recipe (RL_DEMO_FLAGS, RL_LOG_FLAGS, IN_PLACE) from the committed reference BC
#             (experiments/evidence/reference_bc, sha256 c089fa1c...), seeds SEEDS; the base and the BC evaluated too
#   r1zero    the same M-GRPO from the base (assets/tiny-web-base), no BC, seeds SEEDS
#   filtered  make demo's log (demos.py, deterministic: the same episodes on every machine) filtered to its
#             successes, BC of the base by make demo's recipe (the practitioner's fix the reference is measured against)
#   login     the log-in rows, on the site suite's own held-out seeds (it has no MiniWoB pages): make demo-findings'
#             log-in stage (make demo-suite from the base, seeds 0-4, BC sampled on logged-out validation pages)
#             with 0 and with 1 logged-out demonstration, each condition's episodes kept in FRESH_LOGIN_EVIDENCE as
#             the set outK (runs bc, rl-sS, and bc-tT for BC's samples) and each seed's metrics as
#             issue87_login-outK-sS_metrics.jsonl; a condition runs whole in one sitting (~85 and ~70 min), the
#             conditions LOGIN_OUT (default "0 1") in that order
# After each evaluation its episodes join FRESH_EVIDENCE (experiments/ledger.py --keep: run, task, page, sample,
# decoding, success, interactions), and each M-GRPO run's metrics.jsonl is copied beside it as it finishes
# (issue87_<run>_metrics.jsonl), so a sitting that stops keeps what it finished; a stage resumes at its first
# missing step (an M-GRPO run at its last checkpoint, every 4 steps), and a model whose episodes are in
# FRESH_EVIDENCE is skipped (a sitting on a new machine goes on where the committed evidence ends). ~20 min an
# M-GRPO seed and ~10 an evaluation on the 2-core box: ref and r1zero ~5 hours together.
#
#   FRESH_OUT=runs/fresh STAGES="ref r1zero filtered login" SEEDS="0 1 2 3 4" bash experiments/findings_fresh.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, BASE, RL_DEMO_*, RL_LOG_FLAGS, IN_PLACE, stage, bc, paper_*
OUT=${FRESH_OUT:-runs/fresh}; STAGES=${STAGES:-ref r1zero filtered login}; SEEDS=${SEEDS:-0 1 2 3 4}
BC=${FRESH_BC:-experiments/evidence/reference_bc}
EVIDENCE=${FRESH_EVIDENCE:-experiments/evidence/issue87_outcomes.jsonl.gz}
LOGIN_EVIDENCE=${FRESH_LOGIN_EVIDENCE:-experiments/evidence/issue87_login_outcomes.jsonl.gz}
NEW=64; FRESH=2000000; PAPER_STEPS=2,4,6,8,12
# smaller only to try the script out (FRESH_PAGES=1 FRESH_RL_STEPS=1 FRESH_B=2 FRESH_G=2 SEEDS=0)
TEST=${FRESH_PAGES:-50}; STEPS=${FRESH_RL_STEPS:-$RL_DEMO_STEPS}; B=${FRESH_B:-$RL_DEMO_B}; G=${FRESH_G:-$RL_DEMO_G}
mkdir -p "$OUT/test"

# kept NAME: whether NAME's episodes are in the evidence already (an earlier sitting's, perhaps on another machine,
# whose runs/ is gone): its model is then neither trained nor evaluated again
kept() {
  [ ! -d "$OUT/test/$1" ] && $PY experiments/ledger.py --has "$EVIDENCE" "$1"
}

# fresh_eval NAME PATH: one model on the fresh pages into $OUT/test/NAME, then every finished evaluation kept
fresh_eval() {
  kept "$1" && { echo "$1: its episodes are in $EVIDENCE already"; return; }
  paper_eval "$OUT/test/$1" "$1=$2" "$TEST" "$FRESH"
  $PY experiments/ledger.py --keep "$EVIDENCE" "$OUT"/test/*/
}
# fresh_seeds INIT NAME: make demo's M-GRPO from INIT in every seed, each evaluated
fresh_seeds() {
  local s
  for s in $SEEDS; do
    kept "$2-s$s" && { echo "$2-s$s: its episodes are in $EVIDENCE already"; continue; }
    [ -s "$OUT/$2-s$s/hf/config.json" ] || { stage "M-GRPO $2 from $1, seed $s"
      seeded_rl "$1" "$OUT/$2-s$s" "$STEPS" "$NEW" "$s"; }
    cp "$OUT/$2-s$s/metrics.jsonl" "$(dirname "$EVIDENCE")/issue87_$2-s${s}_metrics.jsonl"
    fresh_eval "$2-s$s" "$OUT/$2-s$s/hf"
  done
}

# login_condition K: the log-in stage with K logged-out demonstrations in BC's data, then its episodes kept (BC's
# held-out evaluation once: every seed evaluates the first seed's BC, greedily), unless its last seed is kept already
# (a sitting may keep the seeds it finished; the rest then run from the same runs/, whose seed 0 holds their BC)
login_condition() {
  local k=$1 dir=$OUT/login eval s with_bc="bc=bc," t
  [ "$k" = 0 ] || dir=$OUT/login-out$k
  if $PY experiments/ledger.py --has "$LOGIN_EVIDENCE" rl-s4 --set "out$k"; then
    echo "log-in, $k logged-out demonstration(s): its episodes are in $LOGIN_EVIDENCE already"; return
  fi
  FINDINGS=login FINDINGS_OUT=$OUT FINDINGS_LOGIN_OUT_DEMOS=$k bash scripts/demo_findings.sh
  for eval in "$dir"/s*/eval; do
    s=${eval%/eval}; s=${s##*/s}
    $PY experiments/ledger.py --keep "$LOGIN_EVIDENCE" "$eval" --set "out$k" --runs "${with_bc}rl=rl-s$s"
    with_bc=""
    cp "$dir/s$s/rl/metrics.jsonl" "$(dirname "$EVIDENCE")/issue87_login-out$k-s${s}_metrics.jsonl"
  done
  for t in "$dir"/explore-t*; do
    $PY experiments/ledger.py --keep "$LOGIN_EVIDENCE" "$t" --set "out$k" --runs "bc=bc-t${t##*-t}"
  done
}

for stage_name in $STAGES; do
  case "$stage_name" in
    ref)      fresh_eval base "$BASE"; fresh_eval bc "$BC"; fresh_seeds "$BC" rl ;;
    r1zero)   fresh_seeds "$BASE" r1zero ;;
    login)    for k in ${LOGIN_OUT:-0 1}; do login_condition "$k"; done ;;
    filtered) kept bc-filtered || [ -s "$OUT/filtered/hf/config.json" ] || {
                stage "make demo's log filtered to successes: BC of the base"
                # shellcheck disable=SC2086  # the demonstrator's flags split into words
                $PY demos.py --tasks "$TASKS" --episodes 20 --out "$OUT/demos.jsonl" $DEMO_LOG_FLAGS
                demo_bc "$OUT/demos.jsonl" "$OUT/filtered"; }
              fresh_eval bc-filtered "$OUT/filtered/hf" ;;
    *) echo "unknown stage $stage_name (ref r1zero filtered login)" >&2; exit 2 ;;
  esac
done
ls -d "$OUT"/test/*/ >/dev/null 2>&1 || exit 0      # every model's episodes kept by earlier sittings
reuse=$(ls -d "$OUT"/test/*/ | paste -sd, -)
stage "one table of every model evaluated so far (fresh pages, paired by page): $OUT/table"
paper_table "$reuse" "$OUT/table" "$TEST" "$FRESH"
