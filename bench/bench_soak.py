"""Soak benchmark of env/: does memory stay flat over thousands of episodes?

N contexts (default 8) run MiniWoB episodes back to back, as RL rollouts do: reset on a new seed, then a
few actions of a random agent (a click on an element of the observation, or a typed word), until the page
says done or the step limit. Every ``--every`` episodes it records the proportional set size (PSS) of
  - this Python process (after gc.collect()),
  - the Playwright driver (node),
  - every Chromium process (browser, renderers, GPU/utility processes), summed,
and at the end it prints the growth per 1,000 episodes of each: the slope of a least-squares line through
the samples after the first ``--warmup`` episodes (caches, JIT and the contexts' first pages fill up first).
Flat memory = a slope near 0, whatever the absolute level.

Run: .venv/bin/python bench/bench_soak.py [--episodes 3000] [--contexts 8] [--every 250]
Results are recorded by hand in bench/RESULTS.md under "## soak".
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import os
import random
import re
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import env  # noqa: E402

TASKS = ("click-button", "click-checkboxes", "click-tab", "enter-text", "login-user", "click-link")
_ELEMENT = re.compile(r'\bid="(\d+)"')


@dataclasses.dataclass
class Args:
    episodes: int = 3000     # episodes in all, over every context
    contexts: int = 8        # contexts running episodes concurrently
    every: int = 250         # episodes between two memory samples
    warmup: int = 500        # episodes left out of the slope
    max_steps: int = 4       # actions per episode at most
    seed: int = 0


def parse_args() -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(p.parse_args()))


def pss_mb(proc: psutil.Process) -> float:
    try:
        return proc.memory_full_info().pss / 2**20
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def memory() -> dict[str, float]:
    """PSS in MB of Python (this process), the Playwright driver (node) and all Chromium processes."""
    gc.collect()
    me = psutil.Process()
    out = {"python": pss_mb(me), "driver": 0.0, "chromium": 0.0, "chromium_procs": 0}
    for child in me.children(recursive=True):
        try:
            name = child.name()
        except psutil.NoSuchProcess:
            continue
        if name.startswith("node"):
            out["driver"] += pss_mb(child)
        elif "chrom" in name:
            out["chromium"] += pss_mb(child)
            out["chromium_procs"] += 1
    return out


def slope_per_1000(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs, per 1,000 units of x."""
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return 1000 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")


async def episode(e: env.WebEnv, task: env.Task, rng: random.Random, max_steps: int) -> str:
    """One episode of a random agent; returns how it ended."""
    obs = await e.reset(task)
    for _ in range(max_steps):
        ids = _ELEMENT.findall(obs.text)
        if not ids:
            return "no_elements"
        el = rng.choice(ids)
        if rng.random() < 0.25:
            action = f'do(action="Type", element="{el}", argument="{rng.choice(("abc", "hello", "42"))}")'
        else:
            action = f'do(action="Click", element="{el}")'
        res = await e.step(action)
        if res.done:
            return res.info.get("done_reason") or "done"
        obs = res.obs
    return "max_steps"


async def main(args: Args) -> None:
    tasks = [env.miniwob_task(name) for name in TASKS]
    done, errors = 0, 0
    samples: list[tuple[int, dict[str, float]]] = []
    t0 = time.time()
    async with env.BrowserPool() as pool:
        envs = [await pool.new_env() for _ in range(args.contexts)]
        samples.append((0, memory()))
        next_sample = args.every
        lock = asyncio.Lock()

        async def worker(k: int) -> None:
            nonlocal done, errors, next_sample
            rng = random.Random(args.seed * 1000 + k)
            while True:
                async with lock:
                    if done >= args.episodes:
                        return
                    n = done
                    done += 1
                task = dataclasses.replace(tasks[n % len(tasks)], seed=env.RL_SEEDS[n], max_steps=args.max_steps)
                try:
                    await episode(envs[k], task, rng, args.max_steps)
                except env.EpisodeCrash:
                    errors += 1
                if done >= next_sample:
                    async with lock:
                        if done >= next_sample:
                            next_sample += args.every
                            samples.append((done, memory()))
                            m = samples[-1][1]
                            print(f"{done:6d} episodes {time.time() - t0:7.0f} s  python {m['python']:7.1f} MB  "
                                  f"driver {m['driver']:7.1f} MB  chromium {m['chromium']:7.1f} MB "
                                  f"({m['chromium_procs']} procs)", flush=True)

        await asyncio.gather(*(worker(k) for k in range(args.contexts)))
        samples.append((done, memory()))
    wall = time.time() - t0
    late = [(n, m) for n, m in samples if n >= args.warmup]
    print(f"\n{done} episodes on {args.contexts} contexts in {wall:.0f} s ({done / wall:.1f} episodes/s), "
          f"{errors} ended by the environment")
    print(f"growth per 1,000 episodes after the first {args.warmup} ({len(late)} samples):")
    for key in ("python", "driver", "chromium"):
        first, last = samples[0][1][key], samples[-1][1][key]
        slope = slope_per_1000([n for n, _ in late], [m[key] for _, m in late])
        print(f"  {key:9s} {slope:+8.1f} MB / 1,000 episodes   (start {first:.0f} MB, end {last:.0f} MB)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main(parse_args()))
