"""Issue 99, item 1: the diagnosis table of experiments/greedy_diagnosis.sh from its evaluations (their
trajectories.jsonl): BC's pages by class (solved / reachable / unreached at greedy and pass@K), what M-GRPO does to
each class (greedy flips both ways, T = 1 success), the noise floor of a flip (two BCs), where Eq. 2's positive
advantage lands, and the limit the plan's rule names. Markdown on stdout.

    .venv/bin/python experiments/greedy_diagnosis.py runs/diag/valid 8
"""
import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from eval_stats import read_outcomes  # noqa: E402   (the evidence's reader: experiments/ledger.py --keep writes it)

CLASSES = ("solved", "reachable", "unreached")


def load(source: Path) -> dict[str, list[dict]]:
    """run -> its episodes ({"task", "seed", "sample", "decoding", "success"}), from a folder of evaluations
    (runs/diag/valid: each run's trajectories.jsonl) or from the kept evidence (ledger.py --keep's .jsonl.gz)."""
    runs: dict[str, list[dict]] = {}
    if source.is_dir():
        for d in sorted(source.iterdir()):
            if (d / "trajectories.jsonl").exists():
                runs[d.name] = [json.loads(x) for x in (d / "trajectories.jsonl").read_text().splitlines()]
    else:
        for r in read_outcomes(source)[1]:
            runs.setdefault(r["run"], []).append(r)
    return runs


def outcomes(episodes: list[dict]) -> tuple[dict, dict]:
    """(page -> greedy success, page -> [success of each T = 1 sample]) of one evaluation; a page is (task, seed)."""
    greedy, samples = {}, {}
    for r in episodes:
        page = (r["task"], r["seed"])
        if r["decoding"] == "greedy":
            greedy[page] = bool(r["success"])
        else:
            samples.setdefault(page, {})[r["sample"]] = bool(r["success"])
    return greedy, {p: [s[k] for k in sorted(s)] for p, s in samples.items()}


def positive_advantage(rewards: list[bool], eps: float = 1e-6) -> float:
    """Sum of the positive A_i = (r_i - mean) / (std + eps) of one group (the population std, as
    train_mgrpo.group_advantages): Eq. 2's push towards the group's successes."""
    r = [float(x) for x in rewards]
    mean = sum(r) / len(r)
    std = math.sqrt(sum((x - mean) ** 2 for x in r) / len(r))
    return sum(max(0.0, (x - mean) / (std + eps)) for x in r)


def pct(a: float, n: int) -> str:
    return f"{100 * a / n:.1f}" if n else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("valid", type=Path, help="the evaluations' folder (runs/diag/valid), or the kept evidence "
                    "(experiments/evidence/issue99_diagnosis_outcomes.jsonl.gz)")
    ap.add_argument("k", type=int, help="samples per page at T = 1 (8)")
    a = ap.parse_args()
    runs = load(a.valid)
    bc_g, bc_t = outcomes(runs["bc"])
    rl_g, rl_t = outcomes(runs["rl-s0"])
    half_g, _ = outcomes(runs["rl-s0-half"])
    s1_g = outcomes(runs["bc-s1"])[0] if "bc-s1" in runs else None    # the floor (missing: not measured yet)
    pages = sorted(bc_g)
    assert all(len(bc_t[p]) == a.k == len(rl_t[p]) for p in pages) and set(pages) == set(rl_g) == set(half_g)
    floor_of = s1_g or {}
    cls = {p: "solved" if bc_g[p] else "reachable" if any(bc_t[p]) else "unreached" for p in pages}
    of = {c: [p for p in pages if cls[p] == c] for c in CLASSES}
    n = len(pages)
    out = [f"Validation pages: {n} ({n // len({p[0] for p in pages})} a task, seeds 500000..), K = {a.k} samples at "
           "T = 1 per page, greedy beside them; a flip is a page whose greedy outcome changed.", "",
           "| BC's class | pages | BC T = 1 | RL T = 1 | RL greedy wins | RL greedy losses | half-way wins / losses "
           "| BC seed 1 wins / losses (the floor) | positive advantage share |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    adv = {p: positive_advantage(bc_t[p]) for p in pages}
    total_adv = sum(adv.values()) or 1.0
    stats = {}
    for c in CLASSES:
        ps = of[c]
        m = len(ps)
        wins = sum(not bc_g[p] and rl_g[p] for p in ps)
        losses = sum(bc_g[p] and not rl_g[p] for p in ps)
        half = (sum(not bc_g[p] and half_g[p] for p in ps), sum(bc_g[p] and not half_g[p] for p in ps))
        floor = (sum(not bc_g[p] and floor_of[p] for p in ps), sum(bc_g[p] and not floor_of[p] for p in ps)) \
            if s1_g else None
        bc_mean = sum(sum(bc_t[p]) / a.k for p in ps)
        rl_mean = sum(sum(rl_t[p]) / a.k for p in ps)
        share = sum(adv[p] for p in ps) / total_adv
        stats[c] = dict(m=m, wins=wins, losses=losses, floor=floor)
        out.append(f"| {c} | {m} ({pct(m, n)}%) | {pct(bc_mean, m)} | {pct(rl_mean, m)} | {wins} | {losses} | "
                   f"{half[0]} / {half[1]} | {f'{floor[0]} / {floor[1]}' if floor else '-'} | {100 * share:.1f}% |")
    g_bc, g_rl = (sum(d[p] for p in pages) for d in (bc_g, rl_g))
    out += ["", f"Greedy success: BC {pct(g_bc, n)}, RL {pct(g_rl, n)} (half-way {pct(sum(half_g.values()), n)}), "
            f"BC seed 1 {pct(sum(s1_g.values()), n) if s1_g else '-'}; T = 1: BC {pct(sum(sum(v) / a.k for v in bc_t.values()), n)}, "
            f"RL {pct(sum(sum(v) / a.k for v in rl_t.values()), n)}; pass@{a.k}: BC "
            f"{pct(sum(any(v) for v in bc_t.values()), n)}, RL {pct(sum(any(v) for v in rl_t.values()), n)}."]
    # the plan's rule
    failures = stats["reachable"]["m"] + stats["unreached"]["m"]
    verdicts = []
    if failures and stats["unreached"]["m"] >= failures / 2:
        verdicts.append(f"exploration (unreached {stats['unreached']['m']} of BC's {failures} greedy failures)")
    r, s = stats["reachable"], stats["solved"]
    if s1_g is None:
        verdicts.append("signal and forgetting not judged: the floor (bc-s1) is not measured")
    elif failures and r["m"] >= failures / 2 and r["wins"] - r["floor"][0] < r["m"] / 3:
        verdicts.append(f"signal (reachable {r['m']} of {failures} failures; RL wins {r['wins']} of them against "
                        f"the floor's {r['floor'][0]})")
    if s1_g is not None and s["m"]:
        p_rl, p_floor = s["losses"] / s["m"], s["floor"][1] / s["m"]
        se = math.sqrt((p_rl * (1 - p_rl) + p_floor * (1 - p_floor)) / s["m"])
        if p_rl - p_floor > 2 * se:
            verdicts.append(f"forgetting (RL loses {s['losses']} of {s['m']} solved pages, the floor "
                            f"{s['floor'][1]}: {100 * (p_rl - p_floor):+.1f} +- {100 * se:.1f})")
    out += ["", "By the plan's rule: " + ("; ".join(verdicts) if verdicts else "no limit named") + "."]
    print("\n".join(out))


if __name__ == "__main__":
    main()
