# Sourced by scripts/demo.sh, demo_findings.sh and demo_suite.sh: the demo's tasks, model and training
# commands, written once so that every finding runs with the demo's own settings.
PY=${WEBAGENT_PYTHON:-.venv/bin/python}   # the stages' interpreter (tests/test_demo.py: a warm one, tests/warm.py)
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.torch_extensions}

# The demo's 8 MiniWoB++ tasks, chosen where BC leaves room by a rule fixed before any RL run on them
# (docs/history.md, "Choosing the demo's tasks": BC's validation success in [20%, 70%], closest to 45% first)
TASKS=miniwob:click-widget,email-inbox-reply,email-inbox-forward-nl,navigate-tree,email-inbox-star-reply,email-inbox-noscroll,email-inbox-forward-nl-turk,click-option
# The first demo's 8 tasks (the last three multi-step), where BC saturates: the saturated case of
# docs/history.md, the candidates' exclusion list and the configuration of the findings measured before the base
SATURATED_TASKS=miniwob:click-button,click-link,click-dialog,click-tab,focus-text,click-checkboxes,click-collapsible-2,login-user
# make demo's M-GRPO, chosen on validation pages by the rule of experiments/demo_budget.sh (issue 32; the script
# is at commit e8dff0f, its runs in docs/history.md):
# 32 steps of B 8 tasks x G 8 = 2048 trajectories, lr 1e-4 after 4 warm-up steps, the update in micro-batches
# of 16, greedy success on 3 validation pages per task every 8 steps (drawn in dynamics.png)
RL_DEMO_STEPS=32; RL_DEMO_B=8; RL_DEMO_G=8
# make demo's evaluation: each held-out page EVAL_SAMPLES times at T = 1 (the paper's decoding) with common random
# numbers, and greedy beside it. What K buys (experiments/eval_precision.sh, docs/history.md): the paired SE of
# RL - BC on 400 pages is 2.4 points at K = 1, 1.9 at 2, 1.6 at 4 (1.5 needs 6); each sample of the three models
# costs ~10 minutes of this 2-core box: make demo took 52 minutes with K = 2 (a slow hour; docs/results.md)
EVAL_SAMPLES=2
RL_DEMO_FLAGS="--lr 1e-4 --warmup-steps 4 --micro-batch 16 --eval-every 8 --eval-pages 3"
# make demo's BC (the bc function below, from $BASE): 300 steps at lr 1e-3, fixed on validation pages (docs/history.md,
# "Issue 32" and "Issue 68"; converged: 600 steps scored -2.1 +- 3.5 against it)
BC_DEMO_STEPS=300; BC_DEMO_LR=1e-3
# make demo's data since issue 68 (DEMO_DATA=log): a demonstrator's unfiltered log, about half of its episodes
# carrying a failing mistake (the decisive action on another element, or taken early), cloned as logged
DEMO_LOG_FLAGS="--mistakes 0.5"
# M-GRPO on the log: RL_DEMO_FLAGS and an invalid-action penalty (a turn whose response does not parse costs 0.1 of
# reward, as in verl-agent's GiGPO recipes; the paper rewards success only), adopted by experiments/demo_recipe.sh's
# rule on validation pages (docs/history.md, "Issue 68"): RL - BC +5.5, +6.8, +10.5 in seeds 0-2 against +4.5,
# +4.8, +6.2 without it, unparsable responses back to BC's level where without it they rose in every seed
RL_LOG_FLAGS="--invalid-penalty 0.1"
# On these 8 tasks (TASKS) the demo's M-GRPO and evaluation restart each MiniWoB page in place: the same episodes
# as loading it again there (tests/test_env_miniwob.py), x1.48-1.77 the RL trajectories a minute (bench/RESULTS.md).
# Not checked on other tasks: a script running others sets it empty.
IN_PLACE=--miniwob-in-place
MODEL=tiny:layers=4,hidden=192         # a randomly initialized tiny model (built offline)
BASE=assets/tiny-web-base               # the same model pretrained on synthetic pages (make pretrain; README)

start=$(date +%s)
stage() { echo; echo "==== [$(( $(date +%s) - start ))s] $* ===="; }

# bc DEMOS OUT STEPS PROMPT [INIT [LR [FLAGS...]]]: behavior cloning of INIT (default $MODEL at lr 2e-3; no browser
# runs during BC: every core), batches of $BC_BATCH demonstration steps (16; the smoke sizes take 4), each sample
# its own forward pass (the same steps as one padded batch, x2.2 faster on this CPU: bench/bench_bc.py; since
# issue 68, so BC checkpoints of earlier commits differ in rounding); FLAGS: more train_bc flags
# (e.g. --no-only-successes)
BC_BATCH=16
bc() {
  $PY train_bc.py --model "${5:-$MODEL}" --data "$1" --out "$2" --max-steps "$3" --batch-size "$BC_BATCH" \
    --micro-batch "$BC_BATCH" --forward-batch 1 --lr "${6:-2e-3}" --warmup-frac 0.05 --prompt "$4" \
    --torch-threads 0 "${@:7}"
}
# demo_bc DEMOS OUT [FLAGS...]: make demo's BC of $BASE on DEMOS into OUT (FLAGS: e.g. --no-only-successes)
demo_bc() { bc "$1" "$2" "$BC_DEMO_STEPS" short "$BASE" "$BC_DEMO_LR" "${@:3}"; }

# rl INIT OUT STEPS NEW [FLAGS...]: M-GRPO on $TASKS, $B tasks x G=$G per step, <= $TURNS interactions, lr 1e-4 (the
# saturated demo's; FLAGS: more train_mgrpo flags, which win over these, e.g. --lr 1e-5 as make demo passes)
TURNS=6      # interactions per episode, in training and evaluation (the smoke sizes take 2: the same code, shorter)
# The tiny demo's optimizer, with which its recipe was chosen: gradient norm clipped at 1 and torch's Adam beta2
# 0.999 (train_mgrpo.py's defaults are the released config's 0.01 and 0.99, for real models: docs/training.md)
RL_OPTIM="--grad-clip 1 --adam-beta2 0.999"
rl() {
  # shellcheck disable=SC2086  # RL_OPTIM splits into words
  $PY train_mgrpo.py --model "$1" --tasks "$TASKS" --out "$2" --steps "$3" --tasks-per-step "$B" --group-size "$G" \
    --lr 1e-4 --beta 0.001 --max-turns "$TURNS" --max-new-tokens "$4" --prompt short --save-every 0 $RL_OPTIM "${@:5}"
}

# seeded_rl INIT OUT STEPS NEW SEED [FLAGS...]: make demo's M-GRPO recipe (rl with RL_DEMO_FLAGS, the adopted
# RL_LOG_FLAGS and IN_PLACE, or $RL_FLAGS where a script sets its own) from INIT with --seed SEED into OUT,
# checkpointed every 4 steps and resumed from its last checkpoint (a stage spans sittings; a resumed run equals the
# uninterrupted one); FLAGS win (e.g. --invalid-penalty 0). The findings' seeds and the experiments call it.
seeded_rl() {
  # shellcheck disable=SC2086  # the flag sets split into words
  rl "$1" "$2" "$3" "$4" ${RL_FLAGS:-$RL_DEMO_FLAGS $RL_LOG_FLAGS $IN_PLACE} --seed "$5" --save-every 4 --resume "${@:6}"
}

# suite_rl INIT OUT [FLAGS...]: make demo-suite's M-GRPO on stop-newsletter with mixed starts (even seeds logged
# in, odd logged out), $RL_STEPS steps of $B groups x G=$G, <= $TURNS interactions of <= $NEW tokens, rollouts
# at temperature $RL_TEMP (FLAGS win over these, e.g. --seed 1)
suite_rl() {
  # shellcheck disable=SC2086  # RL_OPTIM splits into words
  $PY train_mgrpo.py --model "$1" --tasks suite:stop-newsletter --out "$2" --steps "$RL_STEPS" --tasks-per-step "$B" \
    --group-size "$G" --lr 1e-4 --beta 0.001 --max-turns "$TURNS" --max-new-tokens "$NEW" --prompt short \
    --save-every 0 --temperature "$RL_TEMP" $RL_OPTIM "${@:3}"
}

# valid_eval DIR NAME PATH: greedy success of PATH on the validation pages (seeds 500000.., $EVAL per task, at
# most 6 interactions of $NEW tokens; never env.EVAL_SEEDS) into DIR/NAME, unless it is there. The budget and
# credit experiments evaluate each checkpoint alone and join them into one paired table with valid_table.
valid_eval() {
  [ -s "$1/$2/results.json" ] || { stage "validation pages: $2 ($3)"
    $PY eval.py --temperature 0 --model "$2=$3" --tasks "$TASKS" --episodes "$EVAL" --seed-start 500000 --prompt short \
      --max-new-tokens "$NEW" --max-steps 6 --concurrency 8 --no-screenshots --out "$1/$2"; }
}

# paper_eval DIR NAME=PATH PAGES [SEED_START]: one model at the paper's decoding, T = 1 with 2 samples per page
# (common random numbers) and greedy beside it, at most $PAPER_STEPS interactions (6; a list such as 2,4,6 reads
# each budget from the longest run's episodes) of $NEW tokens with the $PAPER_PROMPT prompt, into DIR unless it is there;
# validation pages from SEED_START, or without it the held-out ones (env.EVAL_SEEDS). The issue-57 experiments
# evaluate each model alone and join them into one paired table with eval.py --reuse.
PAPER_PROMPT=short; PAPER_STEPS=6
paper_eval() {
  [ -s "$1/results.json" ] || { stage "evaluation: $2 ($3 pages per task${4:+ from seed $4})"
    # shellcheck disable=SC2086  # IN_PLACE and the seed flag: no word, or words
    $PY eval.py --model "$2" --tasks "$TASKS" --episodes "$3" ${4:+--seed-start $4} --samples 2 --greedy \
      --prompt "$PAPER_PROMPT" --max-new-tokens "$NEW" --max-steps "$PAPER_STEPS" --concurrency 8 --no-screenshots \
      --out "$1" $IN_PLACE; }
}

# paper_table REUSE OUT PAGES [SEED_START]: one table at paper_eval's decoding (paired differences included) of the
# paper_eval directories REUSE (comma-separated), on the same pages as they (validation pages from SEED_START, or
# without it the held-out ones), into OUT. The issue-57 and issue-68 experiments join their models with it.
paper_table() {
  # shellcheck disable=SC2086  # the seed flag: no word, or words
  $PY eval.py --model "" --reuse "$1" --tasks "$TASKS" --episodes "$3" ${4:+--seed-start $4} --samples 2 --greedy \
    --prompt "$PAPER_PROMPT" --max-new-tokens "$NEW" --max-steps "$PAPER_STEPS" --out "$2"
}

# valid_table REUSE OUT: one table (paired differences included) of the valid_eval directories REUSE
# (comma-separated) into OUT
valid_table() {
  stage "one table: $1"
  $PY eval.py --temperature 0 --model "" --reuse "$1" --tasks "$TASKS" --episodes "$EVAL" --seed-start 500000 --prompt short \
    --max-new-tokens "$NEW" --max-steps 6 --out "$2"
}

# valid_runs SAVE_EVERY: the body of the validation experiments (demo_credit.sh; demo_budget.sh until e8dff0f),
# from their OUT, BC, RUNS (name -> train_mgrpo flags), ORDER (the runs to make), NAMES (table order), STEPS, CKPTS,
# B, G, NEW:
# BC 300 by make demo's recipe unless BC exists, each run of ORDER from it unless done (checkpoints every
# SAVE_EVERY steps), each of its CKPTS evaluated, then one table of every run evaluated so far, in NAMES order
valid_runs() {
  [ -s "$BC/config.json" ] || { stage "expert demonstrations and BC 300 (make demo's recipe)"
    $PY demos.py --tasks "$TASKS" --episodes 20 --out "$OUT/demos.jsonl"
    demo_bc "$OUT/demos.jsonl" "$OUT/bc300"; }
  valid_eval "$OUT/evals" bc300 "$BC"
  local name s reuse="$OUT/evals/bc300"
  for name in "${ORDER[@]}"; do
    [ -n "${RUNS[$name]+x}" ] || { echo "unknown run $name (one of: ${!RUNS[*]})" >&2; exit 2; }
    # a run that stopped, or ran fewer steps (the constant lr after warm-up makes its steps those of the
    # longer run), resumes from its last checkpoint
    [ -d "$OUT/$name/step_$STEPS/hf" ] || { stage "M-GRPO from BC 300: $name (${RUNS[$name]}), $STEPS steps of $B x $G"
      # shellcheck disable=SC2086  # the flags split into words
      rl "$BC" "$OUT/$name" "$STEPS" "$NEW" --micro-batch 16 --save-every "$1" --eval-every 8 --eval-pages 3 \
        --resume ${RUNS[$name]}; }
    for s in $CKPTS; do
      valid_eval "$OUT/evals" "$name-$((s * B * G))" "$OUT/$name/step_$s/hf"
    done
  done
  for name in "${NAMES[@]}"; do
    for s in $CKPTS; do
      [ -s "$OUT/evals/$name-$((s * B * G))/results.json" ] && reuse="$reuse,$OUT/evals/$name-$((s * B * G))"
    done
  done
  valid_table "$reuse" "$OUT/table"
}
