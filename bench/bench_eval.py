"""Benchmark of evaluation on a CPU, printed in one run, one of two modes:
- what batch-invariant evaluation costs (the default): eval.py's HF backend on a CPU three ways, the same
  evaluation (make demo's tasks, validation pages, T = 1 with common noise, at most 6 interactions of 64 tokens,
  --concurrency 8, no screenshots) each time: ``float32`` (--no-batch-invariant: responses depend on the batch),
  ``fixed`` (--batch-invariant: shapes fixed per request, ``HFBackend(invariance="auto")`` where its start-up
  check holds) and ``float64`` (--batch-invariant with the check made to fail: the float64 copy, issue 67's first
  way), in the order ABCCBA so that a drift of the shared box falls on all; prints each run's wall seconds, the
  ratios of the medians, and how many episodes differ from float32's (the near-ties of a tiny model).
- ``--concurrency 1,8,32,64``: the same evaluation as make demo runs it (each page twice at T = 1 and once greedy,
  batch-invariant) at each concurrency in turn; prints wall seconds and episodes a minute, and how many episodes
  (responses, reward, end) differ from the first concurrency's: an evaluation must not depend on it.

Run:
    .venv/bin/python bench/bench_eval.py --model runs/demo/bc/hf --pages 5
    .venv/bin/python bench/bench_eval.py --pages 6 --concurrency 1,8,32,64
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="assets/tiny-web-base")
    ap.add_argument("--pages", type=int, default=5, help="validation pages per task")
    ap.add_argument("--concurrency", default="", help="comma list: the concurrency sweep instead (e.g. 1,8,32,64)")
    return ap


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainlib import cli  # noqa: E402

cli.answer_help(parser().parse_args, __name__)   # before the imports of torch and the model stack: --help at once

from demo_tasks import DEMO_TASKS  # noqa: E402  (bench/, the script's own directory)
import eval as ev  # noqa: E402
from engines import hf_backend  # noqa: E402

TASKS = DEMO_TASKS   # make demo's 8 tasks (scripts/demo_common.sh)


def run(model: str, pages: int, invariant: bool, out: Path, concurrency: int = 8,
        extra: tuple[str, ...] = ()) -> tuple[float, dict]:
    t0 = time.perf_counter()
    ev.main(cli.parse_args(ev.Args, [
        "--model", f"m={model}", "--tasks", TASKS, "--episodes", str(pages), "--seed-start", "500000",
        "--prompt", "short", "--max-new-tokens", "64", "--max-steps", "6", "--concurrency", str(concurrency),
        "--no-screenshots", "--out", str(out), "--batch-invariant" if invariant else "--no-batch-invariant", *extra]))
    seconds = time.perf_counter() - t0
    episodes = {(r["decoding"], r["task"], r["seed"], r["sample"]):
                ([s["response"] for s in r["steps"]], [s["action_error"] for s in r["steps"]], r["reward"],
                 r["done_reason"]) for r in map(json.loads, (out / "trajectories.jsonl").read_text().splitlines())}
    return seconds, episodes


def sweep(model: str, pages: int, levels: list[int]) -> None:
    """make demo's evaluation at each concurrency in turn (see the module docstring)."""
    seen: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for c in levels:
            s, seen[c] = run(model, pages, True, Path(tmp) / f"c{c}", c, ("--samples", "2", "--greedy"))
            differ = [k for k, v in seen[c].items() if v != seen[levels[0]].get(k)]
            rows.append((c, s, len(seen[c]), differ))
            print(f"concurrency {c}: {s:.1f} s, {len(seen[c])} episodes, {len(differ)} differ from c{levels[0]}"
                  + (f" (e.g. {differ[:3]})" if differ else ""), flush=True)
    print(f"\nmodel {model}, {pages} validation pages x 8 tasks, 2 samples at T = 1 + greedy, batch-invariant:")
    print("| concurrency | wall s | episodes / min | vs first | episodes that differ from the first |")
    print("|---:|---:|---:|---:|---:|")
    for c, s, n, differ in rows:
        print(f"| {c} | {s:.1f} | {60 * n / s:.1f} | x{rows[0][1] / s:.2f} | {len(differ)} of {n} |")


def main() -> None:
    a = parser().parse_args()
    if a.concurrency:
        return sweep(a.model, a.pages, [int(c) for c in a.concurrency.split(",")])
    modes = ("float32", "fixed", "float64")
    times: dict[str, list[float]] = {m: [] for m in modes}
    seen: dict[str, dict] = {}
    check = hf_backend.HFBackend._fixed_shapes_checked
    with tempfile.TemporaryDirectory() as tmp:
        for k, mode in enumerate(modes + modes[::-1]):
            hf_backend.HFBackend._fixed_shapes_checked = check if mode == "fixed" else lambda self: False
            s, seen[mode] = run(a.model, a.pages, mode != "float32", Path(tmp) / str(k))
            times[mode].append(s)
            print(f"run {k}: {mode} {s:.1f} s", flush=True)
    hf_backend.HFBackend._fixed_shapes_checked = check
    med = {m: statistics.median(t) for m, t in times.items()}
    print(f"\nmodel {a.model}, {a.pages} pages x 8 tasks at T = 1, medians of 2:")
    print("| decoding | wall s | vs float32 | episodes that differ from float32's |")
    print("|---|---:|---:|---:|")
    for m in modes:
        differ = sum(seen[m][p][::2] != seen["float32"].get(p, ())[::2] for p in seen[m])   # responses, reward
        print(f"| {m} | {med[m]:.1f} | x{med[m] / med['float32']:.2f} | {differ} of {len(seen[m])} |")


if __name__ == "__main__":
    main()
