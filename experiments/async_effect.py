"""Issue 100, item 6: the table of experiments/async_effect.sh, one step off (async-sS, --async-steps 1) against
today's step (issue 87's rl-sS, K = 0) from the same reference BC in the same seeds, on the 400 findings pages, at
budget 6 (make demo's): T = 1 (the mean of the two samples, common random numbers) and greedy, each seed's RL - BC
for both K and the paired difference K = 1 - K = 0 with its page-level SE, then pooled over the seeds (each page's
difference averaged over them, +- the SE over the pages) with the plan's rule, and the seeds' mean of the per-seed
differences with its 95% t-interval; beside them what each run's rollouts did (success in its first and last 4
steps, the share of tokens whose behaviour weight left [1/2, 2]). The numbers are the ledger's (experiments/ledger.py
checks the ones docs/training.md writes). Markdown on stdout.

    .venv/bin/python experiments/async_effect.py      (the committed evidence)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ledger import (EVIDENCE, GREEDY, T1, Outcomes, interval, load, load_metrics, pm, pooled,  # noqa: E402
                    within)


def rollouts(name: str) -> tuple[str, str]:
    """A run's rollout success in its first and last 4 steps, and the mean share of its action tokens whose
    behaviour weight left [1/2, 2] (mismatch/ratio_outside), from its committed metrics."""
    rows = [r for r in load_metrics(EVIDENCE / f"{name}_metrics.jsonl") if "rollout/success_rate" in r]
    first, last = (sum(r["rollout/success_rate"] for r in part) / len(part) for part in (rows[:4], rows[-4:]))
    outside = [r["mismatch/ratio_outside"] for r in rows if "mismatch/ratio_outside" in r]
    return f"{100 * first:.0f} -> {100 * last:.0f}", f"{100 * sum(outside) / len(outside):.2f}%" if outside else "-"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    k0, k1 = load("issue87_outcomes.jsonl.gz")["test"], load("issue100_async_outcomes.jsonl.gz")["test"]
    ev = within(Outcomes([r for o in (k0, k1) for rows in o.by_run.values() for r in rows]), 6)
    runs = sorted(int(r.rsplit("-s", 1)[1]) for r in k1.by_run if r.startswith("async-s"))
    pages = len({(r["task"], r["seed"]) for r in ev.episodes("bc", GREEDY)})
    out = [f"Findings pages: {pages} (seeds 2000000.., 50 a task), budget 6; K = 0 is issue 87's rl-sS, K = 1 the "
           "same command with --async-steps 1; differences paired by page, +- one SE.", "",
           "| seed | K = 1 T = 1 | K = 1 greedy | RL - BC T = 1, K = 0 / K = 1 | RL - BC greedy, K = 0 / K = 1 | "
           "K1 - K0 T = 1 | K1 - K0 greedy | rollout success first -> last 4 steps, K = 0 / K = 1 | weights "
           "outside [1/2, 2], K = 0 / K = 1 |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in runs:
        a, b = f"async-s{s}", f"rl-s{s}"
        (r0, w0), (r1, w1) = rollouts(f"issue87_{b}"), rollouts(f"issue100_{a}")
        out.append(f"| {s} | {ev.rate(a)[0]:.1f} | {ev.rate(a, GREEDY)[0]:.1f} | "
                   f"{pm(ev.diff(b, 'bc'))} / {pm(ev.diff(a, 'bc'))} | "
                   f"{pm(ev.diff(b, 'bc', GREEDY))} / {pm(ev.diff(a, 'bc', GREEDY))} | {pm(ev.diff(a, b))} | "
                   f"{pm(ev.diff(a, b, GREEDY))} | {r0} / {r1} | {w0} / {w1} |")
    out.append("")
    pairs, holds = [(f"async-s{s}", f"rl-s{s}") for s in runs], True
    for dec in (T1, GREEDY):
        m, se = pooled(ev, pairs, dec)
        holds = holds and m > -2 * se
        by_seed = [ev.diff(a, b, dec)[0] for a, b in pairs]
        out.append(f"- {dec}: K = 1 - K = 0 pooled over {len(runs)} seeds {m:+.1f} +- {se:.1f} (page-level SE), "
                   f"{'not ' if m > -2 * se else ''}below -2 SE; by seed, mean {interval(by_seed)}")
    out.append(f"\nBy the plan's rule K = 1 {'holds' if holds else 'does not hold'} (the pooled difference above -2 "
               "SE at T = 1 and greedy; a pass says no loss this n can see, not that the two are equal).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
