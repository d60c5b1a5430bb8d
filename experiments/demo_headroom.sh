#!/usr/bin/env bash
# Headroom of a policy before any RL tuning (issue 32, step 3): on the validation pages (seeds 500000.., 30 per
# task; never env.EVAL_SEEDS), greedy success beside pass@8 (8 samples at T = 1 per page: a page counts if any
# of them succeeds) and the mean success of those samples, per task. RL that only sharpens the policy towards
# what it already samples cannot lift greedy success above pass@8.
#   bash experiments/demo_headroom.sh MODEL_DIR OUT     (e.g. runs/budget/bc300/hf runs/budget/headroom)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/demo_common.sh            # PY, TASKS, stage
MODEL=$1; OUT=$2; K=${HEADROOM_K:-8}; EVAL=${HEADROOM_PAGES:-30}
val() {   # NAME TEMPERATURE SEED
  [ -s "$OUT/$1/results.json" ] || $PY eval.py --model "$1=$MODEL" --tasks "$TASKS" --episodes "$EVAL" \
    --seed-start 500000 --prompt short --max-new-tokens 64 --max-steps 6 --temperature "$2" --seed "$3" \
    --concurrency 8 --no-screenshots --out "$OUT/$1"
}
stage "greedy on the validation pages"
val greedy 0 0
for k in $(seq 0 $((K - 1))); do stage "sample $k at T = 1"; val "t1-$k" 1 "$k"; done
$PY - "$OUT" "$K" <<'PY'
import collections, json, sys
from pathlib import Path
out, k = Path(sys.argv[1]), int(sys.argv[2])
def outcomes(run):   # (task, seed) -> success of that run's episode
    return {(r["task"], r["seed"]): r["reward"] > 0
            for r in map(json.loads, (out / run / "trajectories.jsonl").read_text().splitlines())}
greedy = outcomes("greedy")
samples = [outcomes(f"t1-{i}") for i in range(k)]
rows = collections.defaultdict(lambda: [0, 0, 0.0, 0])   # task -> greedy, pass@k, mean, n
for (task, seed), ok in greedy.items():
    r = rows[task]
    r[0] += ok
    r[1] += any(s[(task, seed)] for s in samples)
    r[2] += sum(s[(task, seed)] for s in samples) / k
    r[3] += 1
lines = [f"| task | n | greedy | pass@{k} (T = 1) | mean of the {k} samples | pass@{k} - greedy |",
         "| --- | ---: | ---: | ---: | ---: | ---: |"]
tot = [0, 0, 0.0, 0]
for task, (g, p, m, n) in sorted(rows.items()):
    lines.append(f"| {task.split('/')[-1]} | {n} | {100 * g / n:.1f} | {100 * p / n:.1f} | {100 * m / n:.1f} | "
                 f"{100 * (p - g) / n:+.1f} |")
    tot = [a + b for a, b in zip(tot, (g, p, m, n))]
g, p, m, n = tot
lines.append(f"| **all** | {n} | {100 * g / n:.1f} | {100 * p / n:.1f} | {100 * m / n:.1f} | {100 * (p - g) / n:+.1f} |")
text = "\n".join(lines) + "\n"
(out / "headroom.md").write_text(text)
print(text)
PY
stage "done in $(( $(date +%s) - start ))s: $OUT/headroom.md"
