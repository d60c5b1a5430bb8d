"""RL trajectories per minute, the update included: M-GRPO steps of several configurations side by side.

One step = train_mgrpo's own pieces: B x G rollouts (``rollout.rollouts`` over a ``Runner`` of B x G browser
contexts, the HF backend), ``mgrpo_batch``, then ``update`` on a DeepSpeed engine (ZeRO-0,
fp32, the reference model for the KL term as beta = 0.001 loads it). The configurations take turns, step by
step (A, B, C, A, B, C, ...), so a busy moment of the shared box falls on all of them alike; each prints its
rollout and update seconds per step and trajectories per minute, and the ratio to the first.

A configuration is ``NAME=BxG,gen=N,mb=M,update=packed|rows|plain,prefill=shared|full,threads=T,decode=loop|generate,
reset=load|inplace,noise=free|seeded,invariance=off|fixed-shapes|float64,logprobs=keep|drop``, with browser
contexts of its own:
- gen: most rows the HF backend decodes at once (most prompts per generate call with decode=generate), 0 = all
  of the step's;
- mb: action samples per forward of the update; update: train_mgrpo.update's ``packed`` (the default: identical
  samples scored once, the samples of one context in one micro-batch and their context computed once, as since
  issue 68), ``rows`` (the same micro-batches, a row per sample; ``fast`` is its older name: issue 32's, whose
  micro-batches were of similar length) or ``plain`` (every sample in rollout order, as before issue 32);
- prefill: the HF backend's reuse of repeated prompts and shared prefixes (``shared``) or every row prefilled in
  full (``full``); threads: torch threads of generation;
- decode: the HF backend's continuous batching on its own decode loop (``loop``, the default) or dynamic batches
  of ``model.generate`` (``generate``, the code before issue 43);
- reset: each episode loads its MiniWoB page again (``load``, the default) or restarts it in place in the context
  that last ran its task (``inplace``: ``EpisodeConfig.miniwob_in_place``);
- noise: each request draws from the backend's shared generator (``free``, the code before issue 67) or from its
  own seed (``seeded``: ``rollout.group_noise``, as train_mgrpo rolls out now); invariance: ``HFBackend``'s
  (``off``: the trainer's float32 module at whatever shapes the batch takes; ``fixed-shapes``: the same module at
  shapes that depend on each request alone, train_mgrpo's ``--batch-invariant`` on a CPU where they hold;
  ``float64``: a float64 copy that takes its weights before each step, the fallback and issue 67's first way);
  logprobs: the samples keep the engine's log-probs and the update computes the mismatch figures (``keep``, since
  issue 86) or they are dropped before the update (``drop``: the update as before).

The default is issue 68's measurement, make demo's M-GRPO step (B 8 x G 8, one torch thread for generation, the
decode loop, pages restarted in place, seeded, fixed shapes) with its update a row per sample (``rows``) and with
each context computed once (``packed``). Issue 67's was ``"free=8x8,gen=0,mb=16,update=fast,reset=inplace;
float64=...,noise=seeded,invariance=float64;fixed=...,noise=seeded,invariance=fixed-shapes"`` (as before the issue:
shared noise, batch-dependent float32; seeded requests in a float64 copy; seeded at fixed shapes); its first
measurement was ``"free=...;seeded=...,noise=seeded;
invariant=...,noise=seeded,invariance=float64"`` (the same shape and options). Issue 43's was
``"filing=8x8,gen=0,mb=16,update=fast,decode=generate,reset=load;loop=8x8,gen=0,mb=16,update=fast,decode=loop,
reset=load;today=8x8,gen=0,mb=16,update=fast,decode=loop,reset=inplace"``. Issue 32's comparison was ``--configs "old=4x4,gen=16,mb=4,update=plain,
prefill=full,decode=generate;new=8x8,gen=0,mb=16,update=fast,decode=generate"`` (one argument); issue 43's first
``"generate=8x8,gen=0,mb=16,update=fast,decode=generate;loop=8x8,gen=0,mb=16,update=fast,decode=loop"``; its
in-place restarts' ``"load=8x8,gen=0,mb=16,update=fast,reset=load;inplace=8x8,gen=0,mb=16,update=fast,reset=inplace"``.

    .venv/bin/python bench/bench_rl_step.py --model runs/demo/bc/hf --steps 3
"""
from __future__ import annotations

import asyncio
import dataclasses
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
    """M-GRPO steps of several configurations, side by side: trajectories per minute, the update included."""
    model: str = "tiny"
    """policy: an HF checkpoint such as runs/demo/bc/hf (realistic), or tiny"""
    tasks: str = DEMO_TASKS
    """tasks (make demo's 8 by default); the groups of a step take them in turn"""
    configs: str = ("rows=8x8,gen=0,mb=16,update=rows,reset=inplace,noise=seeded,invariance=fixed-shapes;"
                    "packed=8x8,gen=0,mb=16,update=packed,reset=inplace,noise=seeded,invariance=fixed-shapes")
    """';'-separated NAME=BxG,gen=N,mb=M,update=packed|rows|plain,prefill=shared|full,threads=T,decode=loop|generate,
    reset=load|inplace,noise=free|seeded,invariance=off|fixed-shapes|float64,logprobs=keep|drop"""
    steps: int = 3
    """steps per configuration (after one warm-up step each)"""
    max_turns: int = 6
    """interactions per trajectory (make demo: 6)"""
    max_new_tokens: int = 64
    """tokens per response (make demo: 64)"""
    beta: float = 0.001
    """KL coefficient (0: no reference forward)"""
    update_threads: int = 0
    """torch threads of the update (0: torch's default, as train_mgrpo)"""


cli.answer_help(Args, __name__)   # before the imports of torch and the model stack: --help at once

from engines import hf_backend  # noqa: E402
import policy  # noqa: E402
from trainlib import distributed, optim  # noqa: E402
import train_mgrpo  # noqa: E402  (the batch and the update this bench times)


@dataclass
class Config:
    name: str
    B: int
    G: int
    gen: int
    mb: int
    update: str
    threads: int
    share: bool
    decode: str = "loop"
    inplace: bool = False
    seeded: bool = False
    invariance: str = "off"
    logprobs: bool = True


def parse_configs(spec: str) -> list[Config]:
    """``"old=4x4,gen=16,mb=4,update=plain;new=8x8,gen=0,mb=16,update=fast"`` -> two Configs."""
    out = []
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        name, _, rest = item.partition("=")
        shape, *opts = rest.split(",")
        kv = dict(o.split("=", 1) for o in opts)
        B, G = map(int, shape.split("x"))
        update = kv.get("update", "packed")
        out.append(Config(name, B, G, int(kv.get("gen", 0)), int(kv.get("mb", 4)),
                          {"fast": "rows"}.get(update, update), int(kv.get("threads", 1)),
                          kv.get("prefill", "shared") == "shared", kv.get("decode", "loop"),
                          kv.get("reset", "load") == "inplace", kv.get("noise", "free") == "seeded",
                          kv.get("invariance", "off"), kv.get("logprobs", "keep") == "keep"))
    return out


async def one_step(cfg: Config, k: int, runner: Runner, backends, tok, engine, ref, tasks,
                   args: Args) -> tuple[float, float, float, int]:
    """One M-GRPO step of ``cfg`` (its k-th): rollout seconds, of them inside ``model.generate`` (wall), update
    seconds, trajectories."""
    backend = backends[cfg.name]
    backend.max_batch_size = cfg.gen or cfg.B * cfg.G
    backend.take_weights(engine.module)   # (a float64 copy: the weights the last update left; else nothing)
    groups = train_mgrpo.step_tasks(tasks, k * cfg.B, cfg.B, seed=0)
    jobs = [Job(dataclasses.replace(t, max_steps=args.max_turns), group=g, sample=i,
                noise=group_noise(0, k * cfg.B + g) if cfg.seeded else None)
            for g, t in enumerate(groups) for i in range(cfg.G)]
    ep = EpisodeConfig(prompt="short", max_new_tokens=args.max_new_tokens, temperature=1.0)
    t0, before = time.perf_counter(), dict(backend.stats)
    trajs = await rollouts(runner, backend, tok, jobs, ep)
    t_roll = time.perf_counter() - t0
    d = {k: backend.stats[k] - before[k] for k in ("model_s", "model_cpu_s", "prefill_s", "prefill_tokens", "prefix_hit_tokens",
                                                    "gen_tokens", "decode_steps")}
    t_gen = d["model_s"]
    if d["decode_steps"]:
        print(f"    {cfg.name}: prefill {d['prefill_s']:.1f} s of {d['prefill_tokens']} prompt tokens "
              f"({d['prefix_hit_tokens']} more from the prefix cache), {d['gen_tokens']} tokens in "
              f"{d['decode_steps']} decode steps ({d['gen_tokens'] / d['decode_steps']:.1f} rows each); the model "
              f"thread had {d['model_cpu_s']:.1f} CPU s in its {d['model_s']:.1f} s of work", flush=True)
    t0 = time.perf_counter()
    if not cfg.logprobs:   # the update as before issue 86: no engine log-probs, no mismatch figures
        for t in trajs:
            t.samples = [dataclasses.replace(s, logprobs=None) for s in t.samples]
    batch = train_mgrpo.mgrpo_batch(trajs)
    if batch.groups:
        targs = train_mgrpo.Args(micro_batch=cfg.mb, beta=args.beta, episode=ep)
        train_mgrpo.update(engine, ref, batch, tok.pad_token_id, targs, how=cfg.update)
    return t_roll, t_gen, time.perf_counter() - t0, len(trajs)


async def main(args: Args) -> None:
    distributed.init_distributed()
    optim.set_cpu_threads(args.update_threads)
    configs = parse_configs(args.configs)
    model, tok = policy.load(args.model)
    ds = optim.ds_config("configs/zero0.json", micro_batch=4, grad_accum=1, world_size=1, bf16=False, grad_clip=1.0)
    engine = optim.make_engine(model, ds, lr=1e-6, weight_decay=0.0, schedule=optim.linear_warmup(0))
    ref = optim.make_reference(policy.load(args.model)[0], ds) if args.beta else None
    backends = {}
    for c in configs:   # one per configuration: its generation threads are set when its thread starts
        backends[c.name] = hf_backend.HFBackend(engine.module, tok, max_new_tokens=args.max_new_tokens,
                                                temperature=1.0, num_threads=c.threads, share_prefill=c.share,
                                                decode=c.decode, invariance=c.invariance)
    tasks = webenv.load_tasks(args.tasks)
    print(f"model {args.model}; {len(tasks)} tasks; <= {args.max_turns} turns, <= {args.max_new_tokens} new tokens; "
          f"beta {args.beta}; {args.steps} steps per configuration after a warm-up step, taking turns")
    totals = {c.name: [0.0, 0.0, 0] for c in configs}
    async with webenv.BrowserPool() as pool:
        runners = {c.name: Runner(pool, c.B * c.G, env_kwargs=EpisodeConfig(miniwob_in_place=c.inplace).env_kwargs())
                   for c in configs}
        for k in range(args.steps + 1):
            for c in configs:
                engine.module.eval()
                t_roll, t_gen, t_upd, n = await one_step(c, k, runners[c.name], backends, tok, engine, ref, tasks,
                                                         args)
                engine.module.train()
                print(f"  step {k} {c.name:>8}: rollout {t_roll:6.2f} s (in model.generate {t_gen:5.2f} s), "
                      f"update {t_upd:5.2f} s, {n} trajectories"
                      + ("  (warm-up)" if k == 0 else ""), flush=True)
                if k:
                    t = totals[c.name]
                    t[0], t[1], t[2] = t[0] + t_roll, t[1] + t_upd, t[2] + n
        for b in backends.values():
            await b.aclose()
        for r in runners.values():
            await r.close()
    print("\n| configuration | B x G | decode | reset | noise | invariance | gen batch | micro-batch | update | prefill "
          "| gen threads | rollout s / traj | update s / traj | trajectories / min | vs first |")
    print("|---|---|---|---|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    first = None
    for c in configs:
        roll, upd, n = totals[c.name]
        per_min = 60.0 * n / (roll + upd)
        first = first or per_min
        print(f"| {c.name} | {c.B} x {c.G} | {c.decode} | {'in place' if c.inplace else 'load'} "
              f"| {'seeded' if c.seeded else 'free'} | {c.invariance} | {c.gen or 'all'} "
              f"| {c.mb} | {c.update} "
              f"| {'shared' if c.share else 'full'} | {c.threads} | {roll / n:.3f} | {upd / n:.3f} | {per_min:.1f} "
              f"| x{per_min / first:.2f} |")


if __name__ == "__main__":
    asyncio.run(main(cli.parse_args(Args)))
