"""LoRA adapters on a policy (``--lora-rank``): added with peft (``add_lora``), and merged back into plain
weights for the exported checkpoint (``merge_lora``), which eval.py and vLLM load as any other."""
from __future__ import annotations

import torch


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
