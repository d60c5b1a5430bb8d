"""Rollouts beside the update (issue 100): make demo's M-GRPO step at ``--async-steps 0`` against ``1``, side by side.

Each run is ``train_mgrpo.py`` itself, in a process of its own, with make demo's recipe (B 8 x G 8, lr 1e-4 after
4 warm-up steps, micro-batches of 16, the invalid-action penalty, pages restarted in place, <= 6 interactions of
64 tokens; scripts/demo_common.sh) from ``--model``, for ``--steps`` steps, and each configuration's own flags
(``--configs``); the runs go in ``--order`` (A B B A by default) so that a busy moment of the shared box falls on
both alike. From each run's metrics.jsonl: trajectories per minute over the steps between the first and the last (the
first holds the start-up and, at K = 1, its batch rolled with nothing beside it; the last, at K = 1, its update with
no next batch beside it), and the median seconds a step's trainer waited
for its batch (``rollout/seconds``: at K = 1 what the update did not hide), the update's (``train/seconds``) and, at
K = 1, how long a finished batch waited for the update (``async/rollouts_waited_seconds``). ``--action-delay 3``
waits 3 s after every browser action, VAB's latency at the paper's scale, where the rollouts' side mostly waits; the
overlap's limit there is a step of max(rollouts, update).

    .venv/bin/python bench/bench_async.py --model experiments/evidence/reference_bc --steps 5
    .venv/bin/python bench/bench_async.py --steps 5 --order k0,k1t1,k1t1,k0 \
        --configs "k0=--async-steps 0;k1t1=--async-steps 1 --update-threads 1"
    .venv/bin/python bench/bench_async.py --steps 4 --action-delay 3
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from demo_tasks import DEMO_TASKS  # noqa: E402  (bench/, the script's own directory)

from trainlib import cli  # noqa: E402


@dataclass
class Args:
    """make demo's M-GRPO step at --async-steps 0 and 1, A B B A: trajectories per minute and where each side waits."""
    model: str = "experiments/evidence/reference_bc"
    """the policy to train from (the committed reference BC: make demo's BC)"""
    steps: int = 5
    """M-GRPO steps per run (>= 3; the first and the last are not timed)"""
    action_delay: float = 0.0
    """seconds to wait after every browser action (the paper's latency: VAB's 3 s)"""
    configs: str = "k0=--async-steps 0;k1=--async-steps 1"
    """';'-separated NAME=FLAGS: each configuration's train_mgrpo.py flags beyond make demo's recipe (the first is
    the baseline of the ratios)"""
    order: str = "k0,k1,k1,k0"
    """the runs, by configuration name, in turn"""


cli.answer_help(Args, __name__)

RECIPE = ["--tasks", DEMO_TASKS, "--tasks-per-step", "8", "--group-size", "8", "--lr", "1e-4", "--warmup-steps", "4",
          "--micro-batch", "16", "--beta", "0.001", "--max-turns", "6", "--max-new-tokens", "64", "--prompt", "short",
          "--save-every", "0", "--grad-clip", "1", "--adam-beta2", "0.999", "--invalid-penalty", "0.1",
          "--miniwob-in-place"]


def one_run(args: Args, flags: list[str], out: Path) -> dict[str, float]:
    """One train_mgrpo.py run with ``flags`` into ``out``; its figures."""
    cmd = [sys.executable, str(ROOT / "train_mgrpo.py"), "--model", args.model, "--out", str(out), "--steps",
           str(args.steps), "--action-delay", str(args.action_delay), *RECIPE, *flags]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 1]
    timed = steps[1:-1]   # steady steps: not the first (start-up) nor the last (K = 1: no next batch beside its update)
    n = 8 * 8 * len(timed)   # B x G a step (no dynamic sampling)
    med = lambda key: statistics.median(r.get(key, 0.0) for r in timed)   # noqa: E731
    return {"traj_per_min": 60 * n / (timed[-1]["time"] - steps[0]["time"]), "wait_batch": med("rollout/seconds"),
            "update": med("train/seconds"), "batch_waited": med("async/rollouts_waited_seconds")}


def main(args: Args) -> None:
    configs = dict(item.split("=", 1) for item in filter(None, (c.strip() for c in args.configs.split(";"))))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(args.order.split(",")):
            t0 = time.time()
            runs[name].append(one_run(args, configs[name].split(), Path(tmp) / f"run{i}-{name}"))
            print(f"run {i + 1}: {name} ({configs[name]}): {runs[name][-1]} ({time.time() - t0:.0f} s)", flush=True)
    print(f"\nmake demo's M-GRPO step from {args.model}, {args.steps} steps a run (the first not timed), action delay "
          f"{args.action_delay:g} s; medians per step; runs in the order {args.order}\n")
    print("| configuration | flags | runs | trajectories / min | x the first | trainer waits for its batch, s | "
          "update, s | a finished batch waits for the update, s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    base = None
    for name, got in runs.items():
        if got:
            mean = lambda key: statistics.mean(r[key] for r in got)   # noqa: E731
            base = base or mean("traj_per_min")
            print(f"| {name} | `{configs[name]}` | {len(got)} | {mean('traj_per_min'):.1f} | "
                  f"{mean('traj_per_min') / base:.2f} | {mean('wait_batch'):.1f} | {mean('update'):.1f} | "
                  f"{mean('batch_waited'):.1f} |")


if __name__ == "__main__":
    main(cli.parse_args(Args))
