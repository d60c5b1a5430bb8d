"""Issue 70, R1-CoT: what the turns of each model show (unparsable, cut by the budget, tokens a turn, acting on
another element than its thought names), each BC's loss and token accuracy at its end, and each M-GRPO seed's
rollouts (experiments/cot_bc_limits.sh runs it after its table).

    .venv/bin/python experiments/cot_bc_limits.py SET BUDGET GROUP NAME=TRAINING_DIR ...
"""
import json
import re
import sys
from pathlib import Path

runs, budget, group = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])   # G: rollouts a task a step
named, acted = re.compile(r"click element (\d+)", re.I), re.compile(r'element="(\d+)"')


def disagree(turns):   # of the parsed turns whose thought names the element it acts on: (acting on another, all)
    pairs = [(named.findall(s["response"].split("</think>")[0]), acted.findall(s["action"] or ""))
             for s in turns if not s["parse_error"]]
    pairs = [(t[-1], a[0]) for t, a in pairs if t and a]
    return sum(t != a for t, a in pairs), len(pairs)


def turn_counts(run):
    turns = [s for line in (runs / run / "trajectories.jsonl").read_text().splitlines()
             for r in [json.loads(line)] if r["decoding"] == "T = 1" for s in r["steps"]]
    bad = sum(bool(s["parse_error"]) for s in turns)
    cut = sum(s["finish_reason"] == "length" for s in turns)
    tokens = sum(s["response_tokens"] for s in turns) / len(turns)
    other, said = disagree(turns)
    return (f"{run}: {len(turns)} turns at T = 1, unparsable {100 * bad / len(turns):.1f}%, ended at the "
            f"{budget}-token budget {100 * cut / len(turns):.1f}%, {tokens:.0f} new tokens a turn, acting on another "
            f"element than its thought names in {other} of {said}")


def rollouts(metrics):   # an M-GRPO run's steps: groups of equal rewards, and each task's successes of its rollouts
    steps = [m for m in metrics if "rollout/frac_zero_std" in m]
    tasks = sorted({k for m in steps for k in m if k.startswith("rollout/success/")})
    wins = {t.split("/")[-1]: round(sum(m.get(t, 0) * group for m in steps)) for t in tasks}
    seen = {t.split("/")[-1]: group * sum(t in m for m in steps) for t in tasks}
    equal = sum(m["rollout/frac_zero_std"] for m in steps) / len(steps)
    first, last = (sum(m["rollout/success_rate"] for m in part) / len(part) for part in (steps[:8], steps[-8:]))
    return (f"{len(steps)} steps, rollout success {100 * first:.1f}% in the first 8 and {100 * last:.1f}% in the last "
            f"8, groups of equal rewards {100 * equal:.1f}%; rollouts succeeding by task: "
            + ", ".join(f"{t} {wins[t]}/{seen[t]}" for t in wins))


for arg in sys.argv[4:]:
    run, train_dir = arg.split("=", 1)
    metrics = [json.loads(line) for line in (Path(train_dir) / "metrics.jsonl").read_text().splitlines()]
    if run.startswith(("rl-s", "cot-rl-s")):
        evaluated = (runs / run / "trajectories.jsonl").is_file()
        head = turn_counts(run) + "; " if evaluated else f"{run} (make demo's recipe): "
        print(head + "its M-GRPO training's " + rollouts(metrics))
        continue
    rows = metrics[-20:]
    loss, acc = (sum(m[k] for m in rows) / len(rows) for k in ("train/loss", "train/action_token_acc"))
    print(f"{turn_counts(run)}; its BC's last 20 steps: loss {loss:.3f}, token accuracy {100 * acc:.1f}%")
