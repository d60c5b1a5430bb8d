"""The engine is not the trainer: at paper scale the rollouts come from vLLM in bf16 and the update from DeepSpeed,
so the distribution that drew a sample is not the trainer's pi_old. ``rollout.Sample.logprobs`` keep the engine's
log-probs of each action token; train_mgrpo.update lays them out beside its own (``engine_logprobs``), logs how far
apart the two are on every step (``mismatch_sums`` -> ``mismatch_stats``: the ``mismatch/*`` metrics) and, where
asked, weights Eq. 2's terms for the engine that drew them (``rollout_correction``: TIS / MIS, per token or per
action). Pure functions of tensors (a leaf: torch only); docs/training.md, "The engine is not the trainer".
"""
from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Sequence

import torch

from engines import RolloutEngine   # the flags of the engine beside the trainer, its correction among them

log = logging.getLogger("webagent.mismatch")


#: the correction's forms (``--rollout-correction``)
MODES = ("none", "tis", "mis", "seq-tis", "seq-mis")
#: the figures that are the ranks' largest, not their mean
MISMATCH_MAX = ("mismatch/max_abs_log_ratio", "mismatch/seq_log_ratio_max")


def engine_logprobs(samples: Sequence, mask: torch.Tensor) -> torch.Tensor | None:
    """The engine's log-probs of the samples' action tokens (``Sample.logprobs``) laid out as the trainer's scores:
    [N, T], on ``mask``'s ones in row order (both scorings put a sample's action tokens in order on one row);
    None when a sample has none (the OpenAI backend)."""
    if any(s.logprobs is None for s in samples):
        return None
    flat = torch.tensor([lp for s in samples for lp in s.logprobs], dtype=torch.float32)
    on = mask.bool()
    if int(on.sum()) != len(flat):
        raise ValueError(f"{len(flat)} engine log-probs for {int(on.sum())} action tokens")
    eng = torch.zeros(mask.shape, dtype=torch.float32)
    eng[on.cpu()] = flat
    return eng.to(mask.device)


def rollout_correction(old_logp: torch.Tensor, eng_logp: torch.Tensor, mask: torch.Tensor, mode: str,
                       cap: float) -> torch.Tensor:
    """Per-token weights [N, T] (detached) that correct Eq. 2 for the engine's sampling distribution: a sample was
    drawn from pi_engine, not from the trainer's pi_old, so its term is weighted by rho = pi_old / pi_engine.
    ``tis``: min(rho_t, C) per token (truncated importance sampling); ``mis``: 1 where rho_t lies in [1/C, C], else
    0 (the token is masked); ``seq-tis`` / ``seq-mis``: the same with an action's sequence ratio, the product of its
    tokens' rho (the importance weight of the action as one draw; products of long actions grow or vanish fast,
    hence the cap), shared by its tokens; ``none``: ones."""
    mask = mask.to(old_logp.dtype)
    log_rho = ((old_logp - eng_logp) * mask).detach()                     # [N, T]
    if mode.startswith("seq-"):
        log_rho = log_rho.sum(-1, keepdim=True).expand_as(log_rho)       # [N, T] the action's, on every token
    rho = torch.exp(log_rho)
    if mode in ("tis", "seq-tis"):
        return rho.clamp(max=cap) * mask
    if mode in ("mis", "seq-mis"):
        return ((rho >= 1.0 / cap) & (rho <= cap)).to(mask.dtype) * mask
    if mode == "none":
        return mask
    raise ValueError(f"rollout correction {mode!r}: one of {', '.join(MODES)}")


def mismatch_sums(old_logp: torch.Tensor, eng_logp: torch.Tensor, mask: torch.Tensor,
                  cap: float = 2.0) -> dict[str, float]:
    """How far the trainer's log-probs at the sampling weights are from the engine's, as sums and maxima over the
    action tokens (``mismatch_stats`` turns them into the step's figures). With d = log pi_train - log pi_engine
    and tokens drawn from the engine: KL(pi_engine || pi_train) as the mean of -d (the direct estimator) and of
    exp(d) - 1 - d (k3, never negative); the largest |d|; tokens whose ratio pi_train / pi_engine lies outside
    [0.5, 2], and above ``cap`` (the tokens tis truncates); the ratio's sum and sum of squares (its spread); per
    sample the sequence log ratio (the sum of d over the action's tokens)."""
    mask = mask.to(torch.float64)
    d = (old_logp.detach().double() - eng_logp.double()) * mask
    seq = d.sum(-1)[mask.sum(-1) > 0]
    rho = torch.exp(d) * mask
    return {"tokens": float(mask.sum()), "k1": float((-d).sum()), "k3": float(((torch.exp(d) - 1 - d) * mask).sum()),
            "max_abs": float(d.abs().max()) if d.numel() else 0.0,
            "outside": float(((d.abs() > math.log(2.0)).double() * mask).sum()),
            "truncated": float(((d > math.log(cap)).double() * mask).sum()),
            "rho": float(rho.sum()), "rho_sq": float((rho * rho).sum()),
            "samples": float(len(seq)), "seq_sum": float(seq.sum()),
            "seq_max_abs": float(seq.abs().max()) if len(seq) else 0.0}


def mismatch_stats(sums: list[dict[str, float]]) -> dict[str, float]:
    """The step's ``mismatch/*`` figures from ``mismatch_sums`` of its micro-batches (docs/training.md)."""
    n, m = max(sum(x["tokens"] for x in sums), 1.0), max(sum(x["samples"] for x in sums), 1.0)
    return {"mismatch/kl_k1": sum(x["k1"] for x in sums) / n, "mismatch/kl_k3": sum(x["k3"] for x in sums) / n,
            "mismatch/max_abs_log_ratio": max(x["max_abs"] for x in sums),
            "mismatch/ratio_outside": sum(x["outside"] for x in sums) / n,
            "mismatch/ratio_truncated": sum(x["truncated"] for x in sums) / n,
            "mismatch/ratio_std": math.sqrt(max(sum(x["rho_sq"] for x in sums) / n
                                                - (sum(x["rho"] for x in sums) / n) ** 2, 0.0)),
            "mismatch/seq_log_ratio_mean": sum(x["seq_sum"] for x in sums) / m,
            "mismatch/seq_log_ratio_max": max(x["seq_max_abs"] for x in sums)}


class Gauge:
    """One update's seam for the engine's log-probs (train_mgrpo.update): per micro-batch, ``weights`` lays the
    engine's log-probs beside the trainer's pi_old, records the mismatch at the first epoch (the trainer at the
    weights that drew the samples: the update's own first forward) and returns the correction's weights for
    ``mgrpo_loss`` (None: Eq. 2 as is); ``stats()`` the step's ``mismatch/*`` figures ({} where there were none).
    ``exact``: the engine's log-probs are the sampling distribution's (temperature 1, top-p 1), else unused."""

    def __init__(self, engine: RolloutEngine, exact: bool) -> None:
        self.mode, self.cap, self.exact = engine.rollout_correction, engine.rollout_correction_cap, exact
        self.sums: list[dict[str, float]] = []

    def weights(self, samples: Sequence, old_logp: torch.Tensor, mask: torch.Tensor,
                first_epoch: bool) -> torch.Tensor | None:
        eng = engine_logprobs(samples, mask) if self.exact else None                     # [n, L]
        if eng is None:
            return None
        if first_epoch:
            self.sums.append(mismatch_sums(old_logp, eng, mask, self.cap))
        return None if self.mode in ("none", "auto") else rollout_correction(old_logp, eng, mask, self.mode, self.cap)

    def stats(self) -> dict[str, float]:
        return mismatch_stats(self.sums) if self.sums else {}


def resolved(args: Any) -> Any:
    """train_mgrpo's ``args`` with its ``rollout_engine.rollout_correction`` resolved (``resolve``); --async-steps
    checked (0 or 1)."""
    engine, ep = args.rollout_engine, args.episode
    if engine.async_steps not in (0, 1):
        raise SystemExit(f"--async-steps {engine.async_steps}: 0 (rollouts, then the update) or 1 (one step off)")
    mode = resolve(engine.rollout_correction, args.backend, ep.temperature, ep.top_p, engine.async_steps)
    return dataclasses.replace(args, rollout_engine=dataclasses.replace(engine, rollout_correction=mode))


def resolve(mode: str, backend: str, temperature: float, top_p: float, async_steps: int = 0) -> str:
    """--rollout-correction resolved: ``auto`` is tis for vLLM (another engine, bf16 on GPUs: the field corrects it)
    and for --async-steps 1 (samples drawn by the weights one update older: decoupled PPO's behaviour correction
    pi_prox / pi_engine, pi_prox the trainer's weights before the step, truncated at C as AReaL and verl do), none
    for hf at 0 (the trainer's own module or a copy of it: nothing to correct unless --engine-dtype makes one).
    The engine's log-probs are the raw model's, the sampling distribution's only at temperature 1 and top-p 1:
    elsewhere auto gives none and an explicit correction is refused."""
    resolved = ("tis" if backend == "vllm" or async_steps else "none") if mode == "auto" else mode
    if resolved not in MODES:
        raise SystemExit(f"--rollout-correction {mode}: auto or one of {', '.join(MODES)}")
    if resolved != "none" and (temperature, top_p) != (1.0, 1.0):
        if mode != "auto":
            raise SystemExit(f"--rollout-correction {mode} needs the engine's log-probs at temperature 1, top-p 1 "
                             f"(got temperature {temperature}, top-p {top_p})")
        resolved = "none"
    log.info("rollout correction %s; the engine/trainer mismatch (mismatch/*) %s", resolved,
             "logged on every step" if (temperature, top_p) == (1.0, 1.0) else "not logged: T or top-p is not 1")
    return resolved
