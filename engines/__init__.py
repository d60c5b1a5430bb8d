"""The generation engines behind one interface, and that interface: what a backend takes and what it returns.

Every backend (``policy.make_backend`` builds them) answers one coroutine::

    gen = await backend.generate(prompt_ids, *, messages=None, max_new_tokens=None, temperature=None,
                                 top_p=None, seed=None)          # -> Generation(ids, logprobs, text, finish_reason)

``seed`` gives a request its own sampling noise (common random numbers: ``rollout.request_seed``), never shared
with the batch it is decoded in; ``backend.tokenizer`` is the tokenizer its prompts are rendered and counted with;
``await backend.aclose()`` releases what it holds. The sampling settings a request leaves as None are the
backend's own, and their defaults are the paper's (``SAMPLING``), written here once.

This file is the interface and nothing of an engine (it imports neither torch nor the project); the engines are
the modules beside it, each imported by whoever uses it:
- ``hf_backend``: the HF engine, continuous batching on the model's own forward, or HF's ``model.generate``
  (``decode="generate"``); its KV memory and attention in ``hf_kv``;
- ``vllm_backend``: vLLM's async engine with its processes and the weight push (vLLM imported only there).
The OpenAI-compatible HTTP backend is ``policy.OpenAIBackend``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Generation", "Sampling", "SAMPLING", "RolloutEngine", "request_settings", "end_of_turn_ids",
           "END_OF_TURN_STRINGS"]


@dataclass
class Generation:
    """One sampled response, e.g. ``Generation(ids=[2048, 91, 2], logprobs=[-0.1, -2.3, -0.01],
    text="<think>click</think>", finish_reason="stop")``.

    ``ids``: generated token ids, including the end-of-turn token when ``finish_reason == "stop"``.
    ``logprobs``: log pi(ids[k] | prompt, ids[:k]) under the raw model distribution (temperature 1, no
    truncation), or ``None`` when the backend cannot provide them (HTTP APIs).
    ``finish_reason``: ``"stop"`` (end of turn / eos), ``"length"`` (max new tokens) or ``"error: ..."``.
    """
    ids: list[int]
    logprobs: list[float] | None
    text: str
    finish_reason: str


@dataclass(frozen=True)
class Sampling:
    """A request's sampling settings; the defaults are the paper's (App. B: rollouts at temperature 1.0,
    top-p 1.0, at most 1,024 new tokens a turn)."""
    max_new_tokens: int = 1024
    temperature: float = 1.0      # 0: greedy
    top_p: float = 1.0


#: The paper's sampling settings: the default of every backend and of ``rollout.EpisodeConfig``.
SAMPLING = Sampling()


@dataclass(frozen=True)
class RolloutEngine:
    """The rollout engine beside the trainer (train_mgrpo's flags): what it computes in, vLLM's settings, and the
    correction for the distribution it computes differently."""
    rollout_correction: Literal["auto", "none", "tis", "mis", "seq-tis", "seq-mis"] = "auto"
    """weight Eq. 2's terms for the engine that drew them (``rollout_correction``): tis, mis per token, seq-* per
    action; auto: tis for vllm (another engine, bf16 on GPUs), none for hf"""
    rollout_correction_cap: float = 2.0
    """C of --rollout-correction (2.0, as verl and ms-swift)"""
    engine_dtype: str = ""
    """the engine's dtype ("": the trainer's for hf, vLLM's own); bfloat16 with hf: a bf16 copy of the policy decodes,
    so that the mismatch is real on a CPU"""
    vllm_gpu_memory: float = 0.7
    """vLLM colocated on each rank: fraction of GPU memory (paper: 0.7)"""
    vllm_devices: str = ""
    """GPUs of the vLLM engines' own, one per local rank (e.g. 4,5,6,7 beside trainer GPUs 0-3; no sleep mode);
    "": each rank's engine on the rank's GPU, asleep during the update at --async-steps 0"""
    vllm_eager: bool = False
    """vLLM's enforce_eager: no torch.compile, no CUDA graphs (an engine starts sooner, generates slower)"""
    async_steps: int = 0
    """0: a step's rollouts, then its update (the paper's); 1: the next batch's rollouts run during the update, drawn
    by the weights one update older (trainlib/overlap.py; hf: the engine decodes with a copy of the weights; vllm:
    the engine keeps its weights through the update, never asleep: --vllm-devices, or a --vllm-gpu-memory that
    leaves the update room)"""


def request_settings(backend, max_new_tokens: int | None, temperature: float | None,
                     top_p: float | None) -> tuple[int, float, float]:
    """One request's (max_new_tokens, temperature, top_p), read the same way by every backend: None takes the
    backend's own (given when it was built; the scripts pass every request's from ``rollout.EpisodeConfig``),
    any value is that value; max_new_tokens must be >= 1, temperature >= 0 (0: greedy), top_p in (0, 1]."""
    n = int(backend.max_new_tokens if max_new_tokens is None else max_new_tokens)
    t = float(backend.temperature if temperature is None else temperature)
    p = float(backend.top_p if top_p is None else top_p)
    if n < 1 or t < 0 or not 0 < p <= 1:
        raise ValueError(f"a request needs max_new_tokens >= 1, temperature >= 0 and 0 < top_p <= 1, not "
                         f"max_new_tokens={n}, temperature={t:g}, top_p={p:g}")
    return n, t, p


#: End-of-turn / end-of-text strings of common chat templates: generation stops at any present in the vocab.
END_OF_TURN_STRINGS = ("<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<|endoftext|>", "<|eom_id|>",
                       "<end_of_turn>", "<|end|>", "</s>")


def end_of_turn_ids(tokenizer, model=None) -> list[int]:
    """Token ids generation stops at: the tokenizer's eos, the model's generation-config eos id(s), and
    every known end-of-turn string present in the vocab (``<|im_end|>``, ``<|eot_id|>``, ...)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for i in ([gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])):
        ids.append(int(i))
    vocab = tokenizer.get_vocab()
    ids += [vocab[s] for s in END_OF_TURN_STRINGS if s in vocab]
    return sorted(set(ids))
