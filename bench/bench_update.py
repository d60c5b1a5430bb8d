"""The M-GRPO update alone, its ways side by side on the same batches: a row per sample, or each context
computed once for the actions taken from it (``train_mgrpo.update(how=...)``, ``logprobs.packed_logprobs``).

The batches are make demo's: ``--batches`` steps of B 8 x G 8 rollouts of ``--model`` on make demo's 8 tasks
(seeded, pages restarted in place, <= 6 interactions of 64 tokens, T = 1), rolled out once. Then each way updates
each batch in turn (A, B, A, B, ...: a busy moment of the shared box falls on both alike) ``--repeats`` times on
a DeepSpeed engine at lr 0 (ZeRO-0, fp32, beta 0.001 with its reference forward), so every repeat does the same
work. Printed: what a batch holds (samples, after merging identical ones, and their distinct contexts), the
tokens each way runs through the model per batch, and the seconds per batch (the median over the repeats of
the mean over the batches) with the ratio to the first way.

    .venv/bin/python bench/bench_update.py --model runs/demo/bc/hf
    .venv/bin/python bench/bench_update.py --ways packed:drop,packed --repeats 6   # what the mismatch figures cost
"""
from __future__ import annotations

import asyncio
import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from demo_tasks import DEMO_TASKS  # noqa: E402  (bench/, the script's own directory)

import env as webenv  # noqa: E402
from trainlib import cli  # noqa: E402
from rollout import EpisodeConfig, Job, Runner, group_noise, rollouts  # noqa: E402


@dataclass
class Args:
    """The M-GRPO update's ways side by side on the same batches of make demo's shape."""
    model: str = "tiny"
    """policy: an HF checkpoint such as runs/demo/bc/hf (realistic), or tiny"""
    tasks: str = DEMO_TASKS
    """tasks (make demo's 8 by default); the groups of a batch take them in turn"""
    ways: str = "rows,packed"
    """train_mgrpo.update's ``how``, comma-separated; the first is the reference of the ratios; ``HOW:drop``: the
    samples without the engine's log-probs (the update before issue 86: no mismatch figures, no correction)"""
    batches: int = 2
    """batches rolled out (B 8 x G 8 each)"""
    repeats: int = 3
    """updates of every batch by every way"""
    micro_batch: int = 16
    """action samples per forward (make demo: 16)"""
    beta: float = 0.001
    """KL coefficient (0: no reference forward)"""


cli.answer_help(Args, __name__)   # before the imports of torch and the model stack: --help at once

from engines import hf_backend  # noqa: E402
import logprobs  # noqa: E402
import policy  # noqa: E402
from trainlib import distributed, optim  # noqa: E402
import train_mgrpo  # noqa: E402  (the update this bench times)


def tokens(samples, how: str) -> int:
    """Tokens a way runs through the model for these samples (padding aside): every sample's ids, or for
    ``packed`` each distinct context once plus every action."""
    if how != "packed":
        return sum(len(s.ids) for s in samples)
    contexts = {logprobs.context_of(s) for s in samples}
    return sum(map(len, contexts)) + sum(len(s.ids) - logprobs.action_start(s) for s in samples)


async def roll(model, tok, args: Args) -> list[train_mgrpo.Batch]:
    """``args.batches`` batches of make demo's M-GRPO step, rolled out once."""
    backend = hf_backend.HFBackend(model, tok, max_new_tokens=64, temperature=1.0, num_threads=1,
                                   invariance="fixed-shapes")
    tasks, ep = webenv.load_tasks(args.tasks), EpisodeConfig(prompt="short", max_new_tokens=64, temperature=1.0)
    out = []
    async with webenv.BrowserPool() as pool, \
            Runner(pool, 64, env_kwargs=EpisodeConfig(miniwob_in_place=True).env_kwargs()) as runner:
        for k in range(args.batches):
            groups = train_mgrpo.step_tasks(tasks, k * 8, 8, seed=0)
            jobs = [Job(dataclasses.replace(task, max_steps=6), group=g, sample=i, noise=group_noise(0, k * 8 + g))
                    for g, task in enumerate(groups) for i in range(8)]
            out.append(train_mgrpo.mgrpo_batch(await rollouts(runner, backend, tok, jobs, ep)))
    await backend.aclose()
    return out


def main(args: Args) -> None:
    distributed.init_distributed()
    optim.set_cpu_threads(0)
    ways = args.ways.split(",")
    model, tok = policy.load(args.model)
    batches = [b for b in asyncio.run(roll(model, tok, args)) if b.groups]
    ds = optim.ds_config("configs/zero0.json", micro_batch=4, grad_accum=1, world_size=1, bf16=False, grad_clip=1.0)
    engine = optim.make_engine(model, ds, lr=0.0, weight_decay=0.0, schedule=optim.linear_warmup(0))
    ref = optim.make_reference(policy.load(args.model)[0], ds) if args.beta else None
    targs = train_mgrpo.Args(micro_batch=args.micro_batch, beta=args.beta,
                             episode=EpisodeConfig(prompt="short", max_new_tokens=64, temperature=1.0))
    engine.module.train()
    seconds: dict[str, list[float]] = {w: [0.0] * args.repeats for w in ways}   # per repeat, all batches
    dropped = [dataclasses.replace(b, samples=[dataclasses.replace(s, logprobs=None) for s in b.samples])
               for b in batches]
    for r in range(args.repeats):
        for i, batch in enumerate(batches):
            for w in ways:
                how, _, drop = w.partition(":")
                t0 = time.perf_counter()
                train_mgrpo.update(engine, ref, dropped[i] if drop else batch, tok.pad_token_id, targs, how=how)
                seconds[w][r] += (dt := time.perf_counter() - t0) / len(batches)
                print(f"  repeat {r} batch {i} {w:>7}: {dt:6.2f} s", flush=True)
    for i, b in enumerate(batches):
        merged = logprobs.merge_identical(b.samples, b.adv, b.weight)[0]
        contexts = len({logprobs.context_of(s) for s in merged})
        print(f"batch {i}: {len(b.samples)} samples, {len(merged)} after merging identical ones, {contexts} contexts; "
              + ", ".join(f"{w} {tokens(merged if w != 'plain' else b.samples, w.partition(':')[0])} tokens"
                          for w in ways))
    print(f"\n| way | seconds per batch (median of {args.repeats} repeats) | vs {ways[0]} |")
    print("|---|---:|---:|")
    first = statistics.median(seconds[ways[0]])
    for w in ways:
        med = statistics.median(seconds[w])
        print(f"| {w} | {med:.2f} | x{first / med:.2f} |")


if __name__ == "__main__":
    main(cli.parse_args(Args))
