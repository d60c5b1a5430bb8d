"""The HF generation engine: ``HFBackend`` samples the actions of pi_theta from an HF causal LM (the model
``policy.load`` returns; ``policy.make_backend("hf", ...)`` builds one), on a CPU box or a GPU.

What it implements
- ``HFBackend``, behind the async interface every backend shares
  ``await backend.generate(prompt_ids, *, messages=None, max_new_tokens=None, temperature=None, top_p=None,
  seed=None) -> Generation(ids, logprobs, text, finish_reason)``, the model run in one worker thread so the
  event loop (the browsers) keeps running:
  * continuous batching on its own decode loop over the model's forward: a request joins the rows being decoded
    at the next token and leaves the token it ends (nothing waits for a batch's longest response); rows may mix
    temperatures and top-p; their KV lives in a preallocated slab (``_Slab``) where each step writes one column
    per row, attended with SDPA that shares the KV heads of grouped-query attention (``_sdpa_gqa``);
  * a prefix cache (``_PrefixCache``): prompts are prefilled alone (no padding), reusing the KV of the blocks
    they share with a recent prompt (the G trajectories of an RL group start from one page, every turn of a
    task repeats the system prompt and the goal);
  * stops at the end-of-turn token (and eos: ``end_of_turn_ids``); returns per-token log-probs;
  * ``decode="generate"``: dynamic batches of HF's ``model.generate`` instead, the path of models whose cache the
    loop cannot hold (``continuous_batching_supported``: sliding windows, linear attention, ...) and of
    benchmarks comparing the two.
- Sampling noise per request from a seed (common random numbers): a request with ``seed``
  (``rollout.request_seed``) draws each token as argmax(scores + Gumbel noise) with the uniforms taken from its
  own generator (``noise_generator``, ``gumbel_noise``; the Gumbel-max trick samples the same distribution), so
  its response is a function of its prompt and seed only, never of the batch it is decoded in; the same in both
  paths (``_sample`` in the loop, ``_SeededNoise`` under ``model.generate``). Without a seed: the global
  generator's next draws.
- Batch invariance (``invariance``): a seeded request's response the same to the bit whatever else is decoded
  beside it, by forwards at shapes that depend on the request alone (``FIXED_SHAPES``, checked at start by
  ``_fixed_shapes_hold``), or by a float64 copy of the model where those shapes do not suffice.
- ``Generation``: one response, what every backend returns (``vllm_backend.VLLMBackend`` and
  ``policy.OpenAIBackend`` too); ``end_of_turn_ids``: the ids generation stops at.
- ``model_logprobs`` / ``backend.logprobs_of``: log pi(target | prompt) per token, to compare the trainer
  model with the rollout engine after a weight push.
The module imports nothing of the project (a leaf): policy.py loads models and tokenizers and builds backends.

Log-probs (what "old log-probs" means here)
- ``Generation.logprobs[k]`` = log softmax(raw logits)[ids[k]]: the model's own distribution at
  temperature 1 with no top-p / top-k truncation, i.e. log pi_theta_old(a_t | h_t) as Eq. 2's ratio
  rho = pi_theta / pi_old needs it. It equals the log-prob under the sampling distribution exactly when
  temperature = 1 and top_p = 1 (the paper's rollout setting, Sec. 3.1). vLLM returns the same quantity
  (``logprobs_mode="raw_logprobs"``); the OpenAI backend returns ``None``.
- ``Generation.ids`` include the final end-of-turn token when generation stopped there
  (``finish_reason == "stop"``), so the loss mask of Sec. 2.3 covers it; ``text`` excludes it.

Departures from the paper
- The paper samples with vLLM on GPUs; the HF backend exists so everything runs on a CPU box. It samples as
  HF's sampler does (temperature, then top-p; no top-k: HF's default top-k of 50 would silently truncate pi).

How to run
    .venv/bin/python -m pytest -q tests/test_policy.py
    .venv/bin/python bench/bench_generate.py
On a small shared CPU box prefer ``HFBackend(num_threads=1)``: with 2 torch threads, OpenMP workers
spin-wait for descheduled peers and generation got 5-30x slower under load (bench/RESULTS.md).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import functools
import inspect
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

log = logging.getLogger(__name__)


# ---- data ----

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


# ---- stop and pad ids ----

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


def _pad_id(tok, stop_ids: Sequence[int]) -> int:
    """Id written into left padding (always under attention mask 0) and after finished sequences."""
    pid = tok.pad_token_id
    if pid is None:
        pid = next(i for i in range(len(tok)) if i not in stop_ids)
    return int(pid)


# ---- log-probs ----

@torch.no_grad()
def model_logprobs(model, prompt_ids: Sequence[int], target_ids: Sequence[int]) -> list[float]:
    """log pi(target_ids[k] | prompt_ids, target_ids[:k]) from one teacher-forced forward pass (raw
    logits, temperature 1). Works on a plain HF model and on a DeepSpeed engine's ``module``."""
    if not target_ids:
        return []
    dev = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(target_ids)], device=dev)        # [1, P + T]
    T = len(target_ids)
    if "logits_to_keep" in inspect.signature(model.forward).parameters:         # skip the prompt's logits
        logits = model(input_ids=ids, logits_to_keep=T + 1).logits[0, :-1]       # [T, V]
    else:
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1]          # [T, V]
    logits = logits.float()
    tgt = torch.tensor(list(target_ids), device=dev)                              # [T]
    return torch.log_softmax(logits, -1).gather(-1, tgt[:, None])[:, 0].tolist()


# ---- continuous batching: requests, rows, the KV slab, the prefix cache ----

@dataclass
class _Request:
    prompt: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    future: asyncio.Future = field(repr=False)
    seed: int | None = None                  # its own noise stream (common random numbers), else the global one
    noise: torch.Generator | None = field(default=None, repr=False)   # made from seed at its first draw


@dataclass
class _Row:
    """A request being decoded: the KV columns it fills in the slab (prompt, then what it generated)."""
    req: _Request
    pos: int                                  # tokens in its KV cache = the position of its next token
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def _settings(r: _Request) -> tuple:
    """What requests batched by ``model.generate`` must share: the sampling settings, and whether they bring
    their own noise."""
    return r.temperature, r.top_p, r.seed is None


class _Slab:
    """The KV cache of the rows being decoded: per layer keys / values ``[rows, kv_heads, columns, head_dim]``,
    allocated once per busy spell and grown when needed, so a decode step writes one column per row in place
    (HF's ``DynamicCache`` concatenates, copying the whole cache at every token). Row i holds its tokens in
    columns ``0 .. pos_i - 1``; columns past that are garbage the attention mask hides. The model calls
    ``update`` once per layer per forward (duck-typing HF's ``Cache``: only ``update`` and ``get_seq_length``
    are used, as the step passes position ids and a ready 4-D mask)."""

    def __init__(self, layers: int, rows: int, cols: int, like: torch.Tensor):
        kv_heads, head_dim = like.shape[1], like.shape[3]
        self.k = [like.new_zeros(rows, kv_heads, cols, head_dim) for _ in range(layers)]
        self.v = [like.new_zeros(rows, kv_heads, cols, head_dim) for _ in range(layers)]
        self.n = 0                                # rows in use
        self.write: tuple[torch.Tensor, torch.Tensor] | None = None   # (rows, columns) the next update writes
        self.cols = 0                             # columns the next update returns

    def capacity(self) -> tuple[int, int]:
        return self.k[0].shape[0], self.k[0].shape[2]

    def grow(self, rows: int, cols: int) -> None:
        """Room for at least ``rows`` rows of ``cols`` columns (doubling, so growth is amortized)."""
        R, C = self.capacity()
        if rows <= R and cols <= C:
            return
        if rows > R:
            R = max(rows, 2 * R)
        if cols > C:
            C = max(cols, C + C // 2)
        for kv in (self.k, self.v):
            for i, t in enumerate(kv):
                new = t.new_zeros(R, t.shape[1], C, t.shape[3])
                new[:self.n, :, :t.shape[2]] = t[:self.n]
                kv[i] = new

    def put(self, row: int, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Fill ``row``'s first columns with a prefilled prompt's KV (per layer ``[1, kv_heads, P, head_dim]``)."""
        for layer, (k, v) in enumerate(kv):
            self.k[layer][row, :, :k.shape[2]] = k[0]
            self.v[layer][row, :, :v.shape[2]] = v[0]

    def move(self, src: int, dst: int, cols: int) -> None:
        for kv in (self.k, self.v):
            for t in kv:
                t[dst, :, :cols] = t[src, :, :cols]

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        rows, cols = self.write                   # [n], [n]: one new column per row
        k, v = self.k[layer_idx], self.v[layer_idx]
        k[rows, :, cols] = key_states[:, :, 0]
        v[rows, :, cols] = value_states[:, :, 0]
        return k[:self.n, :, :self.cols], v[:self.n, :, :self.cols]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.cols - 1


class _PrefixCache:
    """The KV of recently prefilled prompts in blocks of ``block`` tokens, each block stored once under the hash
    of the whole prefix it ends (a chain: the hash of the previous block's hash and its own tokens), as vLLM's
    automatic prefix caching keeps them: a new prompt reuses the longest run of cached blocks it starts with.
    The G trajectories of an RL group share their first prompt, then every prompt of a task repeats the system
    prompt and the goal, and siblings that took the same actions repeat whole prompts. Least recently used
    blocks leave past ``max_tokens``. Valid for one set of weights: the backend drops it whenever it has
    nothing in flight (weights are only updated then)."""

    def __init__(self, max_tokens: int, block: int = 16):
        self.max_tokens, self.block = max_tokens, block
        # chain hash -> (parent hash, the block's tokens, per layer (keys, values) [1, kv_heads, block, head_dim]);
        # dict order is recency (least recent first)
        self.blocks: dict[int, tuple[int, tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]]] = {}

    def _chain(self, prompt: list[int], n_blocks: int):
        """(hash, parent hash, tokens) of the first ``n_blocks`` blocks of ``prompt``."""
        parent = 0
        for i in range(n_blocks):
            tokens = tuple(prompt[i * self.block:(i + 1) * self.block])
            h = hash((parent, tokens))
            yield h, parent, tokens
            parent = h

    def longest(self, prompt: list[int]) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]] | None]:
        """(n, per-layer KV ``[1, kv_heads, n, head_dim]`` of ``prompt[:n]``) for the longest run of cached blocks
        ``prompt`` starts with, leaving at least its last token to compute (its logits are needed)."""
        found = []
        for h, parent, tokens in self._chain(prompt, (len(prompt) - 1) // self.block):
            entry = self.blocks.pop(h, None)
            if entry is None:
                break
            self.blocks[h] = entry                                   # most recently used
            if entry[0] != parent or entry[1] != tokens:             # a hash collision: not this prefix
                break
            found.append(entry[2])
        if not found:
            return 0, None
        kv = [(torch.cat([f[layer][0] for f in found], dim=2), torch.cat([f[layer][1] for f in found], dim=2))
              for layer in range(len(found[0]))]
        return len(found) * self.block, kv

    def add(self, prompt: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep the KV (per layer ``[1, kv_heads, >= len(prompt), head_dim]``) of ``prompt``'s whole blocks."""
        b = self.block
        for i, (h, parent, tokens) in enumerate(self._chain(prompt, len(prompt) // b)):
            if h in self.blocks:
                self.blocks[h] = self.blocks.pop(h)
            else:
                part = slice(i * b, (i + 1) * b)
                self.blocks[h] = (parent, tokens, [(k[:, :, part].clone(), v[:, :, part].clone()) for k, v in kv])
        while len(self.blocks) * b > self.max_tokens:
            del self.blocks[next(iter(self.blocks))]

    def clear(self) -> None:
        self.blocks.clear()


# ---- attention ----

def _sdpa_gqa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """HF's SDPA attention without copying the KV heads for grouped-query attention: ``enable_gqa`` lets the
    kernel share each KV head among its query heads (HF repeats them when a mask is given, copying the whole
    cache at every decode step). Same arithmetic; ``[batch, heads, q, d]`` in, ``[batch, q, heads, d]`` out."""
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=query.shape[2] > 1 and attention_mask is None and is_causal,   # as HF's sdpa decides
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


_DECODE_ROWS = threading.local()   # .n: the rows of a padded decode batch that are requests (the model thread's)


def _sdpa_fixed(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """``_sdpa_gqa`` over ``fixed_cols(keys)`` key columns (zeros past the last key, masked),
    always with an explicit mask: a query row's arithmetic then depends on its own keys, not on how many there
    are (``HFBackend(invariance="fixed-shapes")``). The spare rows of a padded decode batch get zeros (their
    linear layers are what the padding is for; a batch entry's attention is computed alone anyway)."""
    rows = getattr(_DECODE_ROWS, "n", None)
    if rows is not None and rows < query.shape[0]:   # a padded decode batch: its spare rows need no attention
        out, _ = _sdpa_fixed(module, query[:rows], key[:rows], value[:rows], attention_mask[:rows], dropout, scaling)
        return torch.cat([out, out.new_zeros(query.shape[0] - rows, *out.shape[1:])]), None
    q, kv = query.shape[2], key.shape[2]
    if attention_mask is None:                                       # causal over the last q positions
        attention_mask = (torch.arange(kv, device=key.device)[None]
                          <= torch.arange(kv - q, kv, device=key.device)[:, None])[None, None]   # [1, 1, q, kv]
    pad = fixed_cols(kv) - kv
    if pad:
        key, value = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (key, value))
        attention_mask = torch.nn.functional.pad(attention_mask, (0, pad), value=False)
    return _sdpa_gqa(module, query, key, value, attention_mask, dropout, scaling, is_causal=False)


@functools.cache
def _register_sdpa_gqa(fixed: bool = False) -> str:
    """Register ``_sdpa_gqa`` (``_sdpa_fixed``) with HF (its masks are SDPA's) and return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    name = "webagent_sdpa_fixed" if fixed else "webagent_sdpa_gqa"
    AttentionInterface.register(name, _sdpa_fixed if fixed else _sdpa_gqa)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


@contextlib.contextmanager
def _attention(model, name: str | None):
    """Run ``model`` with attention implementation ``name`` (None: as it is), restoring it afterwards."""
    cfg = model.config
    old = cfg._attn_implementation
    if name is None or name == old:
        yield
        return
    cfg._attn_implementation = name
    try:
        yield
    finally:
        cfg._attn_implementation = old


# ---- sampling (per-request noise: common random numbers) ----

def _warp(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Sampling scores of rows ``[s, V]`` (temperatures > 0): logits / temperature, then cut to the top-p nucleus
    (the smallest set of most likely tokens whose mass exceeds top_p, at least one), as HF's
    ``TemperatureLogitsWarper`` then ``TopPLogitsWarper`` do; the cut tokens get -inf."""
    scores = logits / temperature[:, None]
    if (top_p < 1).any():
        sorted_scores, order = scores.sort(dim=-1)                                    # ascending
        drop = sorted_scores.softmax(-1).cumsum(-1) <= (1 - top_p)[:, None]
        drop[:, -1] = False                                                           # keep the most likely
        scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return scores


def _sample(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor,
            noise: Sequence[torch.Generator | None] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Next tokens ``[n]`` for rows of ``logits`` ``[n, V]`` and their raw log-probs: greedy where the temperature
    is 0, else drawn from softmax(``_warp``). A row with a generator in ``noise`` draws with its own noise:
    argmax(scores + Gumbel(0, 1)) with the V uniforms taken from that generator (the Gumbel-max trick: the same
    distribution), so its token depends on its own logits and its generator's state only, never on the other
    rows; other rows draw with ``torch.multinomial`` from the global generator. The log-probs are those of the
    raw logits (temperature 1, no cut: see the module docstring), whatever the row was sampled with."""
    logits = logits.float()
    tokens = logits.argmax(-1)                                                        # [n]
    sampled = temperature > 0
    if sampled.any():
        rows = sampled.nonzero()[:, 0].tolist()
        scores = _warp(logits[sampled], temperature[sampled], top_p[sampled])         # [s, V]
        gens = [noise[i] if noise is not None else None for i in rows]
        free = [k for k, g in enumerate(gens) if g is None]
        if free:
            tokens[[rows[k] for k in free]] = torch.multinomial(scores[free].softmax(-1), 1)[:, 0]
        for k, g in enumerate(gens):
            if g is not None:
                tokens[rows[k]] = (scores[k] + gumbel_noise(scores.shape[-1], g)).argmax()
    return tokens, torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None])[:, 0]


def gumbel_noise(n: int, generator: torch.Generator) -> torch.Tensor:
    """``n`` standard Gumbel draws -log(-log U) from ``generator`` (U uniform in [0, 1); U = 0 gives -inf, a
    token never taken)."""
    u = torch.rand(n, generator=generator, device=generator.device)
    return -torch.log(-torch.log(u))


def noise_generator(seed: int, device: torch.device) -> torch.Generator:
    """The generator of one request's sampling noise, seeded with its seed (``rollout.request_seed``)."""
    return torch.Generator(device=device).manual_seed(seed)


class _LogprobRecorder:
    """A logits processor that records log softmax(raw logits)[sampled token] with O(B * V) memory
    (``decode="generate"``).

    At step t it sees the raw logits of step t and, as the last column of ``input_ids``, the token sampled
    at step t-1, so it scores step t-1 with the log-softmax it kept; ``finish`` scores the last step.
    It must run before any warper (HF applies user processors before temperature / top-p)."""

    def __init__(self):
        self.prev: torch.Tensor | None = None     # [B, V] log-softmax of the previous step
        self.steps: list[torch.Tensor] = []       # T x [B]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(-1, input_ids[:, -1:])[:, 0])          # [B]
        self.prev = torch.log_softmax(scores.float(), dim=-1)                        # [B, V]
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(-1, last_tokens[:, None])[:, 0])       # [B]
        return torch.stack(self.steps, dim=1) if self.steps else last_tokens[:, :0].float()  # [B, T]


class _SeededNoise:
    """A logits processor for ``decode="generate"`` batches of seeded requests: each row's scores become
    ``_warp``'s plus Gumbel noise from the row's own generator, so greedy decoding over them draws as
    ``_sample`` does for a seeded row (runs after ``_LogprobRecorder``, which keeps the raw log-probs)."""

    def __init__(self, reqs: list[_Request], device: torch.device):
        self.reqs, self.gens = reqs, [noise_generator(r.seed, device) for r in reqs]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        dev = scores.device
        warped = _warp(scores.float(), torch.tensor([r.temperature for r in self.reqs], device=dev),
                       torch.tensor([r.top_p for r in self.reqs], device=dev))
        return torch.stack([row + gumbel_noise(row.shape[-1], g) for row, g in zip(warped, self.gens)])


# ---- the backend ----

# ``HFBackend(invariance="fixed-shapes")``'s shapes: every forward of the decode loop computes at least ``rows``
# rows (a prompt's prefill at least ``rows`` positions from a prefix-cache block boundary; a decode step pads its
# batch), and every attention spans ``fixed_cols`` key columns (``_sdpa_fixed``). A CPU's kernels pick
# their code by shape: on the 2-core box (AMD EPYC, torch's CPU kernels) a row of a matrix product came out the
# same to the bit in every product of >= 4 rows at 1 thread (>= 12 at 2) and differently in smaller ones, and
# SDPA gave a query row the same result whatever the number of keys once they were padded to at least 512 and a
# multiple of 64 (its kernel splits keys into blocks of 512, or into one block of their own length below that, so
# a row's keys must never sit in a shorter block; bench/RESULTS.md).
# At 2 threads attention over a few rows still differed, so there the start-up check fails. ``_fixed_shapes_hold``
# checks the rule on the machine at hand.
FIXED_SHAPES = {"rows": 16, "cols": 512, "col_step": 64}


def fixed_cols(n: int) -> int:
    """The key columns an attention over ``n`` keys spans at fixed shapes: at least ``FIXED_SHAPES["cols"]`` (512),
    a multiple of ``col_step`` (64) past that."""
    step = FIXED_SHAPES["col_step"]
    return max(FIXED_SHAPES["cols"], -(-n // step) * step)


_FIXED_SHAPES_HOLD: dict[tuple, bool] = {}     # (config, dtype, device, threads) -> what the check found


def continuous_batching_supported(model) -> bool:
    """Whether ``HFBackend``'s own decode loop can run ``model``: a decoder-only model whose every layer keeps a
    plain full-attention KV cache, with SDPA or eager attention (FlashAttention-2 takes no 4-D mask). Other
    models (sliding windows, linear attention, ...) decode with ``model.generate``."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer
    cfg = model.config
    if cfg.is_encoder_decoder or cfg._attn_implementation not in ("sdpa", "eager"):
        return False
    try:
        layers = DynamicCache(config=cfg).layers
    except Exception:  # noqa: BLE001  (a config HF cannot make a cache for: not ours to decode)
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


class HFBackend:
    """Continuous batching on the model's own forward, in one worker thread: a request joins the rows being
    decoded at the next token, and a row leaves the batch the token it ends, so nothing waits for a batch's
    longest response and no prompt is padded. A new prompt is prefilled alone, reusing the KV of the longest
    prefix it shares with a recent prompt (``_PrefixCache``: the G trajectories of an RL group start from one
    page, every turn of a task repeats the system prompt and the goal); its KV then goes into a preallocated
    slab (``_Slab``) where each decode step writes one column per row. Rows may mix temperatures and top-p.
    ``decode="generate"``: dynamic batches of HF's ``model.generate`` instead (left padding, a batch decodes
    until its longest row ends; requests that arrive meanwhile wait for the next batch), the path of models the
    loop does not support (``continuous_batching_supported``) and of benchmarks comparing the two.

    Example::

        model, tok = policy.load("tiny", device="cpu")
        backend = HFBackend(model, tok, max_new_tokens=32, temperature=0.0)   # 0 = greedy
        gens = await asyncio.gather(*(backend.generate(p) for p in prompts))

    ``stats``: ``requests``, ``batches`` (times requests were taken in), ``max_batch`` (most rows decoded at
    once), ``gen_tokens``, ``model_s`` / ``model_cpu_s`` (wall / CPU seconds of the model thread's work; the CPU
    time is all of it when ``num_threads=1``), ``shared_prefill_rows`` (rows whose prompt another row had
    just prefilled), ``prefill_tokens`` / ``prefix_hit_tokens`` (prompt tokens computed / taken from the prefix
    cache), ``prefill_s`` (the part of ``model_s`` spent taking requests in), ``decode_steps`` (forwards of
    one token per row; ``gen_tokens / decode_steps`` is the mean batch). ``share_prefill=False``: every row
    prefilled in full (no prefix cache), for tests and benchmarks. ``prefix_cache_tokens``: the prefix cache's
    size in tokens (each token keeps 2 x layers x kv_heads x head_dim values: ~3 KB for make demo's model).
    ``invariance``: "off", or a seeded request's response does not depend on the requests decoded beside it:
    "fixed-shapes": the loop's forwards take shapes that are a function of the request alone (``FIXED_SHAPES``),
    on a machine whose kernels then compute a row alike, which the backend checks with its own model at start
    (``_fixed_shapes_hold``; an error if they do not); "float64": it decodes with a float64 copy of ``model``
    whose logits, rounded to float32, round the batch away (x1.5-2 slower), refreshed by ``take_weights`` after
    each update; "auto": fixed shapes where they hold, else the float64 copy (with a warning). The attribute
    ``invariance`` says which it runs. ``engine_dtype`` (e.g. ``torch.bfloat16``): decode with a copy of ``model``
    in that dtype, refreshed by ``take_weights`` as the float64 one is, so that the engine computes another
    distribution than the trainer, as vLLM in bf16 does beside a DeepSpeed trainer (``rollout.Sample.logprobs``
    keep the engine's; train_mgrpo measures and corrects the mismatch); with ``invariance`` only fixed shapes.
    ``num_threads``: torch threads of the model thread (default: torch's setting). On a small shared CPU
    box 1 is often faster than 2: OpenMP workers spin-wait when other processes take the cores.
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = 1024, temperature: float = 1.0,
                 top_p: float = 1.0, max_batch_size: int = 64, batch_window_s: float = 0.002,
                 stop_ids: Sequence[int] | None = None, num_threads: int | None = None, share_prefill: bool = True,
                 decode: str = "auto", prefix_cache_tokens: int = 65536, invariance: str = "off",
                 engine_dtype: torch.dtype | None = None):
        if decode not in ("auto", "loop", "generate"):
            raise ValueError(f"decode={decode!r}: auto, loop or generate")
        if invariance not in ("off", "auto", "fixed-shapes", "float64"):
            raise ValueError(f"invariance={invariance!r}: off, auto, fixed-shapes or float64")
        if engine_dtype is not None and invariance == "float64":
            raise ValueError("engine_dtype and invariance='float64' both choose the copy's dtype: pick one")
        self.model, self.tokenizer = model, tokenizer
        self.copied = False                      # a copy of ``model`` in another dtype (``take_weights`` refreshes it)
        if engine_dtype is not None and engine_dtype != next(model.parameters()).dtype:
            # the engine is not the trainer: decode with a copy in this dtype (e.g. bf16, as vLLM on GPUs)
            self.model, self.copied = copy.deepcopy(model).to(engine_dtype), True
        self.fixed_shapes = False                # the loop's forwards take the shapes of FIXED_SHAPES
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_batch_size, self.batch_window_s = max_batch_size, batch_window_s
        self.share_prefill = share_prefill
        self.loop = continuous_batching_supported(model) if decode == "auto" else decode == "loop"
        self.stop_ids = sorted(set(stop_ids)) if stop_ids is not None else end_of_turn_ids(tokenizer, model)
        self.pad_id = _pad_id(tokenizer, self.stop_ids)
        self.stats = {"requests": 0, "batches": 0, "max_batch": 0, "gen_tokens": 0, "model_s": 0.0,
                      "model_cpu_s": 0.0, "shared_prefill_rows": 0, "prefill_tokens": 0, "prefix_hit_tokens": 0,
                      "prefill_s": 0.0, "decode_steps": 0}
        self._prefixes = _PrefixCache(prefix_cache_tokens if share_prefill else 0)
        self._keep_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._closed = False
        self._model_lock = threading.Lock()   # generate and logprobs_of never overlap on the model
        self._pending_lock = threading.Lock()  # the model thread takes requests in while it decodes
        # One long-lived thread runs the model: its OpenMP pool persists between batches (a fresh thread per
        # call, as asyncio.to_thread may give, re-creates it), and torch's thread count can be set there.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="hf-generate",
            initializer=torch.set_num_threads if num_threads else None,
            initargs=(num_threads,) if num_threads else ())
        self._pending: list[_Request] = []
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        if invariance in ("auto", "fixed-shapes"):
            # checked in the model thread (its torch threads are part of what the kernels choose by), once per
            # process for a model's shapes, dtype and threads (eval.py builds one backend per model)
            self.fixed_shapes = self.loop and self._executor.submit(self._fixed_shapes_checked).result()
            if not self.fixed_shapes and invariance == "fixed-shapes":
                raise RuntimeError("HFBackend: fixed shapes do not make this machine's rows batch-invariant")
            if not self.fixed_shapes:
                log.warning("HFBackend: this machine's kernels compute a row differently at the loop's fixed shapes"
                            "%s; decoding with a float64 copy of the model instead (x1.5-2 slower)",
                            "" if self.loop else " (decode=generate)")
        if invariance != "off" and not self.fixed_shapes and engine_dtype is None:
            self.model, self.copied = copy.deepcopy(model).to(torch.float64), True
        elif invariance != "off" and not self.fixed_shapes:
            log.warning("HFBackend: a %s engine at shapes that are not fixed: responses depend on the batch",
                        engine_dtype)

    @property
    def invariance(self) -> str:
        """What makes a response batch-invariant here: "fixed-shapes", "float64" (the copy) or "off"."""
        return ("fixed-shapes" if self.fixed_shapes else
                "float64" if self.copied and next(self.model.parameters()).dtype == torch.float64 else "off")

    async def generate(self, prompt_ids: Sequence[int], *, messages: list[dict] | None = None,
                       max_new_tokens: int | None = None, temperature: float | None = None,
                       top_p: float | None = None, seed: int | None = None) -> Generation:
        """Queue one prompt; resolves when its response ends. ``messages`` is ignored (ids are the prompt).
        ``seed``: the request's own noise (``_sample``), so its response is a function of its prompt and seed
        whatever else is decoded beside it; None: the global generator's next draws."""
        if not prompt_ids:
            raise ValueError("empty prompt")
        loop = asyncio.get_running_loop()
        self._ensure_worker(loop)
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        req = _Request(list(map(int, prompt_ids)), int(limit),
                       float(self.temperature if temperature is None else temperature),
                       float(self.top_p if top_p is None else top_p), loop.create_future(), seed)
        self.stats["requests"] += 1
        if req.max_new_tokens <= 0:
            return Generation([], [], "", "length")
        with self._pending_lock:
            self._pending.append(req)
        self._wake.set()
        return await req.future

    @torch.no_grad()
    async def before_update(self, module, samples: Sequence) -> None:
        """The trainer is about to update ``module``: nothing to do (every request has been answered)."""

    async def after_update(self, module) -> dict[str, float]:
        """The trainer updated ``module``: ``take_weights``; no statistics (vLLM's backend reports its push's)."""
        self.take_weights(module)
        return {}

    def take_weights(self, module) -> None:
        """Copy ``module``'s parameters into the backend's model when that is a copy of it (``invariance``'s
        float64 copy, its parameters in the same order, a PEFT wrapper's
        names ending in the base model's); nothing to do when the backend runs the trainer's model itself. Call it
        only with no request in flight (the trainer's update runs then)."""
        if not self.copied:
            return
        for (name, mine), (other, theirs) in zip(self.model.named_parameters(), module.named_parameters(),
                                                 strict=True):
            assert other.endswith(name), (name, other)
            mine.copy_(theirs)

    async def logprobs_of(self, prompt_ids: Sequence[int], target_ids: Sequence[int]) -> list[float]:
        """``model_logprobs`` in a worker thread (the probe used after a weight push)."""
        def run():
            with self._model_lock:
                return model_logprobs(self.model, prompt_ids, target_ids)
        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def aclose(self) -> None:
        """Stop the batching task and the model thread (pending requests are cancelled), and let go of the model
        (and its float64 copy): weights no one else holds are freed before the next model loads."""
        self._closed = True
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        with self._pending_lock:
            pending, self._pending = self._pending, []
        for r in pending:
            r.future.cancel()
        self._executor.shutdown(wait=False)

        def release() -> bool:   # (after the model thread's last step)
            with self._model_lock:
                on_gpu = self.model is not None and next(self.model.parameters()).device.type == "cuda"
                self.model = None
                return on_gpu
        if await asyncio.to_thread(release):
            torch.cuda.empty_cache()

    def _fixed_shapes_checked(self) -> bool:
        p = next(self.model.parameters())
        key = (self.model.config.to_json_string(), p.dtype, p.device, torch.get_num_threads())
        if key not in _FIXED_SHAPES_HOLD:
            _FIXED_SHAPES_HOLD[key] = self._fixed_shapes_hold()
        return _FIXED_SHAPES_HOLD[key]

    @torch.inference_mode()
    def _fixed_shapes_hold(self, lengths: Sequence[int] = (40, 200, 530, 1100), copies: int = 5,
                           steps: int = 3) -> bool:
        """Whether this machine computes the decode loop's rows alike at ``FIXED_SHAPES`` (model thread, at start):
        random prompts, each a prefix of the next, decoded ``steps`` tokens alone (prefilled in full) and then all
        together, ``copies`` rows each (more rows than a batch is padded to; prefilled from the blocks the
        previous prompt or copy cached, keys over 1, 2 and 3 blocks of 512); every logit must be the same to the
        bit. Lengths stop short of the model's context."""
        self.fixed_shapes, stats = True, dict(self.stats)
        limit = getattr(self.model.config, "max_position_embeddings", 2048) - steps - 1
        lengths = [n for n in lengths if n <= limit]
        vocab = self.model.get_input_embeddings().num_embeddings
        tokens = torch.randint(vocab, (max(lengths),), generator=torch.Generator().manual_seed(0)).tolist()
        prompts = [tokens[:n] for n in lengths]

        def decode(group: list[list[int]]) -> list[torch.Tensor]:
            """Each prompt's logits ``[1 + steps, V]``: after its prompt, then after each greedy token."""
            first, kvs = zip(*(self._prefill(p) for p in group))     # a repeated prompt: from its cached blocks
            rows = [_Row(_Request(p, steps, 0.0, 1.0, None), len(p), [int(lg.argmax())]) for p, lg in zip(group, first)]
            slab = _Slab(len(kvs[0]), len(rows), max(map(len, group)) + steps + 1, kvs[0][0][0])
            for i, kv in enumerate(kvs):
                slab.put(i, kv)
            slab.n = len(rows)
            out = [[lg[0]] for lg in first]
            for _ in range(steps):
                logits = self._forward(rows, slab)
                for r, o, lg in zip(rows, out, logits):
                    o.append(lg)
                    r.pos += 1
                    r.ids.append(int(lg.argmax()))
            return [torch.stack(o) for o in out]

        try:
            alone = []
            for p in prompts:
                self._prefixes.clear()
                alone += decode([p])
            self._prefixes.clear()
            together = decode([p for p in prompts for _ in range(copies)])
            return all(torch.equal(a, t) for a, t in zip([a for a in alone for _ in range(copies)], together))
        finally:
            self._prefixes.clear()
            self.fixed_shapes, self.stats = False, stats

    def _ensure_worker(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._loop, self._wake, self._pending = loop, asyncio.Event(), []
            self._worker = loop.create_task(self._batch_loop(), name="HFBackend.batch_loop")

    def _take(self, limit: int | None = None, like: _Request | None = None) -> list[_Request]:
        """Take up to ``limit`` pending requests (with ``like``'s sampling settings, if given), oldest first."""
        with self._pending_lock:
            taken = [r for r in self._pending
                     if like is None or _settings(r) == _settings(like)]
            taken = taken[:limit] if limit is not None else taken
            ids = {id(r) for r in taken}
            self._pending = [r for r in self._pending if id(r) not in ids]
        return [r for r in taken if not r.future.done()]     # a caller may have been cancelled meanwhile

    def _resolve(self, req: _Request, result: Generation | None = None, error: BaseException | None = None) -> None:
        """Hand a result to the caller's event loop (called from the model thread)."""
        def settle():
            if not req.future.done():
                req.future.set_exception(error) if error is not None else req.future.set_result(result)
        with contextlib.suppress(RuntimeError):   # the caller's loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(settle)

    async def _batch_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.batch_window_s > 0:
                await asyncio.sleep(self.batch_window_s)   # let concurrent callers join the first batch
            if self.loop:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._serve)
                continue
            while self._pending:
                batch = self._take(self.max_batch_size, like=self._pending[0])
                if not batch:
                    continue
                try:
                    gens = await asyncio.get_running_loop().run_in_executor(
                        self._executor, self._generate_batch, batch)
                except Exception as exc:  # a failing batch fails its callers, never the loop
                    for r in batch:
                        self._resolve(r, error=exc)
                    continue
                for r, g in zip(batch, gens):
                    self._resolve(r, g)

    # -- the decode loop (model thread) --

    def _serve(self) -> None:
        """Decode until no request is left: take pending requests in at every token, up to ``max_batch_size``
        rows. A failing step fails the requests it held, never the loop."""
        rows: list[_Row] = []
        new: list[_Request] = []
        slab: _Slab | None = None
        try:
            with self._model_lock, torch.inference_mode():
                while not self._closed:
                    new = self._take(self.max_batch_size - len(rows))
                    if new:
                        slab = self._admit(new, rows, slab)
                    new = []
                    if not rows:
                        return
                    self._step(rows, slab)
                for r in rows:      # closed while decoding: its callers stop waiting
                    with contextlib.suppress(RuntimeError):     # (their loop may be closed already)
                        self._loop.call_soon_threadsafe(r.req.future.cancel)
        except Exception as exc:  # noqa: BLE001  (the callers get it; the backend keeps serving)
            log.exception("HFBackend: decoding failed; its %d requests fail", len(rows) + len(new))
            for r in [row.req for row in rows] + new:
                self._resolve(r, error=exc)
        finally:
            self._prefixes.clear()    # weights may change once nothing is in flight

    def _admit(self, reqs: list[_Request], rows: list[_Row], slab: _Slab | None) -> _Slab | None:
        """Prefill each distinct prompt of ``reqs`` once (each request's, without ``share_prefill``), sample
        every request's first token in one call (the same random draws either way), and put its KV into the
        slab; a request whose first token ends it resolves at once."""
        t0, c0 = time.perf_counter(), time.thread_time()
        self.stats["batches"] += 1
        done: dict[Any, tuple[torch.Tensor, list]] = {}
        taken, logits, kvs = [], [], []
        for i, r in enumerate(reqs):
            key = tuple(r.prompt) if self.share_prefill else i
            if key in done:
                self.stats["shared_prefill_rows"] += 1
            else:
                try:
                    done[key] = self._prefill(r.prompt)
                except Exception as exc:  # noqa: BLE001  (a prompt the model cannot take fails its caller only)
                    self._resolve(r, error=exc)
                    continue
            taken.append(r)
            logits.append(done[key][0])
            kvs.append(done[key][1])
        if taken:
            tokens, logp = self._draw(torch.cat(logits), taken)
            for r, kv, tok, lp in zip(taken, kvs, tokens.tolist(), logp.tolist()):
                row = _Row(r, len(r.prompt), [tok], [lp])
                if self._finished(row):
                    continue
                cols = len(r.prompt) + r.max_new_tokens
                if slab is None:
                    slab = _Slab(len(kv), max(8, len(taken)), cols + 16, kv[0][0])
                slab.grow(len(rows) + 1, cols)
                slab.put(len(rows), kv)
                rows.append(row)
                slab.n = len(rows)
        self.stats["max_batch"] = max(self.stats["max_batch"], len(rows))
        self.stats["model_s"] += time.perf_counter() - t0
        self.stats["prefill_s"] += time.perf_counter() - t0
        self.stats["model_cpu_s"] += time.thread_time() - c0
        return slab

    def _prefill(self, prompt: list[int]) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """The last position's logits ``[1, V]`` and the per-layer KV of ``prompt``, computing only what the
        prefix cache does not hold."""
        from transformers import DynamicCache
        dev = next(self.model.parameters()).device
        n, kv = self._prefixes.longest(prompt)
        if self.fixed_shapes and n > len(prompt) - FIXED_SHAPES["rows"]:
            # compute at least `rows` positions, from a block boundary: what is cached changes no shape's rows
            n = max(0, (len(prompt) - FIXED_SHAPES["rows"]) // self._prefixes.block * self._prefixes.block)
            kv = [(k[:, :, :n], v[:, :, :n]) for k, v in kv] if n else None
        cache = DynamicCache(config=self.model.config)
        for layer, (k, v) in enumerate(kv or []):
            cache.update(k, v, layer)
        ids = torch.tensor([prompt[n:]], device=dev)
        positions = torch.arange(n, len(prompt), device=dev)[None]
        keep = {"logits_to_keep": 1} if self._keep_logits else {}
        with self._attention():
            logits = self.model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True,
                                **keep).logits[:, -1]                                 # [1, V]
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        self._prefixes.add(prompt, kv)
        self.stats["prefill_tokens"] += len(prompt) - n
        self.stats["prefix_hit_tokens"] += n
        return logits, kv

    def _forward(self, rows: list[_Row], slab: _Slab) -> torch.Tensor:
        """The next-token logits ``[n, V]`` of every row (its last token at its position). With ``fixed_shapes``
        the batch is padded to at least ``FIXED_SHAPES["rows"]`` rows (the spare ones read and write column 0 of
        slab rows nobody uses) and the attention spans ``fixed_cols`` columns."""
        n, dev = len(rows), slab.k[0].device
        pos = torch.tensor([r.pos for r in rows], device=dev)                         # [n]
        cols = int(pos.max()) + 1
        ids = [[r.ids[-1]] for r in rows]
        if self.fixed_shapes:
            rows_to, cols = FIXED_SHAPES["rows"], fixed_cols(cols)
            slab.grow(max(n, rows_to), cols)
            pos = torch.cat([pos, pos.new_zeros(max(0, rows_to - n))])               # [m]
            ids += [[self.pad_id]] * (len(pos) - n)
        slab.n = len(pos)
        slab.write, slab.cols = (torch.arange(len(pos), device=dev), pos), cols
        mask = (torch.arange(cols, device=dev)[None] <= pos[:, None])[:, None, None]   # [m, 1, 1, cols]
        _DECODE_ROWS.n = n if self.fixed_shapes else None
        try:
            with self._attention():
                logits = self.model(input_ids=torch.tensor(ids, device=dev), position_ids=pos[:, None],
                                    attention_mask=mask, past_key_values=slab, use_cache=True).logits[:n, -1]  # [n, V]
        finally:
            _DECODE_ROWS.n = None
        slab.n = n
        return logits

    def _step(self, rows: list[_Row], slab: _Slab) -> None:
        """One token for every row; rows that end leave (the last row takes the freed slot)."""
        t0, c0 = time.perf_counter(), time.thread_time()
        logits = self._forward(rows, slab)
        tokens, logp = self._draw(logits, [r.req for r in rows])
        for r, tok, lp in zip(rows, tokens.tolist(), logp.tolist()):
            r.pos += 1
            r.ids.append(tok)
            r.logprobs.append(lp)
        for i in reversed(range(len(rows))):
            if self._finished(rows[i]):
                last = len(rows) - 1
                if i != last:
                    slab.move(last, i, rows[last].pos)
                    rows[i] = rows[last]
                rows.pop()
        slab.n = len(rows)
        self.stats["decode_steps"] += 1
        self.stats["model_s"] += time.perf_counter() - t0
        self.stats["model_cpu_s"] += time.thread_time() - c0

    @staticmethod
    def _draw(logits: torch.Tensor, reqs: list[_Request]) -> tuple[torch.Tensor, torch.Tensor]:
        """``_sample`` for rows of ``logits`` ``[n, V]``, each with its request's temperature, top-p and noise."""
        dev = logits.device
        for r in reqs:
            if r.seed is not None and r.noise is None:
                r.noise = noise_generator(r.seed, dev)
        return _sample(logits, torch.tensor([r.temperature for r in reqs], device=dev),
                       torch.tensor([r.top_p for r in reqs], device=dev), [r.noise for r in reqs])

    def _attention(self):
        """The model's SDPA attention as ``_sdpa_gqa`` for one forward of the loop (restored right after it, so a
        forward of the trainer, which runs only when no request is in flight, never sees the switch)."""
        sdpa = self.model.config._attn_implementation == "sdpa"
        return _attention(self.model, _register_sdpa_gqa(self.fixed_shapes) if sdpa else None)

    def _finished(self, row: _Row) -> bool:
        """Resolve ``row``'s request if its last token ends it (end of turn, or its token budget); True too
        when its caller stopped waiting (a cancelled episode: the row leaves unfinished)."""
        if row.req.future.cancelled():
            return True
        stopped = row.ids[-1] in self.stop_ids
        if not stopped and len(row.ids) < row.req.max_new_tokens:
            return False
        self.stats["gen_tokens"] += len(row.ids)
        body = row.ids[:-1] if stopped else row.ids
        self._resolve(row.req, Generation(row.ids, row.logprobs, self.tokenizer.decode(body, skip_special_tokens=True),
                                          "stop" if stopped else "length"))
        return True

    # -- decode="generate": dynamic batches of model.generate (model thread) --

    def _shared_prefill(self, reqs: list[_Request], input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """The KV cache of every prompt but its last token, computed once per distinct prompt and copied to the
        rows that repeat it (the G trajectories of an RL group start from the same page, so their first
        prompts are equal); None when no prompt repeats. ``generate`` then runs only the last prompt token
        of each row before sampling: the same positions (left padding, as generate computes them) and the
        same result as a full prefill, to float rounding."""
        first: dict[tuple[int, ...], int] = {}
        row_of = [first.setdefault(tuple(r.prompt), len(first)) for r in reqs]
        if not self.share_prefill or len(first) == len(reqs) or input_ids.shape[1] < 2:
            return None
        from transformers import DynamicCache
        distinct = torch.tensor([row_of.index(k) for k in range(len(first))], device=input_ids.device)
        mask = attention_mask[distinct, :-1]
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        cache = DynamicCache(config=self.model.config)
        self.model(input_ids=input_ids[distinct, :-1], attention_mask=mask, position_ids=positions,
                   past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache.reorder_cache(torch.tensor(row_of, device=input_ids.device))
        self.stats["shared_prefill_rows"] += len(reqs) - len(first)
        return cache

    def _generate_batch(self, reqs: list[_Request]) -> list[Generation]:
        """One left-padded ``model.generate`` call (worker thread)."""
        from transformers import GenerationConfig, LogitsProcessorList

        dev = next(self.model.parameters()).device
        B, L = len(reqs), max(len(r.prompt) for r in reqs)
        input_ids = torch.full((B, L), self.pad_id, dtype=torch.long)                 # [B, L]
        attention_mask = torch.zeros((B, L), dtype=torch.long)                        # [B, L]
        for i, r in enumerate(reqs):
            input_ids[i, L - len(r.prompt):] = torch.tensor(r.prompt)
            attention_mask[i, L - len(r.prompt):] = 1
        temp, top_p = reqs[0].temperature, reqs[0].top_p
        seeded = temp > 0 and reqs[0].seed is not None       # (a batch shares _settings: all seeded or none)
        sample = temp > 0 and not seeded                     # seeded rows: greedy over _SeededNoise's scores
        # Every knob explicit: unset values would be filled from the checkpoint's generation_config and
        # HF's global defaults (top_k=50), silently changing pi.
        warp = dict(temperature=temp, top_p=top_p, top_k=0, typical_p=1.0) if sample else {}
        if sample and getattr(self.model.generation_config, "min_p", None):
            warp["min_p"] = 0.0                   # a checkpoint's min_p would truncate pi as well
        gc = GenerationConfig(
            max_new_tokens=max(r.max_new_tokens for r in reqs), do_sample=sample, num_beams=1,
            repetition_penalty=1.0, no_repeat_ngram_size=0, eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id, use_cache=True, return_dict_in_generate=True, **warp)
        rec = _LogprobRecorder()
        processors = [rec, _SeededNoise(reqs, dev)] if seeded else [rec]
        with self._model_lock, torch.inference_mode():
            t0, c0 = time.perf_counter(), time.thread_time()
            input_ids, attention_mask = input_ids.to(dev), attention_mask.to(dev)
            past = self._shared_prefill(reqs, input_ids, attention_mask)
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, past_key_values=past,
                                      generation_config=gc, logits_processor=LogitsProcessorList(processors))
            new = out.sequences[:, L:].cpu()                                           # [B, T]
            logp = rec.finish(out.sequences[:, -1]).cpu()                              # [B, T]
            self.stats["model_s"] += time.perf_counter() - t0
            self.stats["model_cpu_s"] += time.thread_time() - c0
        self.stats["batches"] += 1
        self.stats["max_batch"] = max(self.stats["max_batch"], B)
        stops = set(self.stop_ids)
        gens = []
        for i, r in enumerate(reqs):
            row = new[i, :r.max_new_tokens].tolist()
            end = next((k for k, t in enumerate(row) if t in stops), None)
            ids = row if end is None else row[:end + 1]
            body = ids if end is None else ids[:-1]
            self.stats["gen_tokens"] += len(ids)
            gens.append(Generation(ids, logp[i, :len(ids)].tolist(),
                                   self.tokenizer.decode(body, skip_special_tokens=True),
                                   "length" if end is None else "stop"))
        return gens

