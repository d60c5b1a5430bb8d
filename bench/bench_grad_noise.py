"""How much of an M-GRPO step is signal: the gradient noise of Eq. 2 at a checkpoint, per advantage (issue 42).

Rolls out ``--groups`` groups of G trajectories on fresh RL pages (train_mgrpo's own pages, sampling settings and
rollout code: make demo's tasks, <= 6 turns of <= 64 new tokens, T = 1), then takes each informative group's
Eq. 2 gradient alone, g_k (the group weighs 1, the ratio is 1; beta's KL term is left out: at the start of RL
the policy is the reference and its gradient is 0). A step over n informative groups follows the mean of n
g_k, so from the g_k:

- the cosine between the mean gradients of two disjoint halves of m groups each (m G trajectories per half),
  averaged over random splits: near 1 when a step's direction is its signal, near 0 when it is noise;
- the simple gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, "An Empirical Model
  of Large-Batch Training", App. A.1), in trajectories of informative groups: the batch at which a step's
  expected squared norm is half signal, half noise. Estimated from two batch sizes (B_small = m groups and
  B_big = 2m, the two halves and their union, |G|^2 and tr(Sigma) averaged over splits before the ratio) and,
  as a check, from single groups against all K (B_small = 1, B_big = K). A batch of B has an expected cosine
  between independent halves of about 1 / (1 + B_simple / B): the table prints it beside the measured one.

Each advantage of ``--advantages`` (grpo: Eq. 2's A_i; gigpo: A_i + omega A^S, levers.step_advantages) is
measured on the same trajectories. A group is informative when any of its advantages is non-zero.

    .venv/bin/python bench/bench_grad_noise.py --model runs/demo/bc/hf --groups 128 --out runs/noise.json
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from demo_tasks import DEMO_TASKS  # noqa: E402  (bench/, the script's own directory)
from trainlib import cli  # noqa: E402


@dataclass
class Args:
    """Gradient noise of Eq. 2 at a checkpoint: half-batch cosines and B_simple, per advantage."""
    model: str = "runs/demo/bc/hf"
    """the policy RL starts from (make demo's BC checkpoint)"""
    tasks: str = DEMO_TASKS
    """tasks, taken in turn by the groups (make demo's 8)"""
    groups: int = 128
    """groups rolled out (about half carry a signal under grpo)"""
    group_size: int = 8
    """G, trajectories per group (make demo: 8)"""
    rollout_groups: int = 8
    """groups rolled out at once (make demo's B)"""
    max_turns: int = 6
    """interactions per trajectory (make demo: 6)"""
    max_new_tokens: int = 64
    """tokens per response (make demo: 64)"""
    advantages: str = "grpo,gigpo"
    """advantages measured on the same trajectories"""
    halves: str = "4,8,16,32"
    """groups per half of the half-batch cosines (x G trajectories each)"""
    splits: int = 50
    """random splits averaged per half size"""
    micro_batch: int = 16
    """samples per forward of the gradients"""
    seed: int = 1
    """seed of the RL pages (train_mgrpo.step_tasks) and of sampling"""
    out: str = ""
    """JSON of the numbers (stdout gets the table either way)"""


cli.answer_help(Args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402

import env as webenv  # noqa: E402
from engines import hf_backend  # noqa: E402
import logprobs  # noqa: E402
import policy  # noqa: E402
from trainlib import optim  # noqa: E402
import train_mgrpo  # noqa: E402
from rollout import EpisodeConfig, Job, Runner, Trajectory, rollouts  # noqa: E402


def noise_stats(grads: torch.Tensor, halves: list[int], splits: int, rng: random.Random) -> dict:
    """From per-group gradients ``grads`` [K, P]: per half size m, the mean (and sd over splits) cosine between two
    disjoint halves' mean gradients, and the two-batch B_simple (B_small = m, B_big = 2m); and B_simple from
    single groups against all K. B_simple in groups."""
    K = grads.shape[0]
    out: dict = {"groups": K}
    mean = grads.mean(0)
    if K >= 2:   # B_small = 1, B_big = K: |g_k|^2 averaged, |mean|^2
        small, big = float((grads * grads).sum(1).mean()), float(mean @ mean)
        g2, tr = (K * big - small) / (K - 1), (small - big) / (1 - 1 / K)
        out["b_simple_single"] = tr / g2 if g2 > 0 else math.inf
        out["g2_single"], out["tr_sigma_single"] = g2, tr
    out["halves"] = {}
    for m in halves:
        if 2 * m > K:
            continue
        cos, g2s, trs = [], [], []
        for _ in range(splits):
            idx = rng.sample(range(K), 2 * m)
            a, b = grads[idx[:m]].mean(0), grads[idx[m:]].mean(0)
            cos.append(float(a @ b / (a.norm() * b.norm()).clamp(min=1e-30)))
            small, big = (float(a @ a) + float(b @ b)) / 2, float(((a + b) / 2) @ ((a + b) / 2))
            g2s.append(2 * big - small)                  # (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
            trs.append((small - big) * 2 * m)            # (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)
        g2, tr = sum(g2s) / splits, sum(trs) / splits
        out["halves"][m] = {"cos": sum(cos) / splits,
                            "cos_sd": (sum((c - sum(cos) / splits) ** 2 for c in cos) / max(splits - 1, 1)) ** 0.5,
                            "b_simple": tr / g2 if g2 > 0 else math.inf}
    return out


def group_gradients(model, groups: list[list[Trajectory]], modes: list[str], pad_id: int, args: Args
                    ) -> dict[str, torch.Tensor]:
    """Per advantage mode, the Eq. 2 gradient of each of its informative groups alone: [K_mode, P]."""
    params = [p for p in model.parameters() if p.requires_grad]
    out: dict[str, list[torch.Tensor]] = {m: [] for m in modes}
    for trajs in groups:
        batches = {m: train_mgrpo.mgrpo_batch(trajs, train_mgrpo.Credit(m)) for m in modes}
        live = {m: b for m, b in batches.items() if b.groups}
        if not live:
            continue
        merged = {m: logprobs.merge_identical(b.samples, b.adv, b.weight) for m, b in live.items()}
        samples = next(iter(merged.values()))[0]
        assert all(v[0] == samples for v in merged.values())          # the same valid trajectories in every mode
        order = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
        total = {m: [torch.zeros_like(p) for p in params] for m in live}
        for k in range(0, len(order), args.micro_batch):
            idx = order[k:k + args.micro_batch]
            logp, _, mask = logprobs.forward_logprobs(model, [samples[i] for i in idx], pad_id, "cpu")
            for n, m in enumerate(live):
                _, adv, w = merged[m]
                loss, _ = train_mgrpo.mgrpo_loss(logp, logp.detach(), None, mask, torch.tensor([adv[i] for i in idx]),
                                                 torch.tensor([w[i] for i in idx]), beta=0.0)
                for acc, g in zip(total[m], torch.autograd.grad(loss, params, retain_graph=n < len(live) - 1)):
                    acc += g
        for m, gs in total.items():
            out[m].append(torch.cat([g.flatten() for g in gs]))
    return {m: torch.stack(v) if v else torch.zeros(0) for m, v in out.items()}


async def roll_out(args: Args, model, tok) -> list[list[Trajectory]]:
    tasks = webenv.load_tasks(args.tasks)
    ep = EpisodeConfig(prompt="short", max_new_tokens=args.max_new_tokens, temperature=1.0)
    backend = hf_backend.HFBackend(model, tok, max_new_tokens=args.max_new_tokens, temperature=1.0, num_threads=1)
    groups: list[list[Trajectory]] = []
    async with webenv.BrowserPool() as pool, Runner(pool, args.rollout_groups * args.group_size) as runner:
        for first in range(0, args.groups, args.rollout_groups):
            n = min(args.rollout_groups, args.groups - first)
            pages = train_mgrpo.step_tasks(tasks, first, n, seed=args.seed)
            jobs = [Job(dataclasses.replace(t, max_steps=args.max_turns), group=first + g)
                    for g, t in enumerate(pages) for _ in range(args.group_size)]
            trajs = await rollouts(runner, backend, tok, jobs, ep)
            groups += [trajs[g * args.group_size:(g + 1) * args.group_size] for g in range(n)]
            ok = sum(t.reward > 0 for t in trajs) / len(trajs)
            print(f"  rolled out groups {first}..{first + n - 1}: success {ok:.2f}", flush=True)
    await backend.aclose()
    return groups


def main(args: Args) -> dict:
    torch.manual_seed(args.seed)
    modes = [m for m in args.advantages.split(",") if m]
    model, tok = policy.load(args.model)
    model.eval()
    t0 = time.time()
    groups = asyncio.run(roll_out(args, model, tok))
    t_roll = time.time() - t0
    optim.set_cpu_threads(0)
    t0 = time.time()
    grads = group_gradients(model, groups, modes, tok.pad_token_id, args)
    t_grad = time.time() - t0
    halves = [int(h) for h in args.halves.split(",")]
    G = args.group_size
    rolled = sum(1 for g in groups if sum(not t.env_error for t in g) >= 2)
    result = {"args": dataclasses.asdict(args), "trajectories": sum(map(len, groups)), "groups_with_baseline": rolled,
              "success": sum(t.reward > 0 for g in groups for t in g) / max(sum(map(len, groups)), 1),
              "rollout_seconds": t_roll, "gradient_seconds": t_grad, "modes": {}}
    for m in modes:
        st = noise_stats(grads[m], halves, args.splits, random.Random(args.seed))
        st["frac_informative"] = st["groups"] / max(rolled, 1)
        result["modes"][m] = st
    print(f"\n{args.model}: {result['trajectories']} trajectories in {len(groups)} groups of {G} "
          f"(rollout success {result['success']:.3f}); rollouts {t_roll:.0f} s, gradients {t_grad:.0f} s")
    print("\n| advantage | informative groups | trajectories per half | cosine of the halves (sd) "
          "| expected 1/(1+B_simple/B) | B_simple, two batches (traj.) |")
    print("|---|---:|---:|---:|---:|---:|")
    for m, st in result["modes"].items():
        b1 = st.get("b_simple_single", math.nan) * G
        for h, row in st["halves"].items():
            print(f"| {m} | {st['groups']} of {rolled} | {h * G} | {row['cos']:.3f} ({row['cos_sd']:.3f}) "
                  f"| {1 / (1 + b1 / (h * G)):.3f} | {row['b_simple'] * G:.0f} |")
        print(f"| {m}: B_simple from single groups | | | | | {b1:.0f} informative = "
              f"{b1 / max(st['frac_informative'], 1e-9):.0f} rolled out |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    main(cli.parse_args(Args))
