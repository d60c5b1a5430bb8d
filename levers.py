"""M-GRPO's options beyond the paper that take more than a line of the trainer, each off by default with its row in
docs/results.md; train_mgrpo.py calls each at one named place, so its step reads as the paper's with them off.

- DAPO's dynamic sampling (``--dynamic-sampling N``, Yu et al. 2025): ``sample_groups``, rounds of groups until
  enough carry a signal (one round without it: the paper's step).
- GiGPO's step-level advantages (``--advantage gigpo``, Feng et al. 2025): ``step_advantages``, added to Eq. 2's
  A_i by ``train_mgrpo.credit_advantages``.
- Demonstrations kept in the loss (``--demo-data``; CHORD, Zhang et al. 2025, which ms-swift ships as
  ``chord_sft_*``): ``demonstrations`` renders BC's data as BC does, ``demonstration_term`` adds mu_t x Eq. 1 on a
  batch of its steps to every optimizer step of ``train_mgrpo.update``, mu_t decayed linearly (``demo_weight``). Issue
  99's lever for the pages no sample of the clone solves: there Eq. 2 has no gradient, Eq. 1 does.
- A task curriculum from failures (``--rl-tasks failures``; WebRL's curriculum from failures in the small):
  ``task_success`` follows each task's success in the run's rollouts, ``task_weights`` makes it the task draw
  of ``train_mgrpo.step_tasks``: more groups on the tasks the policy fails.
Each is a function of the step and the run's seed, so a run stays a function of its command and resumes equal.
"""
from __future__ import annotations

import collections
import logging
from typing import Any

import torch

import bc_data
import logprobs
from trainlib import distributed, optim

log = logging.getLogger("webagent.mgrpo")


# ---- DAPO's dynamic sampling ----

async def sample_groups(next_round, groups_per_rank: int, max_rounds: int, signal=lambda trajs: 0,
                        reduce_sum=lambda n: n) -> tuple[list, int, int]:
    """One step's rollouts, with DAPO's dynamic sampling when ``max_rounds`` > 1 (--dynamic-sampling): rounds of
    ``groups_per_rank`` groups (``train_mgrpo.GroupRoller.next_round``) until all ranks together hold as many groups
    with a learning signal (``signal``: their count, ``train_mgrpo.signal_groups``) as one round has groups, or
    ``max_rounds`` ran (``reduce_sum``: over ranks, so they agree). Returns (all trajectories, rounds, groups with
    a signal on this rank)."""
    trajs: list = []
    rounds, target = 0, reduce_sum(groups_per_rank)
    while True:
        trajs += await next_round(groups_per_rank, rounds * groups_per_rank)
        rounds += 1
        informative = signal(trajs)
        if rounds >= max(max_rounds, 1) or reduce_sum(informative) >= target:
            return trajs, rounds, informative


# ---- GiGPO ----

def step_advantages(valid: list, gamma: float, eps: float = 1e-6) -> tuple[list[list[float]], int, int]:
    """GiGPO's step-level advantages (Feng et al. 2025, Eq. 5-7) of one group's trajectories.
    Every action a_ij gets its discounted return R_ij = gamma^(|tau_i| - 1 - j) r_i (the binary reward comes at
    the last step). Actions taken from the same anchor state (the page's URL and the observation the policy was
    shown, not the prompt, whose history differs) by any trajectory of the group, at any turn, form a step
    group, and A^S_ij = (R_ij - mean) / (std + eps) within it (population std): a step group of one action, or
    of equal returns, gives 0. An action with no step record (a hand-built trajectory) is a group of its own.
    Returns (A^S per trajectory and action, step groups of >= 2 actions, those whose returns differ)."""
    members: dict[object, list[tuple[int, int]]] = collections.defaultdict(list)
    returns: list[list[float]] = []
    for i, t in enumerate(valid):
        n = len(t.samples)
        returns.append([gamma ** (n - 1 - j) * t.reward for j in range(n)])
        for j in range(n):
            anchor = (t.steps[j].get("url", ""), t.steps[j].get("observation", "")) if j < len(t.steps) else (i, j)
            members[anchor].append((i, j))
    adv = [[0.0] * len(r) for r in returns]
    shared = differ = 0
    for where in members.values():
        if len(where) < 2:
            continue
        shared += 1
        r = torch.tensor([returns[i][j] for i, j in where], dtype=torch.float64)
        if bool((r == r[0]).all()):
            continue
        differ += 1
        a = (r - r.mean()) / (r.std(unbiased=False) + eps)
        for (i, j), v in zip(where, a.tolist()):
            adv[i][j] = v
    return adv, shared, differ


# ---- demonstrations kept in the loss (CHORD) ----

def demonstrations(opts, prompt: str, tokenizer, world: int, rank: int) -> list[tuple[list[int], list[int]]]:
    """--demo-data's samples (``opts``: train_mgrpo.Levers), one per step, rendered and masked as BC renders them
    (``bc_data.tokenized``) with the rollouts' system prompt; [] without it. A bad file or setting exits naming
    its flag."""
    if bool(opts.demo_data) != bool(opts.demo_loss_weight):
        raise SystemExit("--demo-data and --demo-loss-weight go together (the one without the other does nothing)")
    if not opts.demo_data:
        return []
    if opts.demo_batch < world or opts.demo_batch % world or opts.demo_loss_decay < 0:
        raise SystemExit(f"--demo-batch must be a positive multiple of the world size {world} (not {opts.demo_batch})"
                         f" and --demo-loss-decay >= 0 (not {opts.demo_loss_decay})")
    names: list[str] = []
    try:
        records = bc_data.load_records(opts.demo_data, names)
    except ValueError as e:
        raise SystemExit(f"--demo-data: {e}") from None
    samples, dropped = bc_data.tokenized(records, names, tokenizer, prompt, flag="--demo-data", verbose=rank == 0,
                                         only_successes=opts.demo_only_successes)
    if rank == 0:
        log.info("--demo-data: %d demonstration steps in the loss (%d dropped as too long), mu %g, decay over %d steps",
                 len(samples), dropped, opts.demo_loss_weight, opts.demo_loss_decay)
    return samples


def demo_weight(opts, step: int) -> float:
    """mu_t = mu max(0, 1 - t / N) at step t = 0, 1, ... (N: --demo-loss-decay; 0: mu throughout): a function of
    the step alone, so a run resumed with another --steps goes on as it would have."""
    decay = opts.demo_loss_decay
    return opts.demo_loss_weight * (max(0.0, 1 - step / decay) if decay else 1.0)


def demonstration_term(demos: list, step: int, args, pad_id: int):
    """For ``train_mgrpo.update`` (``args``: train_mgrpo.Args): a function of the engine adding mu_t x Eq. 1 on step
    ``step``'s demonstration steps to the optimizer step's gradient and returning its figures (None when off).
    --demo-batch steps over the ranks (``bc_data.draw``: a fresh permutation each pass over the data, a function of
    the step and --seed), their NLL averaged over all ranks' action tokens [collective: their count], each step its
    own forward pass (BC's fastest on a CPU, bench/bench_bc.py), no optimizer step (the update's last micro-batch
    takes it)."""
    if not demos:
        return None
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    mu = demo_weight(args.levers, step)
    piece = bc_data.draw(demos, step, args.levers.demo_batch // world, world, rank, args.seed)
    mine = sum(sum(mask[1:]) for _, mask in piece)     # this rank's action tokens (shifted, as Eq. 1 scores them)

    def add(engine) -> dict[str, float]:
        tokens, nll_sum, hits = distributed.all_reduce_sum(mine), 0.0, 0.0
        for sample in piece:
            nll, hit, _ = logprobs.demonstration_nll(engine, [sample], pad_id, engine.device)
            optim.accumulate(engine, mu * nll / tokens, boundary=False)
            nll_sum, hits = nll_sum + float(nll.detach()), hits + float(hit.sum())
        return {"train/demo_mu": mu, "train/demo_nll": nll_sum / max(mine, 1), "train/demo_acc": hits / max(mine, 1)}
    return add


# ---- a task curriculum from failures ----

def task_success(success: list[float | None] | None, trajs: list, tasks: list, opts) -> list[float | None] | None:
    """--rl-tasks failures (``opts``: train_mgrpo.Levers): each task's success after a step [collective: the
    step's counts summed over ranks], s <- (s + the step's success rate on the task) / 2, the rate itself the
    first time the task is drawn, None until then. Otherwise None (every rank alike: no collective)."""
    if opts.rl_tasks != "failures":
        return None
    mine = [t for t in trajs if not t.env_error]   # (an episode the environment ended is not the policy's outcome)
    counts = torch.tensor([[sum(t.reward > 0 for t in mine if t.task_id == task.task_id),
                            sum(t.task_id == task.task_id for t in mine)] for task in tasks], dtype=torch.float64)
    counts = distributed.all_reduce(counts, torch.distributed.ReduceOp.SUM).tolist()    # [tasks, 2] over ranks
    return [s if not n else ok / n if s is None else (s + ok / n) / 2
            for s, (ok, n) in zip(success or [None] * len(tasks), counts)]


def task_weights(success: list[Any] | None, n_tasks: int, opts) -> list[float] | None:
    """--rl-tasks failures: the task draw's weights, 1.1 - s (a task never drawn: 1.1, the most), so a task solved
    every time keeps 1/11 of a failing task's weight; otherwise None (``train_mgrpo.step_tasks``: tasks in turn)."""
    if opts.rl_tasks != "failures":
        return None
    return [1.1 - (s or 0.0) for s in success or [None] * n_tasks]
