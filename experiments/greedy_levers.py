"""Issue 99, item 2: the levers' table of experiments/greedy_levers.sh, each arm beside the reference BC and make demo's
recipe without a lever (rl-s0) from the diagnosis's evidence, on the same 240 validation pages: greedy success and
T = 1 success over samples 0-3 (the common noise both evaluations drew), paired differences with their page-level
SE, greedy flips by BC's class (from the diagnosis's K = 8), and the plan's rule. Markdown on stdout.

    .venv/bin/python experiments/greedy_levers.py experiments/evidence/issue99_diagnosis_outcomes.jsonl.gz \
        experiments/evidence/issue99_levers_outcomes.jsonl.gz
"""
import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from greedy_diagnosis import CLASSES, load, outcomes  # noqa: E402   (the diagnosis's reader and page classes)

K = 4               # samples per page at T = 1 in the levers' evaluations (the first K of the diagnosis's 8)
CONTROLS = {"demo-log": "bc-log-more", "demo-clean": "bc-clean-more"}


def paired(a: dict, b: dict, pages: list) -> tuple[float, float]:
    """Mean and SE (pages) of a - b in points; a, b: page -> value in [0, 1]."""
    d = [a[p] - b[p] for p in pages]
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / max(len(d) - 1, 1)
    return 100 * mean, 100 * math.sqrt(var / len(d))


def fmt(m_se: tuple[float, float]) -> str:
    return f"{m_se[0]:+.1f} +- {m_se[1]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("diagnosis", type=Path, help="the diagnosis's evidence (bc, rl-s0) or its evaluations' folder")
    ap.add_argument("levers", type=Path, help="the levers' evidence, or their evaluations' folder (runs/levers/valid)")
    a = ap.parse_args()
    diag, levers = load(a.diagnosis), load(a.levers)
    bc_g, bc_t8 = outcomes(diag["bc"])
    pages = sorted(bc_g)
    cls = {p: "solved" if bc_g[p] else "reachable" if any(bc_t8[p]) else "unreached" for p in pages}
    greedy, t1 = {}, {}
    for name, episodes in [("bc", diag["bc"]), ("rl-s0", diag["rl-s0"]), *sorted(levers.items())]:
        g, t = outcomes(episodes)
        assert set(g) == set(pages) and all(len(t[p]) >= K for p in pages), name
        greedy[name] = {p: float(g[p]) for p in pages}
        t1[name] = {p: sum(t[p][:K]) / K for p in pages}
    n = len(pages)
    out = [f"Validation pages: {n} (seeds 500000.., 30 a task), greedy and T = 1 over samples 0-{K - 1} (common "
           "random numbers); differences paired by page, +- one SE; flips against BC's greedy by BC's class "
           "(solved / reachable / unreached at pass@8).", "",
           "| run | greedy | T = 1 | greedy - BC | greedy - rl-s0 | T = 1 - rl-s0 | losses on solved | wins on "
           "reachable | wins on unreached |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in greedy:
        flips = {c: (sum(greedy[name][p] > bc_g[p] for p in pages if cls[p] == c),
                     sum(greedy[name][p] < bc_g[p] for p in pages if cls[p] == c)) for c in CLASSES}
        vs_rl = "-" if name == "rl-s0" else fmt(paired(greedy[name], greedy["rl-s0"], pages))
        t_rl = "-" if name == "rl-s0" else fmt(paired(t1[name], t1["rl-s0"], pages))
        out.append(f"| {name} | {100 * sum(greedy[name].values()) / n:.1f} | {100 * sum(t1[name].values()) / n:.1f} | "
                   f"{'-' if name == 'bc' else fmt(paired(greedy[name], greedy['bc'], pages))} | {vs_rl} | {t_rl} | "
                   f"{flips['solved'][1]} | {flips['reachable'][0]} | {flips['unreached'][0]} |")
    verdicts = []
    for name in levers:
        if name in CONTROLS.values():
            continue
        g, se = paired(greedy[name], greedy["rl-s0"], pages)
        t, tse = paired(t1[name], t1["rl-s0"], pages)
        ok = g >= 2 * se and t >= -2 * tse
        why = [f"greedy - rl-s0 {g:+.1f} (2 SE: {2 * se:.1f})", f"T = 1 - rl-s0 {t:+.1f} (2 SE: {2 * tse:.1f})"]
        if name in CONTROLS and CONTROLS[name] in greedy:
            c, cse = paired(greedy[name], greedy[CONTROLS[name]], pages)
            ok = ok and c >= 2 * cse
            why.append(f"greedy - {CONTROLS[name]} {c:+.1f} (2 SE: {2 * cse:.1f})")
        elif name in CONTROLS:
            ok = False
            why.append(f"its control {CONTROLS[name]} not measured")
        verdicts.append(f"- {name}: {'a candidate' if ok else 'not a candidate'} ({'; '.join(why)})")
    out += ["", "By the plan's rule (a candidate for item 3's five seeds):", *verdicts]
    print("\n".join(out))


if __name__ == "__main__":
    main()
