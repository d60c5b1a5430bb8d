"""Issue 86, item 5: each run's engine/trainer mismatch and its KL to the start over its steps, from its
metrics.jsonl (experiments/engine_mismatch.sh prints it after the table; the evaluations' episodes are kept by
``experiments/ledger.py --keep``).

    .venv/bin/python experiments/engine_mismatch.py runs/demo/rl runs/mismatch/bf16-none-s0 ...
"""
import argparse
import json
from pathlib import Path


def summary(run: Path) -> str:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "mismatch/kl_k3" in r]
    if not rows:
        return f"| {run} | no mismatch figures (a run from before issue 86, or not at T = 1) |"
    mean = lambda k: sum(r[k] for r in rows) / len(rows)   # noqa: E731
    return (f"| {run} | {len(rows)} | {mean('mismatch/kl_k1'):.3g} | {mean('mismatch/kl_k3'):.3g} | "
            f"{max(r['mismatch/max_abs_log_ratio'] for r in rows):.3g} | {mean('mismatch/ratio_outside'):.3g} | "
            f"{mean('mismatch/seq_log_ratio_mean'):.3g} | {rows[-1].get('train/kl', float('nan')):.3g} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", type=Path, help="train_mgrpo.py run directories (each with its metrics.jsonl)")
    args = ap.parse_args()
    print("| run | steps | KL k1 (mean) | KL k3 (mean) | max \\|log ratio\\| | tokens outside [0.5, 2] (mean) | "
          "seq log ratio (mean) | KL to the start, last step |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for run in args.runs:
        print(summary(run))
