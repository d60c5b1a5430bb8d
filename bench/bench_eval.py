"""Benchmark: what batch-invariant evaluation costs (eval.py --batch-invariant, the HF backend on a CPU decoding in
float64 and rounding the logits to float32) against float32 decoding, whose responses depend on the batch.

The same evaluation (make demo's tasks, validation pages, T = 1 with common noise, at most 6 interactions of 64
tokens, --concurrency 8, no screenshots) runs with and without --batch-invariant, alternating ABBA so that a
drift of the shared box falls on both; prints each run's wall seconds, the ratio of the medians, and how many
episodes differ between the two decodings (float32 rounding against float64: the near-ties of a tiny model).

Run:
    .venv/bin/python bench/bench_eval.py --model runs/demo/bc/hf --pages 5
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import eval as ev  # noqa: E402
import trainlib  # noqa: E402

TASKS = ("miniwob:click-widget,email-inbox-reply,email-inbox-forward-nl,navigate-tree,email-inbox-star-reply,"
         "email-inbox-noscroll,email-inbox-forward-nl-turk,click-option")


def run(model: str, pages: int, invariant: bool, out: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    ev.main(trainlib.parse_args(ev.Args, [
        "--model", f"m={model}", "--tasks", TASKS, "--episodes", str(pages), "--seed-start", "500000",
        "--prompt", "short", "--max-new-tokens", "64", "--max-steps", "6", "--concurrency", "8", "--no-screenshots",
        "--out", str(out), "--batch-invariant" if invariant else "--no-batch-invariant"]))
    seconds = time.perf_counter() - t0
    episodes = {(r["task"], r["seed"]): ([s["response"] for s in r["steps"]], r["reward"])
                for r in map(json.loads, (out / "trajectories.jsonl").read_text().splitlines())}
    return seconds, episodes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="assets/tiny-web-base")
    ap.add_argument("--pages", type=int, default=5, help="validation pages per task")
    a = ap.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    seen: dict[bool, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, invariant in enumerate((True, False, False, True)):
            s, seen[invariant] = run(a.model, a.pages, invariant, Path(tmp) / str(k))
            times[invariant].append(s)
            print(f"run {k}: {'float64 (batch-invariant)' if invariant else 'float32'} {s:.1f} s", flush=True)
    f64, f32 = statistics.median(times[True]), statistics.median(times[False])
    differ = sum(seen[True][p] != seen[False].get(p) for p in seen[True])
    print(f"\nmodel {a.model}, {a.pages} pages x 8 tasks at T = 1: float32 {f32:.1f} s, float64 {f64:.1f} s "
          f"(medians of 2): batch-invariant decoding x{f64 / f32:.2f} the wall time; "
          f"{differ} of {len(seen[True])} episodes differ between the two")


if __name__ == "__main__":
    main()
