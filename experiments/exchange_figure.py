"""The exchange rate between demonstrations and RL trajectories (issue 57, item 3): the table and figure of
``experiments/demo_exchange.sh test`` from its held-out table (``OUT/test/table/results.json``), the BCs rule 2
chose (``OUT/nN/chosen``) and the training minutes (``OUT/minutes.tsv``).

    .venv/bin/python experiments/exchange_figure.py --out runs/exchange

Prints one row per model (demonstrations, RL trajectories, minutes of training, success at T = 1 and greedy, the
paired difference to BC on 20 per task) and, for every RL budget, the N at which BC's curve (linear between the
measured N) reaches RL's success at T = 1, and what one demonstration is worth in trajectories there. Draws
``OUT/exchange.png``: success against demonstrations per task, and against minutes of this box."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

TASKS = 8          # make demo's tasks: demonstrations = N x 8, and every RL step rolls out 8 tasks x 8
RL_STEPS = 128     # demo_exchange.sh's RL run


def crossing(bc: list[tuple[int, float]], target: float) -> float | None:
    """The N where BC's curve, linear between measured points (sorted by N), first reaches ``target``; None if
    it never does."""
    for (n0, s0), (n1, s1) in zip(bc, bc[1:]):
        if s0 < target <= s1:
            return n0 + (target - s0) / (s1 - s0) * (n1 - n0)
    return None


def load(out: Path) -> list[dict]:
    """The rows of the held-out table: name, N or trajectories, T = 1 and greedy success, the paired difference,
    and the training minutes (from minutes.tsv)."""
    table = json.loads((out / "test" / "table" / "results.json").read_text())
    seconds = {}
    for line in (out / "minutes.tsv").read_text().splitlines() if (out / "minutes.tsv").exists() else []:
        name, secs = line.split("\t")
        seconds[name] = float(secs)
    rows = []
    for name, run in table["runs"].items():
        greedy = table["greedy"]["runs"][name]["overall"]["success_rate"]
        paired = table["paired"].get(f"{name} - n20", {})
        row = {"name": name, "sr": run["overall"]["success_rate"], "se": run["overall"]["stderr"], "greedy": greedy,
               "diff": paired.get("diff"), "diff_se": paired.get("stderr")}
        if m := re.fullmatch(r"n(\d+)", name):
            n = int(m[1])
            steps = (out / f"n{n}" / "chosen").read_text().strip()          # bc300, bc600, ...
            row.update(demos=n, trajectories=0, minutes=seconds.get(f"bc-n{n}-s{steps[2:]}", float("nan")) / 60)
        elif m := re.fullmatch(r"rl-s(\d+)-(\d+)", name):
            seed, traj = int(m[1]), int(m[2])
            share = traj / (RL_STEPS * TASKS * 8)           # the checkpoint's share of its run's wall time
            rl_seconds = seconds.get(f"rl-s{seed}", float("nan"))
            row.update(demos=20, trajectories=traj, seed=seed,
                       minutes=(seconds.get("bc-n20-s300", float("nan")) + share * rl_seconds) / 60)
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/exchange", help="demo_exchange.sh's output directory")
    args = p.parse_args()
    out = Path(args.out)
    rows = load(out)
    print("| model | demonstrations per task | RL trajectories | training minutes | SR, T = 1 | SE | SR, greedy |"
          " vs BC on 20 (T = 1, paired) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        diff = "" if r["diff"] is None else f"{100 * r['diff']:+.1f} +- {100 * r['diff_se']:.1f}"
        print(f"| {r['name']} | {r['demos']} | {r['trajectories']} | {r['minutes']:.1f} | {100 * r['sr']:.1f} |"
              f" {100 * r['se']:.1f} | {100 * r['greedy']:.1f} | {diff} |")
    bc = sorted((r["demos"], r["sr"]) for r in rows if r["trajectories"] == 0)
    base = next(r for r in rows if r["name"] == "n20")
    budgets = sorted({r["trajectories"] for r in rows if r["trajectories"]})
    print()
    for traj in budgets:
        runs = [r for r in rows if r["trajectories"] == traj]
        sr = sum(r["sr"] for r in runs) / len(runs)
        n = crossing(bc, sr)
        what = f"{traj} trajectories (mean of {len(runs)} seed{'s' * (len(runs) > 1)}): SR {100 * sr:.1f}"
        if sr < base["sr"] + base["se"] or n is None or n <= 20:
            print(f"{what}, not above BC on 20 by 1 SE: no exchange rate")
        else:
            print(f"{what} = BC on {n:.0f} per task: one demonstration ~ {traj / ((n - 20) * TASKS):.1f} trajectories")
    draw(rows, out / "exchange.png")


def draw(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    bc = sorted((r for r in rows if r["trajectories"] == 0), key=lambda r: r["demos"])
    rl = [r for r in rows if r["trajectories"]]
    left.errorbar([r["demos"] for r in bc], [100 * r["sr"] for r in bc], [100 * r["se"] for r in bc], marker="o",
                  label="BC (clean demonstrations)")
    for traj in sorted({r["trajectories"] for r in rl}):
        sr = [100 * r["sr"] for r in rl if r["trajectories"] == traj]
        left.axhline(sum(sr) / len(sr), ls="--", lw=1, color=f"C{1 + len(left.lines)}",
                     label=f"M-GRPO from BC on 20, {traj} trajectories")
    left.set(xscale="log", xlabel="demonstrations per task", ylabel="success at T = 1 (%, held-out)")
    left.set_xticks([r["demos"] for r in bc], [str(r["demos"]) for r in bc])
    left.minorticks_off()
    left.legend(fontsize=7)
    right.plot([r["minutes"] for r in bc], [100 * r["sr"] for r in bc], "o-", label="BC")
    for seed in sorted({r["seed"] for r in rl}):
        pts = sorted((r["minutes"], 100 * r["sr"]) for r in rl if r["seed"] == seed)
        right.plot(*zip(*pts), "s--", label=f"M-GRPO, seed {seed}")
    right.set(xlabel="training minutes on a 2-core CPU", ylabel="success at T = 1 (%, held-out)")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
