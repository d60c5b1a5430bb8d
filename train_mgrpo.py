"""M-GRPO (WebAgent-R1, Sec. 2.3, Eq. 2): end-to-end multi-turn GRPO against live browsers.

One training step:
  1. rollouts: B tasks x G trajectories (G = group size), each an asyncio task with its own browser
     context, all G of a group starting from the same page (same MiniWoB seed). A trajectory loops
     render (compress.py, dynamic context compression) -> generate (policy.py) -> env.step until exit(),
     an early stop or the step limit, then gets its binary reward. Every step is kept as a token-exact
     sample (prompt ids + generated ids), so each action is scored under the context it was generated in.
  2. advantages: A_i = (r_i - mean) / (std + eps) within the group, shared by all actions of trajectory i.
     Groups whose rewards are all equal carry no signal: ``--zero-std skip`` (default) drops them from the
     loss (KL included) at no forward cost; ``keep`` keeps their KL term.
  3. loss (Eq. 2): clipped ratio (eps 0.2) minus beta * KL to the frozen reference (k3 estimator,
     beta 0.001), with the token -> action -> trajectory -> group normalisation 1/(G |tau_i| |a_ij|) as
     per-sample weights, so micro-batches are a plain weighted sum.
  4. weight sync: the HF backend generates with the trainer's own module (nothing to copy); the vLLM
     backend gets the weights pushed after every optimizer step, then a probe sequence's log-probs are
     compared between engine and trainer (a silent no-op sync shows up as a large difference).

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
import dataclasses
import json
import logging
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from playwright.async_api import Error as PlaywrightError

import compress
import env as webenv
import policy
import trainlib

log = logging.getLogger("webagent.mgrpo")


@dataclass
class Args:
    """M-GRPO training (Eq. 2) with asynchronous browser rollouts under DeepSpeed."""
    model: str = "ckpt/bc/hf"
    """initial policy: the BC checkpoint (WebAgent-R1), a base model (R1-Zero), or tiny"""
    tasks: str = "miniwob:click-button,login-user"
    """task spec for env.load_tasks: "miniwob:a,b", "miniwob:all" or a WebArena config JSON"""
    out: str = "ckpt/rl"
    """run directory: step_N/ checkpoints, latest, hf/, metrics.jsonl, tb/, trajectories.jsonl, dynamics.png"""
    steps: int = 100
    """RL steps (each: rollouts of B x G trajectories, then the update)"""
    tasks_per_step: int = 4
    """B: tasks (groups) per step, across all ranks"""
    group_size: int = 4
    """G in Eq. 2: trajectories per task, all from the same start page"""
    lr: float = 1e-6
    """constant learning rate (paper: 1e-6)"""
    clip_eps: float = 0.2
    """epsilon of the clipped ratio in Eq. 2"""
    beta: float = 0.001
    """KL coefficient in Eq. 2; 0 loads no reference model"""
    zero_std: str = "skip"
    """groups with all-equal rewards: skip (leave the loss, KL included) or keep"""
    updates_per_batch: int = 1
    """optimizer updates per rollout batch; >1 takes old log-probs from a forward pass before the first"""
    micro_batch: int = 4
    """action samples per forward/backward pass"""
    grad_clip: float = 1.0
    """gradient norm clipping"""
    backend: str = "hf"
    """rollout generation: hf (CPU or GPU) or vllm (GPU)"""
    temperature: float = 1.0
    """sampling temperature (paper: 1.0)"""
    top_p: float = 1.0
    """nucleus sampling (paper: 1.0)"""
    max_new_tokens: int = 1024
    """tokens per response (paper: 1,024)"""
    max_context: int = 16384
    """prompt + response tokens (paper: 16,384); the current observation is truncated to fit"""
    max_turns: int = 15
    """interactions per trajectory before it is cut off"""
    prompt: str = "thinking"
    """system prompt: thinking | plain | short"""
    compress: bool = True
    """dynamic context compression (Sec. 2.3); --no-compress keeps every observation"""
    ds_config: str = ""
    """DeepSpeed config; default configs/zero3.json on GPU, configs/zero0.json on CPU"""
    grad_checkpointing: bool = False
    """gradient checkpointing"""
    vllm_gpu_memory: float = 0.7
    """vLLM colocated on each rank: fraction of GPU memory (paper: 0.7)"""
    sync_warn: float = 0.05
    """warn when engine vs trainer log-probs of the probe differ by more than this after a weight push"""
    max_obs_chars: int = 60000
    """observation length cap in characters (env side)"""
    seed: int = 0
    """seed of sampling and of the MiniWoB training episodes"""
    torch_threads: int = 1
    """CPU only: torch threads of generation (0 = torch's default; 1 is fastest while Chromium shares the cores)"""
    update_threads: int = 0
    """CPU only: torch threads of the update, which runs while the browsers are idle (0 = torch's default)"""
    save_every: int = 10
    """checkpoint every N steps (0: only at the end)"""
    resume: bool = False
    """continue from <out>/latest"""


# ---- rollouts ----

@dataclass
class Sample:
    """One action a_ij with the exact context it was generated in: ``ids = prompt + action``,
    ``mask`` 1 on the action ids, ``gen_logprobs`` what the sampler reported for them."""
    ids: list[int]
    mask: list[int]
    gen_logprobs: list[float] | None


@dataclass
class Trajectory:
    """One rollout tau_i: its group, binary reward, per-step samples and a readable log of the steps."""
    group: int
    task_id: str
    seed: int
    intent: str = ""
    reward: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    done_reason: str | None = None
    parse_errors: int = 0
    env_errors: int = 0
    truncated_tokens: int = 0


async def rollout(env: webenv.WebEnv, backend, tokenizer, task: webenv.Task, group: int, args: Args,
                  screenshot_dir: Path | None = None) -> Trajectory:
    """Run one trajectory: render -> generate -> step until done; every step becomes a token-exact Sample.

    ``args`` needs the sampling and prompt fields of ``Args`` (eval.py passes its own). With
    ``screenshot_dir``, the page is saved as ``step_<j>.png`` before each action and ``final.png`` at the
    end, and each step records its screenshot's file name."""
    traj = Trajectory(group=group, task_id=task.task_id, seed=task.seed)
    try:
        obs = await env.reset(task)
    except webenv.EpisodeCrash as e:   # a page that fails to load ends this trajectory only; training goes on
        traj.done_reason = f"reset failed: {type(e).__name__}: {e}"
        traj.env_errors += 1
        return traj
    traj.intent = obs.intent
    turns: list[compress.Turn] = []
    while True:
        prompt_ids, n_cut, shown = compress.fit_prompt(
            tokenizer, obs.intent, turns, obs.text, obs.error, max_context=args.max_context,
            max_new_tokens=args.max_new_tokens, prompt=args.prompt, compress=args.compress, return_obs=True)
        traj.truncated_tokens += n_cut
        shot = await _screenshot(env, screenshot_dir, f"step_{len(traj.steps)}.png")
        # messages: the same prompt as chat messages, for HTTP backends (OpenAIBackend); others use the ids
        messages = compress.build_messages(obs.intent, turns, shown, obs.error, prompt=args.prompt,
                                           compress=args.compress)
        gen = await backend.generate(prompt_ids, messages=messages, max_new_tokens=args.max_new_tokens,
                                     temperature=args.temperature, top_p=args.top_p)
        ids, mask = compress.rl_sample(prompt_ids, gen.ids)
        traj.samples.append(Sample(ids, mask, gen.logprobs))
        res = await env.step(gen.text)
        info = res.info
        traj.parse_errors += int(bool(info.get("parse_error")))
        traj.env_errors += int(info.get("done_reason") == "crash")
        traj.steps.append({"observation": shown, "error": obs.error, "response": gen.text,
                           "action": info.get("action"), "action_error": info.get("error"), "screenshot": shot,
                           "parse_error": bool(info.get("parse_error")), "finish_reason": gen.finish_reason})
        turns.append(compress.Turn(shown, gen.text, obs.error))
        if res.done:
            traj.reward, traj.done_reason = float(res.reward), info.get("done_reason")
            await _screenshot(env, screenshot_dir, "final.png")
            return traj
        obs = res.obs


async def _screenshot(env: webenv.WebEnv, out_dir: Path | None, name: str) -> str | None:
    """Save the active page as out_dir/name; a page that cannot be captured (crashed) gives None."""
    if out_dir is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        await env.page.screenshot(path=str(out_dir / name), timeout=10_000)
    except PlaywrightError as e:   # a crashed or closed page: the episode's own step result says why
        log.warning("screenshot %s failed: %s", out_dir / name, e)
        return None
    return name


def step_tasks(tasks: list[webenv.Task], cursor: int, n: int, seed: int) -> list[webenv.Task]:
    """Groups cursor .. cursor+n-1 of the run: group k takes task k mod len(tasks); a MiniWoB group gets
    its own episode seed from env.TRAIN_SEEDS (disjoint from the held-out env.EVAL_SEEDS)."""
    out = []
    for k in range(cursor, cursor + n):
        t = tasks[k % len(tasks)]
        if t.site == "miniwob":
            t = dataclasses.replace(t, seed=webenv.TRAIN_SEEDS[(seed * 7919 + k) % len(webenv.TRAIN_SEEDS)])
        out.append(t)
    return out


# ---- log-probs of a batch of samples ----

def forward_logprobs(model, samples: list[Sample], pad_id: int, device) -> tuple[torch.Tensor, ...]:
    """Per-token log-probs and entropies under ``model`` for right-padded samples: [N, L] each, + mask [N, L]."""
    ids, attn, mask = trainlib.pad_batch([s.ids for s in samples], [s.mask for s in samples], pad_id)
    ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
    logp, ent = trainlib.token_logprobs(model, ids, attn)
    return logp, ent, mask


# ---- advantages ----

def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """A_i = (r_i - mean(r)) / (std(r) + eps) within each group of G consecutive trajectories.

    rewards: [B * G] -> advantages [B * G]. std is the population std (a group of equal rewards
    gets A = 0, and is a "zero-std group").
    """
    r = rewards.view(-1, group_size)                                  # [B, G]
    adv = (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, unbiased=False, keepdim=True) + eps)
    return adv.view(-1)                                               # [B * G]


def eq2_weights(group_of_traj: list[int], steps_per_traj: list[int], action_tokens: list[list[int]],
                group_size: int) -> list[list[float]]:
    """Per-action weights 1 / (n_groups * G * |tau_i| * |a_ij|) of Eq. 2.

    ``group_of_traj[i]`` is trajectory i's group, ``steps_per_traj[i] = |tau_i|`` and
    ``action_tokens[i][j] = |a_ij|``. Summed over its tokens an action weighs 1/(n G |tau_i|), a
    trajectory 1/(n G), a group 1/n and the batch 1: Eq. 2 averaged over the n groups of the batch.
    Micro-batches of samples then simply add up.
    """
    n_groups = len(set(group_of_traj))
    return [[1.0 / (n_groups * group_size * steps_per_traj[i] * n) for n in action_tokens[i]]
            for i in range(len(group_of_traj))]


# ---- loss ----

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


# ---- the training loop ----

def main(args: Args) -> Path:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    rank, local_rank, world = trainlib.init_distributed()
    trainlib.set_cpu_threads(args.update_threads)   # this thread updates; generation has its own thread
    device, dtype = policy.decide_device()
    if not args.ds_config:
        args.ds_config = "configs/zero3.json" if device.type == "cuda" else "configs/zero0.json"
    if args.zero_std not in ("skip", "keep"):
        raise SystemExit(f"--zero-std must be skip or keep, got {args.zero_std!r}")
    if args.tasks_per_step % world:
        raise SystemExit(f"--tasks-per-step {args.tasks_per_step} must be a multiple of the world size {world}")
    # derived
    groups_per_rank = args.tasks_per_step // world
    out = Path(args.out)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        log.info("args %s", json.dumps(vars(args)))
        log.info("%d trajectories per step = B %d x G %d, %d groups per rank",
                 args.tasks_per_step * args.group_size, args.tasks_per_step, args.group_size, groups_per_rank)
    torch.manual_seed(args.seed * 1000 + rank)
    tasks = [dataclasses.replace(t, max_steps=args.max_turns) for t in webenv.load_tasks(args.tasks)]

    # ---- models ----
    model, tokenizer = policy.load(args.model, device=device, dtype=dtype)
    ref_model = None
    if args.beta != 0.0:   # frozen reference pi_ref for the KL term
        ref_model, _ = policy.load(args.model, device=device, dtype=dtype)
        ref_model.eval().requires_grad_(False)
    if args.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    cfg = trainlib.ds_config(args.ds_config, micro_batch=args.micro_batch, grad_accum=1, world_size=world,
                             bf16=dtype == torch.bfloat16, grad_clip=args.grad_clip)
    engine = trainlib.make_engine(model, cfg, lr=args.lr, weight_decay=0.0, schedule=trainlib.constant)
    if args.backend == "hf":
        if trainlib.zero_stage(cfg) == 3 and world > 1:
            raise SystemExit("--backend hf with ZeRO-3 on several ranks would gather weights in lock-step for "
                             "every generated token; use --backend vllm, or ZeRO-0/2 (configs/zero2.json)")
        backend = policy.HFBackend(engine.module, tokenizer, max_new_tokens=args.max_new_tokens,
                                   temperature=args.temperature, top_p=args.top_p,
                                   num_threads=args.torch_threads if device.type == "cpu" and args.torch_threads else None)
    elif args.backend == "vllm":
        backend = policy.VLLMBackend(args.model, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                     top_p=args.top_p, gpu_memory_utilization=args.vllm_gpu_memory,
                                     max_model_len=args.max_context, seed=args.seed + rank)
    else:
        raise SystemExit(f"--backend must be hf or vllm, got {args.backend!r}")

    loop = asyncio.new_event_loop()
    step, cursor = 0, 0   # RL steps done; groups consumed (all ranks)
    if args.resume and (ckpt := trainlib.latest_checkpoint(out)):
        state = trainlib.load_checkpoint(engine, ckpt, rank)
        step, cursor = state["step"], state["cursor"]
        log.info("resumed from %s at step %d", ckpt, step)
        if args.backend == "vllm":
            loop.run_until_complete(policy.push_weights_to_vllm(backend, engine.module))

    metrics = trainlib.Metrics(out, enabled=rank == 0)
    stop = {"flag": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(flag=True))   # Ctrl-C: finish the step, save, exit
    from tqdm import tqdm
    bar = tqdm(total=args.steps, initial=step, desc="m-grpo", disable=rank != 0, dynamic_ncols=True)
    pool = loop.run_until_complete(webenv.BrowserPool().__aenter__())
    envs = [loop.run_until_complete(pool.new_env(max_obs_chars=args.max_obs_chars))
            for _ in range(groups_per_rank * args.group_size)]
    try:
        while step < args.steps and not stop["flag"]:
            # ---- rollouts ----
            t0 = time.time()
            engine.module.eval()
            my_tasks = step_tasks(tasks, cursor + rank * groups_per_rank, groups_per_rank, args.seed)
            jobs = [rollout(envs[g * args.group_size + i], backend, tokenizer, task, g, args)
                    for g, task in enumerate(my_tasks) for i in range(args.group_size)]
            trajs: list[Trajectory] = loop.run_until_complete(_gather(jobs))
            cursor += args.tasks_per_step
            t_rollout = time.time() - t0

            # ---- advantages ----
            rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
            adv = group_advantages(rewards, args.group_size)                                  # [groups * G]
            zero_std = rewards.view(-1, args.group_size).std(dim=1, unbiased=False) == 0      # [groups]
            kept = [g for g in range(groups_per_rank) if args.zero_std == "keep" or not zero_std[g]]
            n_kept = _all_reduce_sum(len(kept))   # groups in the loss, all ranks together
            samples, sample_adv, sample_w = [], [], []
            if n_kept:
                keep_trajs = [i for i, t in enumerate(trajs) if t.group in kept and t.samples]
                weights = eq2_weights([trajs[i].group for i in keep_trajs], [len(trajs[i].samples) for i in keep_trajs],
                                      [[sum(s.mask) for s in trajs[i].samples] for i in keep_trajs], args.group_size)
                for i, w_i in zip(keep_trajs, weights):
                    for s, w in zip(trajs[i].samples, w_i):
                        samples.append(s)
                        sample_adv.append(float(adv[i]))
                        # DeepSpeed averages gradients over ranks: scale so the sum over ranks is Eq. 2's
                        # mean over all n_kept groups of the step.
                        sample_w.append(w * len(kept) / n_kept * world)

            # ---- update (Eq. 2) ----
            t1 = time.time()
            engine.module.train()
            train_stats = update(engine, ref_model, samples, sample_adv, sample_w, tokenizer.pad_token_id, args) if n_kept else {}
            t_train = time.time() - t1
            step += 1
            if args.backend == "vllm" and n_kept:
                # ---- sync weights ----
                loop.run_until_complete(policy.push_weights_to_vllm(backend, engine.module))
                train_stats["sync/max_logprob_diff"] = loop.run_until_complete(
                    probe_sync(backend, engine.module, trajs, args))

            # ---- log ----
            stats = rollout_stats(trajs, zero_std, t_rollout, t_train)
            stats.update(train_stats)
            stats = _all_reduce_mean(stats)
            metrics.log(step, stats)
            if rank == 0:
                best = max(trajs, key=lambda t: (t.reward, -len(t.steps)))
                with (out / "trajectories.jsonl").open("a") as f:
                    f.write(json.dumps({"step": step, "task": best.task_id, "seed": best.seed, "intent": best.intent,
                                        "reward": best.reward, "done_reason": best.done_reason, "steps": best.steps}) + "\n")
                bar.set_postfix(success=f"{stats['rollout/success_rate']:.2f}", turns=f"{stats['rollout/num_turns']:.1f}")
            bar.update(1)
            if args.save_every and step % args.save_every == 0 and step < args.steps:
                trainlib.save_checkpoint(engine, tokenizer, out, step, {"cursor": cursor}, rank)
    finally:
        if hasattr(backend, "aclose"):
            loop.run_until_complete(backend.aclose())
        loop.run_until_complete(pool.__aexit__(None, None, None))
        loop.close()
        bar.close()

    # ---- save ----
    ckpt = trainlib.save_checkpoint(engine, tokenizer, out, step, {"cursor": cursor}, rank)
    final = trainlib.publish_hf(ckpt, out, rank)
    if rank == 0:
        metrics.close()
        trainlib.plot_metrics(out / "metrics.jsonl", [("rollout/success_rate", "success rate"),
                              ("rollout/response_tokens", "response tokens / trajectory"),
                              ("rollout/num_turns", "interactions / trajectory")],
                              out / "dynamics.png", title=f"M-GRPO training dynamics ({args.model})")
        log.info("saved %s%s", final, " (interrupted)" if stop["flag"] else "")
    torch.distributed.barrier()
    return final


def update(engine, ref_model, samples: list[Sample], adv: list[float], weight: list[float], pad_id: int,
           args: Args) -> dict[str, float]:
    """``updates_per_batch`` optimizer steps on this rank's samples (Eq. 2). Every rank runs the same number
    of micro-batches (ZeRO-3 gathers parameters collectively): a rank with fewer pads with zero-weight ones."""
    n_micro = _all_reduce_max(math.ceil(len(samples) / args.micro_batch))
    dummy = Sample([pad_id, pad_id], [0, 0], None)
    chunks = [samples[i * args.micro_batch:(i + 1) * args.micro_batch] or [dummy] for i in range(n_micro)]
    adv_t, w_t = torch.tensor(adv + [0.0]), torch.tensor(weight + [0.0])
    index = [list(range(i * args.micro_batch, min((i + 1) * args.micro_batch, len(samples)))) or [len(samples)]
             for i in range(n_micro)]
    dev = engine.device

    ref_logps, old_logps = [], []
    with torch.no_grad():
        for chunk in chunks:
            if ref_model is not None:
                ref_logps.append(forward_logprobs(ref_model, chunk, pad_id, dev)[0])
            if args.updates_per_batch > 1:   # pi_old: the policy before the first update
                old_logps.append(forward_logprobs(engine, chunk, pad_id, dev)[0])

    totals: dict[str, float] = {"train/loss": 0.0, "train/kl": 0.0, "train/clip_frac": 0.0, "train/entropy": 0.0}
    n_tok = 0.0
    for _ in range(args.updates_per_batch):
        for k, (chunk, idx) in enumerate(zip(chunks, index)):
            logp, ent, mask = forward_logprobs(engine, chunk, pad_id, dev)               # [n, L] each
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
    totals["train/loss"] /= args.updates_per_batch
    totals["train/grad_norm"] = trainlib.last_grad_norm(engine, gn)
    totals["train/samples"] = float(len(samples))
    totals["train/lr"] = engine.get_lr()[0]
    return totals


async def probe_sync(backend, model, trajs: list[Trajectory], args: Args) -> float:
    """Max |log p_engine - log p_trainer| over the action tokens of one sample, after a weight push."""
    probe = next((s for t in trajs for s in t.samples), None)
    if probe is None:
        return 0.0
    with torch.no_grad():
        logp, _, mask = forward_logprobs(model, [probe], backend.tokenizer.pad_token_id, next(model.parameters()).device)
    start = probe.mask.index(1)
    trainer = logp[0, start:len(probe.ids)].float().cpu()
    engine_lp = torch.tensor(await backend.logprobs_of(probe.ids[:start], probe.ids[start:]))
    diff = float((trainer - engine_lp).abs().max())
    if diff > args.sync_warn:
        log.warning("!!! WEIGHT SYNC CHECK FAILED: vLLM and trainer log-probs differ by %.3f (> %.3f) after the "
                    "push; the engine may be generating with stale weights !!!", diff, args.sync_warn)
    return diff


def rollout_stats(trajs: list[Trajectory], zero_std: torch.Tensor, t_rollout: float, t_train: float) -> dict[str, float]:
    n = max(len(trajs), 1)
    steps = sum(len(t.steps) for t in trajs)
    return {
        "rollout/reward": sum(t.reward for t in trajs) / n,
        "rollout/success_rate": sum(t.reward > 0 for t in trajs) / n,
        "rollout/response_tokens": sum(sum(s.mask) for t in trajs for s in t.samples) / n,
        "rollout/num_turns": steps / n,
        "rollout/parse_fail_rate": sum(t.parse_errors for t in trajs) / max(steps, 1),
        "rollout/env_errors": float(sum(t.env_errors for t in trajs)),
        "rollout/truncated_tokens": float(sum(t.truncated_tokens for t in trajs)),
        "rollout/frac_zero_std": float(zero_std.float().mean()) if len(zero_std) else 0.0,
        "rollout/seconds": t_rollout,
        "train/seconds": t_train,
    }


async def _gather(coros: list) -> list:
    return await asyncio.gather(*coros)


def _all_reduce(value: torch.Tensor, op) -> torch.Tensor:
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(value, op=op)
    return value


def _all_reduce_sum(x: int) -> int:
    return int(_all_reduce(torch.tensor([x], dtype=torch.long), torch.distributed.ReduceOp.SUM).item())


def _all_reduce_max(x: int) -> int:
    return int(_all_reduce(torch.tensor([x], dtype=torch.long), torch.distributed.ReduceOp.MAX).item())


def _all_reduce_mean(stats: dict[str, float]) -> dict[str, float]:
    keys = sorted(stats)
    t = _all_reduce(torch.tensor([stats[k] for k in keys], dtype=torch.float64), torch.distributed.ReduceOp.SUM)
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    return {k: float(v) / world for k, v in zip(keys, t)}


if __name__ == "__main__":
    main(trainlib.parse_args(Args))
