"""The paired SE of RL - BC against samples per page and common random numbers (experiments/eval_precision.sh).

    .venv/bin/python experiments/eval_precision.py runs/eval_precision [400]

Reads OUT/common (bc and rl, common noise, K samples and greedy) and OUT/independent (rl-indep: the rl weights
with their own noise); prints, for the first k = 1..K samples of each page, RL - BC and its paired SE with common
and with independent noise, on the pages evaluated and scaled to N pages (default 400, make demo's)."""
import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import eval_stats as ev  # noqa: E402  (the statistics of eval.py)


def records(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "trajectories.jsonl").read_text().splitlines()]


def main(out: str, scale_to: int = 400) -> None:
    out_dir = Path(out)
    both = records(out_dir / "common") + records(out_dir / "independent")
    recs = [r for r in both if r["decoding"] != "greedy"]
    greedy = [r for r in records(out_dir / "common") if r["decoding"] == "greedy"]
    K = max(r["sample"] for r in recs) + 1
    pages = len({(r["task"], r["seed"]) for r in recs})
    f = math.sqrt(pages / scale_to)
    print(f"RL - BC at T = 1 on {pages} validation pages, the first k samples of each page; SE scaled to "
          f"{scale_to} pages in brackets (x {f:.3f})\n")
    print(f"| k | BC | RL | RL - BC, common noise | SE | SE at {scale_to} | RL - BC, independent | SE | "
          f"SE at {scale_to} |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for k in range(1, K + 1):
        mine = [r for r in recs if r["sample"] < k]
        sr = {run: ev.summarize([r for r in mine if r["run"] == run], [6])[run]["overall"]["success_rate"]
              for run in ("bc", "rl")}
        c = ev.paired(mine, ["bc", "rl"])["rl - bc"]
        i = ev.paired(mine, ["bc", "rl-indep"])["rl-indep - bc"]
        print(f"| {k} | {100 * sr['bc']:.1f} | {100 * sr['rl']:.1f} | {100 * c['diff']:+.1f} | "
              f"{100 * c['stderr']:.2f} | {100 * c['stderr'] * f:.2f} | {100 * i['diff']:+.1f} | "
              f"{100 * i['stderr']:.2f} | {100 * i['stderr'] * f:.2f} |")
    g = ev.paired(greedy, ["bc", "rl"])["rl - bc"]
    print(f"\nGreedy (one answer per page): RL - BC {100 * g['diff']:+.1f} +- {100 * g['stderr']:.2f} "
          f"({100 * g['stderr'] * f:.2f} at {scale_to} pages), n = {g['n']} pages.")
    envs = sum(r["env_errors"] for r in recs + greedy)
    print(f"Browser errors (env_errors): {envs} of {len(recs) + len(greedy)} episodes.")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="experiments/eval_precision.sh's OUT (its common/ and independent/ evaluations)")
    ap.add_argument("scale_to", nargs="?", type=int, default=400, help="pages the SE is scaled to (make demo's 400)")
    args = ap.parse_args()
    main(args.out, args.scale_to)
