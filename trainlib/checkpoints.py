"""Atomic checkpoints that resume. A checkpoint directory ``<out>/step_<n>/`` holds ``hf/`` (model + tokenizer,
loadable by ``from_pretrained`` and ``policy.load``), ``ds/`` (DeepSpeed model/optimizer/scheduler states),
``rng_rank<r>.pt`` and ``trainer_state.json`` (step, task cursor, ...). It is written to ``step_<n>.tmp`` and
renamed when complete, and ``<out>/latest`` names the newest complete one, so a crash never leaves a half-written
checkpoint that a resume would pick up (``latest_checkpoint``)."""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainlib import lora


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
        if lora.is_lora(model):   # the merged weights: a plain checkpoint that eval.py and vLLM load as any other
            state, model = lora.merge_lora(model, state), model.get_base_model()
        model.save_pretrained(str(path), state_dict=state, safe_serialization=True)
        tokenizer.save_pretrained(str(path))


def save_checkpoint(engine, tokenizer, out_dir: str | Path, step: int, state: dict[str, Any],
                    rank: int, pending: Any = None) -> Path:
    """Atomically write <out_dir>/step_<step>/ (hf/, ds/, trainer_state.json, rng.pt; ``pending``: this rank's
    batch in flight, finished, in pending_rank<rank>.pt: ``load_pending``) and point <out_dir>/latest at it.
    Collective: every rank must call it."""
    out_dir = Path(out_dir)
    final, tmp = out_dir / f"step_{step}", out_dir / f"step_{step}.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    torch.distributed.barrier()
    engine.save_checkpoint(str(tmp / "ds"), tag="state")
    export_hf(engine, tokenizer, tmp / "hf", rank)
    torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")
    if pending is not None:
        torch.save(pending, tmp / f"pending_rank{rank}.pt")
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
        atomic_write(out_dir / "latest", final.name)
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


def load_pending(ckpt: str | Path, rank: int) -> Any:
    """The batch a checkpoint kept in flight for this rank (``save_checkpoint``'s ``pending``), or None. The file is
    this run's own (a pickle: load only checkpoints you wrote)."""
    path = Path(ckpt) / f"pending_rank{rank}.pt"
    return torch.load(path, weights_only=False) if path.exists() else None


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader sees the old text or the new."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
