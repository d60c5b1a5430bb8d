"""The paper-scale training path end to end on one device, in minutes: a random-weight model of a real shape
(Qwen2.5-0.5B or Qwen2.5-3B: their configs, Qwen2.5's vocabulary of 151,936), bf16 on a GPU, ZeRO-3 on one
rank, SDPA attention; M-GRPO updates (Eq. 2, with the reference model's KL) on recorded multi-turn samples,
BC steps (Eq. 1), a checkpoint saved and reloaded in the training dtype, and the trainer's log-probs against
a fresh forward of the reloaded model, and the engine/trainer mismatch of the samples (vLLM in bf16 against
ZeRO-3 where vLLM is installed: ``engine_mismatch``). Prints tokens/s, MFU with its formula, and GPU memory per phase (load,
update, BC, save and reload: peak allocated and reserved, what is held at its end, and what
``optim.free_cached_memory`` hands back after load and after the update, where the trainer calls it before
vLLM starts and before it wakes).

What the samples are: B x G trajectories of T turns; turn t's sample is the conversation so far (a prompt of
``--prompt-tokens`` per turn, growing, as a multi-turn agent's context does) and an action of
``--action-tokens``; rewards alternate within a group so every group carries a signal. Token ids are random:
the cost and the memory of a step depend on the shapes, not on the text.

MFU = model FLOPs / seconds / peak FLOPs of the device, model FLOPs counted as the usual dense-transformer
estimate per token: forward 2 N + 4 n_layers h s_ctx (N non-embedding parameters + the LM head's h V where
it runs, attention over the token's causal context s_ctx ~ half the sequence), backward twice the forward;
the M-GRPO update = policy forward + backward + the reference forward (no_grad), on every token for the body
and on the action tokens only for the LM head (``logprobs.action_logprobs``). Recomputation is not counted.

Run (GPU):  .venv/bin/python bench/gpu_path.py --shape 0.5b && .venv/bin/python bench/gpu_path.py --shape 3b
Run (CPU, what tests/test_gpu_path.py runs):  .venv/bin/python bench/gpu_path.py --shape tiny
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

QWEN25_VOCAB = 151_936
#: (hidden, intermediate, layers, heads, kv heads): Qwen2.5-0.5B and -3B (tied embeddings), and a CPU size
SHAPES = {"0.5b": (896, 4864, 24, 14, 2), "3b": (2048, 11008, 36, 16, 2), "tiny": (64, 128, 2, 4, 2)}
#: dense bf16 peak, TFLOP/s (H100 / H200 SXM: 989; A100: 312)
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=list(SHAPES), default="0.5b")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=1024, help="new prompt tokens per turn")
    ap.add_argument("--action-tokens", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--updates", type=int, default=2, help="M-GRPO updates (the first one is warm-up, not timed)")
    ap.add_argument("--bc-steps", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the device's peak (default: by its name)")
    ap.add_argument("--out", default="", help="where the checkpoint goes (default: a temporary directory)")
    return ap


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainlib import cli  # noqa: E402

cli.answer_help(parser().parse_args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402

from engines import hf_backend  # noqa: E402
import logprobs  # noqa: E402
import policy  # noqa: E402
from trainlib import checkpoints, distributed, optim  # noqa: E402
from rollout import Sample, Trajectory  # noqa: E402
from mismatch import engine_logprobs, mismatch_stats, mismatch_sums  # noqa: E402
from train_mgrpo import Args as MGRPOArgs, mgrpo_batch, update  # noqa: E402


def build(shape: str, device: torch.device, dtype: torch.dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    hidden, inter, layers, heads, kv = SHAPES[shape]
    cfg = Qwen2Config(vocab_size=QWEN25_VOCAB, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                      tie_word_embeddings=True, max_position_embeddings=32768, rope_theta=1e6,
                      attn_implementation=policy.attn_implementation(device, dtype))
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):     # built and initialised on the device (3B on a CPU core: minutes)
            return Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)


def trajectories(groups: int, group_size: int, turns: int, prompt_tokens: int, action_tokens: int,
                 seed: int = 0) -> list[Trajectory]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(groups):
        for i in range(group_size):
            t = Trajectory(group=k, task_id=f"task{k}", seed=k, reward=float(i % 2))
            context: list[int] = []
            for _ in range(turns):
                context += torch.randint(0, QWEN25_VOCAB, (prompt_tokens,), generator=g).tolist()
                action = torch.randint(0, QWEN25_VOCAB, (action_tokens,), generator=g).tolist()
                t.samples.append(Sample(context + action, [0] * len(context) + [1] * len(action)))
                context = context + action
            out.append(t)
    return out


def model_flops(cfg, body: int, samples: list[Sample], passes: float) -> float:
    """Dense-transformer FLOPs of ``passes`` forward-equivalents (forward = 1, forward + backward = 3) of the
    body (``body`` parameters without the embeddings) on every token and of the LM head on the action tokens."""
    h, n_layers = cfg.hidden_size, cfg.num_hidden_layers
    total = 0.0
    for s in samples:
        n, k = len(s.ids), sum(s.mask)
        total += passes * (2 * body * n + 4 * n_layers * h * n * (n / 2) + 2 * h * cfg.vocab_size * k)
    return total


class PhaseMemory:
    """GPU memory per phase, GiB: the peaks allocated and reserved inside it (reset at its start) and what is
    allocated and reserved at its end. Records nothing on a CPU."""

    def __init__(self, cuda: bool):
        self.cuda, self.phases = cuda, {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        yield
        if self.cuda:
            torch.cuda.synchronize()
            self.phases[name] = {k: round(v / 2**30, 2) for k, v in (
                ("peak_allocated", torch.cuda.max_memory_allocated()),
                ("peak_reserved", torch.cuda.max_memory_reserved()),
                ("end_allocated", torch.cuda.memory_allocated()), ("end_reserved", torch.cuda.memory_reserved()))}

    def freed(self, name: str) -> None:
        """``optim.free_cached_memory`` at the end of phase ``name``: what it handed back."""
        if self.cuda:
            self.phases[name]["freed_by_empty_cache"] = round(optim.free_cached_memory() / 2**30, 2)


def engine_mismatch(hf_dir: Path, samples: list[Sample], engine, pad_id: int, device: torch.device,
                    dtype: torch.dtype, micro_batch: int) -> tuple[str, dict[str, float]]:
    """train_mgrpo's mismatch figures (``mismatch/*``) of the samples between a rollout engine loaded from the
    checkpoint and the ZeRO-3 trainer: vLLM in bf16 where it is installed on a GPU (what a paper-scale run rolls out
    with), else an HF model in the training dtype scoring each sample alone (another batch and kernel path than the
    trainer's; on a CPU, float32: the figures are rounding). Returns (which engine, the figures)."""
    starts = [logprobs.action_start(s) for s in samples]
    name = f"hf {dtype}"
    engine_lp = None
    if device.type == "cuda" and importlib.util.find_spec("vllm") is not None:
        try:
            from engines import vllm_backend
            backend = vllm_backend.VLLMBackend(str(hf_dir), dtype="bfloat16", gpu_memory_utilization=0.3,
                                               max_model_len=max(len(s.ids) for s in samples) + 8)

            async def score():
                try:
                    return [await backend.logprobs_of(s.ids[:a], s.ids[a:]) for s, a in zip(samples, starts)]
                finally:
                    await backend.aclose()
            engine_lp, name = asyncio.run(score()), "vllm bfloat16"
        except Exception as e:   # say why, and measure the HF engine instead
            name = f"hf {dtype} (vLLM failed: {type(e).__name__}: {str(e).splitlines()[0][:160]})"
    if engine_lp is None:
        model, _ = policy.load(str(hf_dir), device=device, dtype=dtype)
        engine_lp = [hf_backend.model_logprobs(model, s.ids[:a], s.ids[a:]) for s, a in zip(samples, starts)]
        del model
    scored = [Sample(s.ids, s.mask, lp) for s, lp in zip(samples, engine_lp)]
    sums = []
    engine.eval()
    with torch.no_grad():
        for i in range(0, len(scored), micro_batch):
            chunk = scored[i:i + micro_batch]
            logp, _, mask = logprobs.forward_logprobs(engine, chunk, pad_id, device)
            sums.append(mismatch_sums(logp.float(), engine_logprobs(chunk, mask), mask))
    return name, mismatch_stats(sums)


def main() -> None:
    a = parser().parse_args()

    rank, _, _ = distributed.init_distributed()
    device, dtype = policy.decide_device()
    cuda = device.type == "cuda"
    memory = PhaseMemory(cuda)
    with memory("load"):
        model = build(a.shape, device, dtype)
        n_params = sum(p.numel() for p in model.parameters())
        body = sum(p.numel() for name, p in model.named_parameters()
                   if "embed_tokens" not in name and "lm_head" not in name)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        tokenizer = policy.build_tokenizer(["a b c d e f g"] * 10, vocab_size=300)
        cfg = optim.ds_config("configs/zero3.json", micro_batch=a.micro_batch, grad_accum=1, world_size=1,
                              bf16=dtype == torch.bfloat16, grad_clip=1.0)
        engine = optim.make_engine(model, cfg, lr=1e-5, weight_decay=0.0, schedule=optim.linear_warmup(0))
        ref = optim.make_reference(build(a.shape, device, dtype), cfg)
    memory.freed("load")              # train_mgrpo: before the vLLM engine starts
    args = MGRPOArgs(micro_batch=a.micro_batch)
    trajs = trajectories(a.groups, a.group_size, a.turns, a.prompt_tokens, a.action_tokens)
    batch = mgrpo_batch(trajs)
    samples = batch.samples
    tokens = sum(len(s.ids) for s in samples)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    # ---- M-GRPO updates (Eq. 2, KL to the reference) ----
    engine.train()
    times = []
    with memory("update"):
        for _ in range(a.updates):
            sync()
            t0 = time.perf_counter()
            stats = update(engine, ref, batch, tokenizer.pad_token_id, args)
            sync()
            times.append(time.perf_counter() - t0)
    memory.freed("update")            # train_mgrpo: before the engine wakes
    t_update = min(times[1:] or times)

    # ---- BC steps (Eq. 1) on the same samples ----
    with memory("bc"):
        sync()
        t0 = time.perf_counter()
        for step in range(a.bc_steps):
            chunk = samples[(step * a.micro_batch) % len(samples):][:a.micro_batch]
            padded = logprobs.pad_batch([s.ids for s in chunk], [s.mask for s in chunk], tokenizer.pad_token_id)
            ids, attn, mask = (x.to(device) for x in padded)
            logp, _, _ = logprobs.action_logprobs(engine, ids, attn, mask)
            loss = -(logp * mask).sum() / mask.sum()
            engine.backward(loss)
            engine.step()
        sync()
        t_bc = (time.perf_counter() - t0) / a.bc_steps if a.bc_steps else None   # --bc-steps 0: nothing to time
    bc_tokens = sum(len(s.ids) for s in samples[:a.micro_batch])

    # ---- checkpoint, reload in the training dtype, compare log-probs ----
    with tempfile.TemporaryDirectory() as tmp, memory("save_reload"):
        out = Path(a.out or tmp)
        ckpt = checkpoints.save_checkpoint(engine, tokenizer, out, 1, {}, rank)
        reloaded, _ = policy.load(str(ckpt / "hf"), device=device, dtype=dtype)
        probe = samples[:1]
        ids, attn, mask = (x.to(device) for x in logprobs.pad_batch([s.ids for s in probe], [s.mask for s in probe],
                                                                    tokenizer.pad_token_id))
        engine.eval()
        with torch.no_grad():
            trainer = logprobs.action_logprobs(engine, ids, attn, mask)[0]
            fresh = logprobs.action_logprobs(reloaded, ids, attn, mask)[0]
            init = logprobs.action_logprobs(ref, ids, attn, mask)[0]          # the untrained weights
        on = mask.bool()
        reload_diff = float((trainer[on] - fresh[on]).abs().max())
        trained_diff = float((init[on] - fresh[on]).abs().max())
        reloaded_dtype = str(next(reloaded.parameters()).dtype)

    # ---- the engine is not the trainer (issue 86): an engine's log-probs of the samples against ZeRO-3's ----
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoints.save_checkpoint(engine, tokenizer, Path(a.out or tmp), 2, {}, rank)
        mismatch_engine, mismatch = engine_mismatch(ckpt / "hf", samples, engine, tokenizer.pad_token_id, device,
                                                    dtype, a.micro_batch)

    peak = (max(p["peak_allocated"] for p in memory.phases.values()) * 2**30 if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    name = torch.cuda.get_device_name() if cuda else "cpu"
    peak_tflops = a.peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in name), 0.0)
    hf_cfg = engine.module.config
    update_flops = model_flops(hf_cfg, body, samples, passes=3 + 1)        # policy forward + backward, reference
    bc_flops = model_flops(hf_cfg, body, samples[:a.micro_batch], passes=3)
    mfu = (lambda flops, s: flops / s / (peak_tflops * 1e12) if peak_tflops and s else None)
    result = {
        "shape": a.shape, "device": name, "dtype": str(dtype), "params": n_params,
        "attention": hf_cfg._attn_implementation,
        "zero_stage": optim.zero_stage(cfg), "samples": len(samples), "update_tokens": tokens,
        "update_seconds": t_update, "update_tokens_per_s": tokens / t_update,
        "update_mfu": mfu(update_flops, t_update), "bc_seconds_per_step": t_bc,
        "bc_tokens_per_s": bc_tokens / t_bc if t_bc else None,
        "bc_mfu": mfu(bc_flops, t_bc), "peak_memory_gib": peak / 2**30, "train_loss": stats["train/loss"],
        "reloaded_dtype": reloaded_dtype, "reload_max_logprob_diff": reload_diff,
        "trained_vs_init_max_logprob_diff": trained_diff, "memory_gib_by_phase": memory.phases,
        "micro_batch": a.micro_batch, "sample_tokens_max": max(len(s.ids) for s in samples),
        "mismatch_engine": mismatch_engine, "mismatch": mismatch,
        "mfu_formula": "(fwd 2 N_body + 4 layers h s/2 per token, + 2 h V per action token) x (3 policy + 1 "
                       "reference) / seconds / peak",
    }
    if rank == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
