"""The two computations of experiments/demo_candidates.sh (the demo's task-selection protocol, docs/history.md
"Choosing the demo's tasks"): the candidates, every MiniWoB++ task with a scripted expert but the saturated
ones, and the rule that picks 8 of them from BC's validation success.

    .venv/bin/python experiments/demo_candidates.py candidates miniwob:TASK,...    # -> miniwob:TASK,...
    .venv/bin/python experiments/demo_candidates.py choose runs/candidates/val/results.json
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the project's modules (experts.py)


def candidates(saturated: str) -> str:
    import experts
    demo = set(saturated.split(":", 1)[1].split(","))
    return "miniwob:" + ",".join(sorted(set(experts.EXPERTS) - demo))


def choose(results_json: str) -> None:
    """The 8 tasks with validation success in [20%, 70%] closest to 45% (ties by name); fewer: [10%, 80%]."""
    res = json.load(open(results_json))
    per_task = {t.split("/", 1)[1]: v["success_rate"] for t, v in res["runs"]["bc"]["tasks"].items()}

    def pick(lo, hi):
        ok = [t for t, s in per_task.items() if lo <= s <= hi]
        return sorted(ok, key=lambda t: (round(abs(per_task[t] - 0.45), 9), t))[:8]   # exact ties: k/30 rates
    for lo, hi in ((0.2, 0.7), (0.1, 0.8)):
        chosen = pick(lo, hi)
        if len(chosen) == 8:
            break
    for t in sorted(per_task, key=lambda t: (-per_task[t], t)):
        print(f"{t:32s} {100 * per_task[t]:5.1f}{'  <- chosen' if t in chosen else ''}")
    print(f"window [{lo:.0%}, {hi:.0%}]: {len(chosen)} chosen")
    print("miniwob:" + ",".join(chosen))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("candidates", help="print the candidates: every task with a scripted expert but these").add_argument(
        "saturated", help="miniwob:TASK,... the saturated tasks")
    sub.add_parser("choose", help="print the 8 tasks the rule picks").add_argument(
        "results_json", help="eval.py's results.json of BC on the candidates' validation pages")
    a = ap.parse_args()
    if a.command == "candidates":
        print(candidates(a.saturated))
    else:
        choose(a.results_json)
