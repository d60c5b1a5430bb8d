"""Issue 32: the headroom table of experiments/demo_headroom.sh from its evaluations: per task, greedy success
beside pass@K at T = 1 and the mean of the K samples, into OUT/headroom.md.

    .venv/bin/python experiments/demo_headroom.py OUT K
"""
import collections
import json
import sys
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
