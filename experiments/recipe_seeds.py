"""The seeds of experiments/demo_recipe.sh side by side (issue 68, rules 4, 6 and 7 of its plan).

For every M-GRPO run ``RECIPE-sSEED`` evaluated on a split (``valid``: the validation pages; ``test``: the held-out
ones), from the split's joined table (``<out>/<split>/table/results.json``, eval.py --reuse) and the run's own
``metrics.jsonl``: RL - BC paired by page at T = 1 and greedy (and RL - filtered BC), and what its rollouts did
(unparsable responses per turn in its first and last 4 steps, the KL to the start at the end, the share of groups
with a signal, rollout success first and last 4 steps). Then per recipe: the seeds' mean of RL - BC at T = 1, its
SE from the seeds' spread, the worst seed, and against ``base`` the difference of means with its SE (rule 6).
Also each recipe's mean over seeds with a 95% t-interval (of RL - BC and of RL - filtered BC) and how many seeds meet
issue 68's targets (RL - BC >= +5 at >= 3 SE; above the filtered BC).
Writes ``<out>/<split>/seeds.md`` and a strip plot of RL - BC per seed, ``<out>/<split>/seeds.png``.

    .venv/bin/python experiments/recipe_seeds.py                  # runs/recipe, validation pages
    .venv/bin/python experiments/recipe_seeds.py --split test
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from eval_stats import across_seeds  # noqa: E402


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def seeds_se(xs: list[float]) -> float:
    """The SE of a mean over seeds, from their spread (n - 1); nan for one seed."""
    return across_seeds(xs)[1]


def interval(xs: list[float]) -> str:
    """A mean over seeds with its 95% t-interval, e.g. "+8.1 [+5.0, +11.2]"."""
    m, _, half = across_seeds(xs)
    return f"{m:+.1f}" if len(xs) < 2 else f"{m:+.1f} [{m - half:+.1f}, {m + half:+.1f}]"


def rollout_summary(metrics: Path) -> dict[str, float]:
    """What a run's rollouts did, from its metrics.jsonl (steps with rollouts only)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r for r in rows if "rollout/success_rate" in r]
    first, last = steps[:4], steps[-4:]

    def avg(rs, key):
        return mean([r[key] for r in rs if key in r])
    return {"unparsable_first": avg(first, "rollout/parse_fail_rate"),
            "unparsable_last": avg(last, "rollout/parse_fail_rate"), "kl_last": avg(last, "train/kl"), "signal": avg(steps, "rollout/frac_signal"),
            "success_first": avg(first, "rollout/success_rate"), "success_last": avg(last, "rollout/success_rate")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/recipe")
    ap.add_argument("--split", default="valid", choices=["valid", "test"])
    a = ap.parse_args()
    out = Path(a.out)
    table = json.loads((out / a.split / "table" / "results.json").read_text())
    greedy = table.get("greedy", {}).get("paired", {})
    runs = [r for r in table["runs"] if re.fullmatch(r"[\w-]+-s\d+", r)]
    lines = [f"# The recipe's seeds on the {a.split} pages ({out})", "",
             "| run | RL - BC, T = 1 | SE | RL - BC, greedy | SE | RL - filtered BC, T = 1 | SE | unparsable / turn, "
             "first -> last 4 steps | KL at the end | groups with a signal | rollout success, first -> last 4 |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    by_recipe: dict[str, dict[int, float]] = collections.defaultdict(dict)
    vs_filtered: dict[str, dict[int, float]] = collections.defaultdict(dict)
    targets: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])   # seeds at >= +5 and >= 3 SE; above bc-f
    for run in runs:
        recipe, seed = run.rsplit("-s", 1)
        d = table["paired"][f"{run} - bc"]
        g = greedy.get(f"{run} - bc", {"diff": float("nan"), "stderr": float("nan")})
        f = table["paired"].get(f"{run} - bc-f", {"diff": float("nan"), "stderr": float("nan")})
        by_recipe[recipe][int(seed)] = 100 * d["diff"]
        vs_filtered[recipe][int(seed)] = 100 * f["diff"]
        targets[recipe][0] += d["diff"] >= 0.05 and d["diff"] >= 3 * d["stderr"]
        targets[recipe][1] += f["diff"] > 0
        m = rollout_summary(out / run / "metrics.jsonl")
        lines.append(f"| {run} | {100 * d['diff']:+.1f} | {100 * d['stderr']:.1f} | {100 * g['diff']:+.1f} | "
                     f"{100 * g['stderr']:.1f} | {100 * f['diff']:+.1f} | {100 * f['stderr']:.1f} | "
                     f"{100 * m['unparsable_first']:.1f}% -> {100 * m['unparsable_last']:.1f}% | {m['kl_last']:.4f} | "
                     f"{100 * m['signal']:.0f}% | {100 * m['success_first']:.0f}% -> {100 * m['success_last']:.0f}% |")
    lines += ["", "| recipe | seeds | RL - BC at T = 1 per seed | mean | SE (seeds) | worst | mean - base's | SE |",
              "|---|---:|---|---:|---:|---:|---:|---:|"]
    base = list(by_recipe.get("base", {}).values())
    for recipe, per_seed in by_recipe.items():
        xs = [per_seed[s] for s in sorted(per_seed)]
        vs = (f"{mean(xs) - mean(base):+.1f} | {math.sqrt(seeds_se(xs) ** 2 + seeds_se(base) ** 2):.1f}"
              if recipe != "base" and base else "- | -")
        lines.append(f"| {recipe} | {len(xs)} | {', '.join(f'{x:+.1f}' for x in xs)} | {mean(xs):+.1f} | "
                     f"{seeds_se(xs):.1f} | {min(xs):+.1f} | {vs} |")
    lines += ["", "| recipe | seeds | RL - BC at T = 1, mean [95% t-interval over seeds] | RL - filtered BC, the same | "
              "seeds with RL - BC >= +5 at >= 3 SE | seeds above the filtered BC |", "|---|---:|---|---|---:|---:|"]
    for recipe, per_seed in by_recipe.items():
        xs, fs = list(per_seed.values()), list(vs_filtered[recipe].values())
        lines.append(f"| {recipe} | {len(xs)} | {interval(xs)} | {interval(fs)} | {targets[recipe][0]} of {len(xs)} | "
                     f"{targets[recipe][1]} of {len(xs)} |")
    text = "\n".join(lines) + "\n"
    (out / a.split / "seeds.md").write_text(text)
    print(text)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * len(by_recipe), 3.2))
    for k, (recipe, per_seed) in enumerate(by_recipe.items()):
        xs = list(per_seed.values())
        ax.scatter([k] * len(xs), xs, color="tab:blue", zorder=3)
        ax.errorbar([k + 0.15], [mean(xs)], yerr=[2 * seeds_se(xs) if len(xs) > 1 else 0], fmt="o", color="black",
                    capsize=3, zorder=3)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(range(len(by_recipe)), list(by_recipe))
    ax.set_ylabel("RL - BC, points (T = 1)")
    ax.set_title(f"each seed (blue), mean +- 2 SE (black), {a.split} pages", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / a.split / "seeds.png", dpi=120)


if __name__ == "__main__":
    main()
