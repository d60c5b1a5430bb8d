"""Issue 100, item 6: the table of experiments/async_effect.sh, one step off (async-sS, --async-steps 1) against
today's step (issue 87's rl-sS, K = 0) from the same reference BC in the same seeds, on the 400 findings pages, at
budget 6 (make demo's): T = 1 (the mean of the two samples, common random numbers) and greedy, each seed's RL - BC
for both K and the paired difference K = 1 - K = 0 with its page-level SE, then pooled over the seeds (each page's
difference averaged over them, +- the SE over the pages) with the plan's rule; beside it the seeds' mean of the
per-seed differences with their 95% t-interval, and what each run's rollouts did (success in its first and last
4 steps, the share of tokens whose behaviour weight left [1/2, 2]). Markdown on stdout.

    .venv/bin/python experiments/async_effect.py      (the committed evidence; or give the two files)
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from eval_stats import across_seeds, read_outcomes, solved_within  # noqa: E402

EVIDENCE = ROOT / "experiments" / "evidence"
BUDGET = 6          # interactions, make demo's (the evaluations ran to 12; a budget reads their first 6)


def page_values(episodes: list[dict], decoding: str) -> dict[tuple[str, int], float]:
    """page -> success within BUDGET interactions, averaged over the page's samples of ``decoding``."""
    acc: dict[tuple[str, int], list[bool]] = {}
    for r in episodes:
        if r["decoding"] == decoding:
            acc.setdefault((r["task"], r["seed"]), []).append(solved_within(r, BUDGET))
    return {p: sum(v) / len(v) for p, v in acc.items()}


def paired(diffs: list[float]) -> tuple[float, float]:
    """Mean and SE of per-page differences, in points."""
    mean = sum(diffs) / len(diffs)
    var = sum((x - mean) ** 2 for x in diffs) / max(len(diffs) - 1, 1)
    return 100 * mean, 100 * math.sqrt(var / len(diffs))


def fmt(m_se: tuple[float, float]) -> str:
    return f"{m_se[0]:+.1f} +- {m_se[1]:.1f}"


def rollouts(metrics: Path) -> str:
    """The run's rollout success in its first and last 4 steps, and the mean share of tokens whose behaviour
    weight left [1/2, 2] (mismatch/ratio_outside)."""
    rows = [json.loads(x) for x in metrics.read_text().splitlines()]
    rows = [r for r in rows if "rollout/success_rate" in r]
    first, last = (sum(r["rollout/success_rate"] for r in part) / len(part) for part in (rows[:4], rows[-4:]))
    outside = [r["mismatch/ratio_outside"] for r in rows if "mismatch/ratio_outside" in r]
    share = f"{100 * sum(outside) / len(outside):.2f}%" if outside else "-"
    return f"{100 * first:.0f} -> {100 * last:.0f} | {share}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("k0", nargs="?", type=Path, default=EVIDENCE / "issue87_outcomes.jsonl.gz",
                    help="K = 0's evidence (bc, rl-sS)")
    ap.add_argument("k1", nargs="?", type=Path, default=EVIDENCE / "issue100_async_outcomes.jsonl.gz",
                    help="K = 1's evidence (async-sS)")
    a = ap.parse_args()
    runs: dict[str, list[dict]] = {}
    for path in (a.k0, a.k1):
        for r in read_outcomes(path)[1]:
            runs.setdefault(r["run"], []).append(r)
    seeds = sorted(int(n.split("-s")[1]) for n in runs if n.startswith("async-s"))
    value = {(n, d): page_values(runs[n], d) for n in ["bc", *(f"{p}-s{s}" for s in seeds for p in ("rl", "async"))]
             for d in ("T = 1", "greedy")}
    pages = sorted(value["bc", "greedy"])
    out = [f"Findings pages: {len(pages)} (seeds 2000000.., 50 a task), budget {BUDGET}; K = 0 is issue 87's rl-sS, "
           "K = 1 the same command with --async-steps 1; differences paired by page, +- one SE.", "",
           "| seed | K = 1 T = 1 | K = 1 greedy | RL - BC T = 1, K = 0 / K = 1 | RL - BC greedy, K = 0 / K = 1 | "
           "K1 - K0 T = 1 | K1 - K0 greedy | rollout success first -> last 4 steps, K = 0 / K = 1 | weights "
           "outside [1/2, 2], K = 0 / K = 1 |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    per_seed = {d: [] for d in ("T = 1", "greedy")}
    pooled = {d: {p: 0.0 for p in pages} for d in per_seed}
    for s in seeds:
        k0, k1, cells = f"rl-s{s}", f"async-s{s}", []
        for d in per_seed:
            diff = [value[k1, d][p] - value[k0, d][p] for p in pages]
            per_seed[d].append(paired(diff))
            for p, x in zip(pages, diff):
                pooled[d][p] += x / len(seeds)
        rl_bc = {d: " / ".join(fmt(paired([value[n, d][p] - value["bc", d][p] for p in pages])) for n in (k0, k1))
                 for d in per_seed}
        k0m, k1m = (rollouts(EVIDENCE / f"issue{i}_{n}_metrics.jsonl").split(" | ") for i, n in ((87, k0), (100, k1)))
        cells = [f"{100 * sum(value[k1, d].values()) / len(pages):.1f}" for d in per_seed]
        out.append(f"| {s} | {' | '.join(cells)} | {rl_bc['T = 1']} | {rl_bc['greedy']} | "
                   f"{fmt(per_seed['T = 1'][-1])} | {fmt(per_seed['greedy'][-1])} | {k0m[0]} / {k1m[0]} | "
                   f"{k0m[1]} / {k1m[1]} |")
    out.append("")
    holds = True
    for d in per_seed:
        m, se = paired(list(pooled[d].values()))
        sm, _, half = across_seeds([x for x, _ in per_seed[d]])
        ok = m > -2 * se
        holds = holds and ok
        out.append(f"- {d}: K = 1 - K = 0 pooled over {len(seeds)} seeds {m:+.1f} +- {se:.1f} (page-level SE; the "
                   f"seeds' mean {sm:+.1f}, 95% t-interval +- {half:.1f}): {'not below' if ok else 'below'} -2 SE")
    out.append(f"\nBy the plan's rule K = 1 {'holds' if holds else 'does not hold'} (pooled difference above -2 SE at "
               "T = 1 and greedy; a pass says no loss this n can see, not that the two are equal).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
