"""The optimizer side of a trainer: the DeepSpeed config (read and checked before anything heavy loads) and
engine (``make_engine``: AdamW and a LambdaLR schedule), the frozen reference model pi_ref, one micro-batch's
backward and step (``accumulate``), the gradient norm, the learning-rate schedules, and the CPU threads and GPU
cache a trainer manages around its steps."""
from __future__ import annotations

import gc
import json
import logging
import math
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("webagent")


def ds_config(path: str, *, micro_batch: int, grad_accum: int, world_size: int, bf16: bool,
              grad_clip: float) -> dict[str, Any]:
    """Load a configs/*.json DeepSpeed config and fill the batch, precision and clipping fields.

    Effective batch = micro_batch x grad_accum x world_size (DeepSpeed checks the identity).
    """
    cfg = read_ds_config(path)
    cfg.update(train_micro_batch_size_per_gpu=micro_batch, gradient_accumulation_steps=grad_accum,
               train_batch_size=micro_batch * grad_accum * world_size, gradient_clipping=grad_clip,
               zero_allow_untested_optimizer=True)
    cfg["bf16"] = {"enabled": bool(bf16)}
    offload = cfg.get("zero_optimization", {}).get("offload_optimizer", {}).get("device") == "cpu"
    if offload:   # ZeRO-Offload steps the optimizer on the CPU with DeepSpeed's own Adam
        cfg.setdefault("optimizer", {"type": "AdamW", "params": {}})
    return cfg


#: Top-level keys of DeepSpeed configs; a key within a small edit of one of them is a typo, refused.
_DS_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
            "scheduler", "fp16", "bf16", "amp", "gradient_clipping", "zero_optimization",
            "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "steps_per_print",
            "wall_clock_breakdown", "memory_breakdown", "dump_state", "prescale_gradients",
            "gradient_predivide_factor", "sparse_gradients", "communication_data_type", "activation_checkpointing",
            "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comms_logger", "aio", "elasticity",
            "data_efficiency", "compression_training", "checkpoint", "data_types", "autotuning", "pipeline",
            "compile", "torch_autocast", "hybrid_engine", "weight_quantization", "timers", "seq_parallel_communication_data_type")


def checked_ds_config(path: str, device: torch.device) -> str:
    """``--ds-config``, or the default for ``device`` when empty (ZeRO-3 on a GPU, ZeRO-0 on a CPU), read once so
    that a broken file fails now (exit, naming the field), not after the data and the model loaded."""
    path = path or ("configs/zero3.json" if device.type == "cuda" else "configs/zero0.json")
    try:
        read_ds_config(path)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    return path


def read_ds_config(path: str) -> dict[str, Any]:
    """A DeepSpeed config file, checked before anything heavy loads: valid JSON, an object, no misspelled
    top-level key (``zero_optimizaton`` would silently turn ZeRO off), and a ``zero_optimization`` section
    DeepSpeed itself accepts (its pydantic model refuses unknown keys). Errors name the file and the key."""
    import difflib
    try:
        cfg = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"DeepSpeed config {path}: cannot read it ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"DeepSpeed config {path}: not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"DeepSpeed config {path}: must be a JSON object, not {type(cfg).__name__}")
    for key in cfg:
        near = difflib.get_close_matches(key, _DS_KEYS, n=1, cutoff=0.8)
        if near and near[0] != key:
            raise ValueError(f"DeepSpeed config {path}: unknown key {key!r}; did you mean {near[0]!r}?")
    zero = cfg.get("zero_optimization", {})
    if not isinstance(zero, dict):
        raise ValueError(f"DeepSpeed config {path}: zero_optimization must be an object")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    try:
        DeepSpeedZeroConfig(**zero)
    except Exception as e:   # pydantic's ValidationError: which field, and why
        raise ValueError(f"DeepSpeed config {path}: zero_optimization: {' '.join(str(e).split())[:300]}") from None
    return cfg


def zero_stage(cfg: dict[str, Any]) -> int:
    return int(cfg.get("zero_optimization", {}).get("stage", 0))


def make_engine(model: torch.nn.Module, cfg: dict[str, Any], *, lr: float, weight_decay: float,
                schedule, betas: tuple[float, float] = (0.9, 0.999)) -> Any:
    """deepspeed.initialize with AdamW (torch's, or DeepSpeed's own when offloading the optimizer) of ``betas``
    and a LambdaLR schedule (``schedule(step) -> lr multiplier``) that DeepSpeed steps at each
    optimizer step and saves with its checkpoints. Returns the engine."""
    import deepspeed
    params = [p for p in model.parameters() if p.requires_grad]
    make_sched = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule)  # noqa: E731
    if "optimizer" in cfg:
        cfg["optimizer"]["params"].update(lr=lr, weight_decay=weight_decay, betas=list(betas))
        engine, *_ = deepspeed.initialize(model=model, model_parameters=params, config=cfg,
                                          lr_scheduler=make_sched)
    else:
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas)
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg, lr_scheduler=make_sched)
    return engine


def make_reference(model: torch.nn.Module, cfg: dict[str, Any]) -> Any:
    """The frozen reference model pi_ref, held like the policy: under ZeRO-3 a DeepSpeed engine without an
    optimizer whose parameters are partitioned over the ranks (each GPU keeps 1/world of them and gathers a
    layer's for its forward, as for the policy), otherwise the model itself. Its forwards are collective under
    ZeRO-3, so every rank must run the same ones (train_mgrpo.update runs the same micro-batches on each)."""
    ref = model.eval().requires_grad_(False)
    if zero_stage(cfg) == 3:
        import deepspeed
        ref_cfg = {k: v for k, v in cfg.items() if k in ("train_micro_batch_size_per_gpu", "train_batch_size",
                                                         "gradient_accumulation_steps", "bf16", "zero_optimization")}
        ref, *_ = deepspeed.initialize(model=model, config=ref_cfg)
        ref.eval()
    held = sum(p.numel() or p.ds_tensor.numel() for p in ref.parameters())   # ZeRO-3: this rank's partition
    full = sum(getattr(p, "ds_numel", p.numel()) for p in ref.parameters())
    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    log.info("reference model: %d of its %d parameters held on rank %d", held, full, rank)
    return ref


def free_cached_memory() -> int:
    """Hand the GPU memory PyTorch's allocator holds but no tensor uses back to the driver; returns the bytes
    handed back (0 on a CPU). Freed tensors stay in PyTorch's cache, which no other process can use: vLLM's
    engine (its own processes) checks free memory before it starts and re-allocates its share when it wakes,
    so the trainer calls this before both (the full-size copies that loading left behind before ZeRO-3
    partitioned them, the update's activations)."""
    if not torch.cuda.is_available():
        return 0
    gc.collect()
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    return before - torch.cuda.memory_reserved()


def set_cpu_threads(n: int) -> None:
    """Torch threads when training on the CPU (0: torch's default). Chromium shares the cores during
    rollouts, and spin-waiting OpenMP workers then cost more than a second thread gains."""
    if n > 0 and not torch.cuda.is_available():
        torch.set_num_threads(n)


def grad_norm(engine) -> float:
    """Global gradient norm of the last optimizer step. Call it right before the boundary ``engine.step()``:
    under ZeRO-0 DeepSpeed does not record it, so it is computed from ``.grad``; ZeRO-1/2/3 report it after
    the step, see ``engine.get_global_grad_norm()``."""
    if engine.zero_optimization_stage() > 0:
        return -1.0
    sq = sum(float(p.grad.detach().float().pow(2).sum()) for p in engine.module.parameters() if p.grad is not None)
    return math.sqrt(sq)


def last_grad_norm(engine, before_step: float) -> float:
    """``grad_norm``'s value, or DeepSpeed's own record when it keeps one (ZeRO >= 1)."""
    if before_step >= 0:
        return before_step
    gn = engine.get_global_grad_norm()
    return float(gn) if gn is not None else float("nan")


def accumulate(engine, loss: torch.Tensor, boundary: bool) -> float:
    """One micro-batch's backward into the engine's gradient (the loss already carries its weight: nothing divided
    by the accumulation steps) and ``engine.step()``, which steps the optimizer at the ``boundary`` (the last
    micro-batch). Returns the gradient norm there (clipping's input), -1 elsewhere."""
    engine.set_gradient_accumulation_boundary(boundary)
    engine.backward(loss, scale_wrt_gas=False)
    norm = grad_norm(engine) if boundary else -1.0
    engine.step()
    return norm


def cosine_with_warmup(total_steps: int, warmup_frac: float):
    """Linear warmup over warmup_frac of the steps, then cosine decay to 0 (the paper's SFT schedule)."""
    warmup = max(1, int(round(total_steps * warmup_frac)))

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return f


def linear_warmup(warmup_steps: int):
    """Linear warm-up over ``warmup_steps`` optimizer steps, then constant (0 steps: constant)."""
    def schedule(step: int) -> float:
        return min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else 1.0
    return schedule
