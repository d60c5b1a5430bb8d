"""Plumbing shared by train_bc.py and train_mgrpo.py: DeepSpeed launch and config, learning-rate
schedules, collectives, the optimizer step, atomic checkpoints that resume, and metrics (JSONL, TensorBoard, PNG).

Nothing here is specific to the method; the two scripts keep the paper's logic readable on top.

- ``python train_x.py`` works without the ``deepspeed`` launcher: ``init_distributed`` sets
  RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT for a single process (gloo on CPU, nccl on GPU).
- A checkpoint directory ``<out>/step_<n>/`` holds ``hf/`` (model + tokenizer, loadable by
  ``from_pretrained`` and ``policy.load``), ``ds/`` (DeepSpeed model/optimizer/scheduler states) and
  ``trainer_state.json`` (step, task cursor, RNG states). It is written to ``step_<n>.tmp`` and renamed
  when complete, and ``<out>/latest`` names the newest complete one, so a crash never leaves a
  half-written checkpoint that a resume would pick up.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import math
import os
import platform
import random
import re
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger("webagent")


# ---- command line ----

def parse_args(cls, argv: list[str] | None = None):
    """Parse the command line into an ``Args`` dataclass with ``tyro`` (as CleanRL's scripts do): one ``--flag``
    per field, its help the docstring written under the field, booleans as ``--x/--no-x``, ``Literal[...]``
    fields as choices. A field whose type is itself a dataclass (a config shared by several scripts, e.g.
    ``rollout.EpisodeConfig``) contributes its fields as flags of their own (``--temperature``, no prefix), with
    the defaults of the instance the script's ``Args`` builds. The ``--local_rank`` the deepspeed launcher
    appends is accepted and dropped; anything else unknown is an error."""
    import tyro   # here: the processes that import trainlib for its other parts never parse a command line
    argv = list(sys.argv[1:] if argv is None else argv)
    ranks = [k for k, a in enumerate(argv) if a.split("=")[0] in ("--local_rank", "--local-rank")]
    for k in reversed(ranks):
        del argv[k:k + (1 if "=" in argv[k] else 2)]
    return tyro.cli(cls, args=argv, config=(tyro.conf.OmitArgPrefixes,),
                    description=(cls.__doc__ or "").strip())


def args_dict(args) -> dict[str, Any]:
    """An ``Args`` instance as one flat dict (the flags and their values), for logs and results files."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(args):
        value = getattr(args, f.name)
        out.update(args_dict(value) if dataclasses.is_dataclass(value) else {f.name: value})
    return out


# ---- distributed launch ----

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def uses_cuda() -> bool:
    """Whether the models go to CUDA: ``WEBAGENT_DEVICE`` (``policy.decide_device``'s override) or availability."""
    choice = os.environ.get("WEBAGENT_DEVICE")
    return choice.startswith("cuda") if choice else torch.cuda.is_available()


def collective_timeout_s(episode_timeout: float) -> float:
    """How long a collective waits for the slowest rank: a step's rollouts run in parallel, each bounded by
    ``episode_timeout``, so ranks can reach the next collective up to about that far apart (and a round of
    dynamic sampling more); twice that, at least 30 minutes. DeepSpeed's default, 10 minutes, is shorter than
    the default episode timeout (15 minutes)."""
    return max(1800.0, 2.0 * episode_timeout)


def init_distributed(timeout_s: float = 1800.0) -> tuple[int, int, int]:
    """Initialise torch.distributed through DeepSpeed; returns (rank, local_rank, world_size).

    Under the ``deepspeed`` launcher the variables are already set; a plain ``python`` run gets a
    one-process group. Backend: nccl when the models go to CUDA, gloo otherwise (``WEBAGENT_DEVICE=cpu`` on a
    GPU machine included: NCCL has no CPU tensors). ``timeout_s``: how long a collective waits for the slowest
    rank (DeepSpeed's default is 10 minutes, shorter than one rollout phase can be).

    On gloo, DeepSpeed's shared-memory op is skipped: its CPU backend compiles one (C++, ~45 s and a compiler on
    a machine's first run, a load and a shared-memory segment per process after) that only its inference
    all-reduce uses, never training.
    """
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    os.environ.setdefault("LOCAL_RANK", "0")
    import datetime
    import importlib

    import deepspeed
    if not uses_cuda():      # (the module by name: the attribute deepspeed.comm.torch is torch itself)
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if uses_cuda() else "gloo",
                                   timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    if uses_cuda():
        torch.cuda.set_device(local_rank)
    if rank == 0:
        log.info("machine: %s", machine())
    return rank, local_rank, world


def collective_device() -> torch.device:
    """Where a collective's tensors must live for the default process group's backend: this rank's GPU under
    NCCL (which has no CPU path), the CPU otherwise (gloo)."""
    if torch.distributed.is_initialized() and torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def all_reduce(value: torch.Tensor, op) -> torch.Tensor:
    """All-reduce a small CPU tensor across ranks; it travels on the device the backend needs (NCCL: the GPU)."""
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        on = value.to(collective_device())
        torch.distributed.all_reduce(on, op=op)
        return on.cpu()
    return value


def all_reduce_sum(x: int) -> int:
    """The sum of ``x`` over the ranks."""
    return int(all_reduce(torch.tensor([x], dtype=torch.long), torch.distributed.ReduceOp.SUM).item())


def all_reduce_max(x: int) -> int:
    """The largest ``x`` of the ranks."""
    return int(all_reduce(torch.tensor([x], dtype=torch.long), torch.distributed.ReduceOp.MAX).item())


def all_reduce_fmax(x: float) -> float:
    """The largest ``x`` of the ranks (a float)."""
    return float(all_reduce(torch.tensor([x], dtype=torch.float64), torch.distributed.ReduceOp.MAX).item())


def all_reduce_mean(stats: dict[str, float]) -> dict[str, float]:
    """Each statistic averaged over the ranks, in one collective (every rank must hold the same keys)."""
    keys = sorted(stats)
    t = all_reduce(torch.tensor([stats[k] for k in keys], dtype=torch.float64), torch.distributed.ReduceOp.SUM)
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    return {k: float(v) / world for k, v in zip(keys, t)}


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


def add_lora(model: torch.nn.Module, rank: int, alpha: float) -> torch.nn.Module:
    """``model`` with LoRA adapters of ``rank`` on every linear layer but the output head (``peft``), the
    base weights frozen: the update W + (alpha / rank) B A trains only A and B (B starts at zero, so the
    wrapped model computes what ``model`` did). Checkpoints export the merged weights (``merge_lora``)."""
    from peft import LoraConfig, get_peft_model
    if rank < 1:
        raise ValueError(f"LoRA rank must be >= 1, not {rank}")
    return get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0,
                                            target_modules="all-linear"))


def is_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a peft model (``add_lora``)."""
    return hasattr(model, "peft_config")


def merge_lora(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The plain model's state dict from a LoRA model's (``add_lora``; ``state`` holds full tensors, gathered
    under ZeRO-3): each adapted weight merged, W + scaling B A (computed in fp32, stored in W's dtype), under
    the base model's own names; the adapters' tensors dropped."""
    scaling = {name: m.scaling for name, m in model.named_modules() if hasattr(m, "lora_A")}
    prefix = "base_model.model."
    merged: dict[str, torch.Tensor] = {}
    for key, t in state.items():
        if ".lora_" in key:
            continue
        module, sep, leaf = key.rpartition(".base_layer.")
        if sep and leaf == "weight":
            for adapter, scale in scaling[module].items():
                a, b = state[f"{module}.lora_A.{adapter}.weight"], state[f"{module}.lora_B.{adapter}.weight"]
                t = (t.float() + scale * (b.float() @ a.float())).to(t.dtype)
        merged[(f"{module}.{leaf}" if sep else key).removeprefix(prefix)] = t
    return merged


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


def machine() -> str:
    """Where a run ran, for its log and results (``init_distributed`` logs it): torch's build, the CPU (its name,
    family and model, the instruction set torch's kernels dispatch to, its cores) and the GPUs where there are
    some. A run is a function of its command on one machine; another CPU's kernels may round otherwise
    (docs/training.md). Threads are the command's (``--torch-threads``)."""
    info: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break                                              # the first processor's fields are enough
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info and "model" in info:
        name += f", family {info['cpu family']} model {info['model']}"
    text = f"torch {torch.__version__}, CPU {name} ({torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores)"
    if torch.cuda.is_available():
        text += f", GPU {torch.cuda.get_device_name(0)} x {torch.cuda.device_count()}"
    return text


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


# ---- learning-rate schedules ----

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


# ---- checkpoints ----

def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def export_hf(engine, tokenizer, path: str | Path, rank: int) -> None:
    """Write an HF checkpoint (model + tokenizer) from a DeepSpeed engine. Under ZeRO-3 the partitioned
    parameters are gathered one at a time and copied to rank 0's CPU, so a GPU never holds more than one full
    tensor beyond its partition (gathering them all at once would need the whole model on every GPU).
    Collective: every rank must call it."""
    import deepspeed
    model = engine.module
    state: dict[str, torch.Tensor] = {}
    copied: dict[int, torch.Tensor] = {}                       # tied tensors: gathered and copied once
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) not in copied:
            ctx = (deepspeed.zero.GatheredParameters([tensor], modifier_rank=None) if hasattr(tensor, "ds_id")
                   else contextlib.nullcontext())
            with ctx:
                copied[id(tensor)] = tensor.detach().cpu().clone() if rank == 0 else torch.empty(0)
        state[name] = copied[id(tensor)]
    if rank == 0:
        if is_lora(model):   # the merged weights: a plain checkpoint that eval.py and vLLM load as any other
            state, model = merge_lora(model, state), model.get_base_model()
        model.save_pretrained(str(path), state_dict=state, safe_serialization=True)
        tokenizer.save_pretrained(str(path))


def save_checkpoint(engine, tokenizer, out_dir: str | Path, step: int, state: dict[str, Any],
                    rank: int) -> Path:
    """Atomically write <out_dir>/step_<step>/ (hf/, ds/, trainer_state.json, rng.pt) and point
    <out_dir>/latest at it. Collective: every rank must call it."""
    out_dir = Path(out_dir)
    final, tmp = out_dir / f"step_{step}", out_dir / f"step_{step}.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    torch.distributed.barrier()
    engine.save_checkpoint(str(tmp / "ds"), tag="state")
    export_hf(engine, tokenizer, tmp / "hf", rank)
    torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")
    torch.distributed.barrier()
    if rank == 0:
        # trainer_state.json is written last: a directory holding it is complete. A step saved twice (a
        # resumed finished run, Ctrl-C right after a periodic save) swaps directories by renames only, so a
        # kill at any moment leaves a complete copy that latest_checkpoint finds.
        (tmp / "trainer_state.json").write_text(json.dumps({"step": step, **state}, indent=1))
        old = out_dir / f"step_{step}.old"
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        _atomic_write(out_dir / "latest", final.name)
        shutil.rmtree(old, ignore_errors=True)
    torch.distributed.barrier()
    return final


def publish_hf(ckpt: str | Path, out_dir: str | Path, rank: int) -> Path:
    """Make checkpoint ``ckpt``'s hf/ the run's final model <out_dir>/hf (copied through hf.tmp, then
    swapped in): the weights save_checkpoint already wrote, not gathered and exported a second time.
    Rank 0 copies; returns <out_dir>/hf."""
    final, tmp = Path(out_dir) / "hf", Path(out_dir) / "hf.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(Path(ckpt) / "hf", tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    return final


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run directory (one holding trainer_state.json, written last), or
    None: the one ``latest`` names, else (a save was killed mid-swap) the complete ``step_*`` directory of
    the highest step, a finished ``.tmp`` before an ``.old`` of the same step."""
    out_dir = Path(out_dir)
    p = out_dir / "latest"
    if p.exists() and (out_dir / p.read_text().strip() / "trainer_state.json").exists():
        return out_dir / p.read_text().strip()
    rank = {"": 1, ".tmp": 2, ".old": 0}
    found = []
    for d in out_dir.glob("step_*"):
        m = re.fullmatch(r"step_(\d+)(|\.tmp|\.old)", d.name)
        if m and (d / "trainer_state.json").exists():
            found.append((int(m.group(1)), rank[m.group(2)], d))
    return max(found)[2] if found else None


def load_checkpoint(engine, ckpt: str | Path, rank: int) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG states; returns the trainer state (step, cursor...)."""
    ckpt = Path(ckpt)
    engine.load_checkpoint(str(ckpt / "ds"), tag="state")
    rng_file = ckpt / f"rng_rank{rank}.pt"
    if rng_file.exists():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return json.loads((ckpt / "trainer_state.json").read_text())


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# ---- metrics ----

def rewind_jsonl(path: str | Path, step: int) -> None:
    """Keep the lines of a per-step JSONL log with ``"step" <= step`` (all of them gone for step 0: a fresh
    run), so that a run resumed at ``step`` logs each later step once. Rewritten atomically."""
    path = Path(path)
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and step and json.loads(line)["step"] <= step]
    _atomic_write(path, "".join(line + "\n" for line in keep))


class Metrics:
    """Scalars to <out>/metrics.jsonl and TensorBoard (<out>/tb), rank 0 only.

    ``m.log(step, {"train/loss": 1.2})``; each JSONL line is ``{"step": 3, "time": ..., "train/loss": 1.2}``.
    """

    def __init__(self, out_dir: str | Path, enabled: bool = True, start_step: int = 0):
        self.enabled = enabled
        self.path = Path(out_dir) / "metrics.jsonl"
        self.tb = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            rewind_jsonl(self.path, start_step)   # a resumed run redoes the steps after its checkpoint
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(str(Path(out_dir) / "tb"))
            except ImportError:   # tensorboard is optional at run time; JSONL always works
                log.warning("tensorboard not installed: metrics go to JSONL only")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if not self.enabled:
            return
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, "time": time.time(), **scalars}) + "\n")
        if self.tb is not None:
            for k, v in scalars.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing moving average: entry i is the mean of values[i-window+1 .. i] (fewer at the start), e.g.
    ``moving_average([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]``."""
    return [sum(values[max(0, i - window + 1):i + 1]) / (i + 1 - max(0, i - window + 1)) for i in range(len(values))]


def plot_metrics(jsonl: str | Path, panels: list[tuple], out_png: str | Path, title: str = "",
                 smooth: int = 10) -> dict[str, tuple[list, list[float]]]:
    """One subplot per (metric key, y label[, smooth[, count key]]), against step; a panel's own third entry
    overrides ``smooth`` (1 for a sparse metric such as a periodic evaluation), and a fourth, the key of the
    number of episodes a success rate p is a fraction of, draws its standard error sqrt(p (1 - p) / n) as error
    bars (so that a change smaller than the bars reads as noise). Keys missing from the log are skipped. With
    ``smooth`` > 1 the raw values are drawn faint and a trailing moving average of ``smooth`` logged values
    (at most the number there are) over them, so that a trend stands out from step-to-step noise (RL steps
    rotate through tasks). A key ending in "/*" is a prefix: one moving-average line per key under it (e.g.
    "rollout/success/*", the success rate of each task). Returns key -> (steps, the plotted line's values), and
    "<key> SE" -> (steps, the error bars) for a panel with a count key."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = read_metrics(jsonl)

    def keys_of(key: str) -> list[str]:
        if not key.endswith("/*"):
            return [key] if any(key in r for r in rows) else []
        return sorted({k for r in rows for k in r if k.startswith(key[:-1])})

    panels = [(k, lab, keys, own[0] if own else smooth, own[1] if len(own) > 1 else None)
              for k, lab, *own in panels if (keys := keys_of(k))]
    plotted: dict[str, tuple[list, list[float]]] = {}
    if not panels:
        return plotted
    cols = min(len(panels), 4)
    rows_n = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4 * cols, 3.2 * rows_n), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (key, label, keys, smooth, count) in zip(axes.flat, panels):
        for k in keys:
            steps, values = map(list, zip(*[(r["step"], r[k]) for r in rows if k in r]))
            w = min(smooth, len(values))
            line = moving_average(values, w) if w > 1 else values
            plotted[k] = (steps, line)
            if key.endswith("/*"):           # several series: their moving averages only
                ax.plot(steps, line, linewidth=1.5, label=k[len(key) - 1:])
            elif w > 1:
                ax.plot(steps, values, alpha=0.3, linewidth=0.8, label="per step")
                ax.plot(steps, line, linewidth=2, label=f"moving average of {w} steps")
            elif count and all(count in r for r in rows if k in r):
                n = [r[count] for r in rows if k in r]
                se = [math.sqrt(p * (1 - p) / max(m, 1)) for p, m in zip(values, n)]
                ax.errorbar(steps, values, yerr=se, marker="o", capsize=3, label=f"+- SE, {n[-1]:g} episodes")
                plotted[f"{k} SE"] = (steps, se)
            else:
                ax.plot(steps, values, marker="o")
        if key.endswith("/*"):
            ax.set_title(f"moving average of (up to) {smooth} logged values each" if smooth > 1 else "", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6 if key.endswith("/*") else 7)
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return plotted
