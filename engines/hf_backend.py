"""The HF generation engine: ``HFBackend`` samples the actions of pi_theta from an HF causal LM (the model
``policy.load`` returns; ``policy.make_backend("hf", ...)`` builds one), on a CPU box or a GPU.

What it implements
- ``HFBackend``, behind the async interface every backend shares (``await backend.generate(prompt_ids, *,
  messages=None, max_new_tokens=None, temperature=None, top_p=None, seed=None) -> Generation``), the model run
  in one worker thread so the event loop (the browsers) keeps running:
  * continuous batching on its own decode loop: a request joins the rows being decoded at the next token and
    leaves the token it ends; rows may mix temperatures and top-p; their KV lives in a preallocated slab, and
    prompts are prefilled from the blocks they share with a recent prompt (hf_kv.py: ``Slab``, ``PrefixCache``,
    the attention);
  * stops at the end-of-turn token (and eos: ``end_of_turn_ids``); returns per-token log-probs;
  * ``decode="generate"``: dynamic batches of HF's ``model.generate`` instead, for models whose cache the loop
    cannot hold (``continuous_batching_supported``) and for benchmarks comparing the two.
- Sampling noise per request from a seed (common random numbers): a seeded request draws each token as
  argmax(scores + Gumbel noise) from its own generator (``noise_generator``, ``gumbel_noise``), so its response
  is a function of its prompt and seed only; without a seed, the global generator's next draws.
- Batch invariance (``invariance``): a seeded response the same to the bit whatever else is decoded beside it,
  by forwards at shapes that depend on the request alone (``hf_kv.FIXED_SHAPES``, checked at start by
  ``_fixed_shapes_hold``; prompts prefilled on a grid whatever the prefix cache holds, ``hf_kv.PREFILL_CHUNK``),
  or by a float64 copy of the model where those shapes do not suffice; ``engine_dtype``:
  a bfloat16 copy instead (an engine that is not the trainer, docs/training.md).
- ``model_logprobs`` / ``backend.logprobs_of``: log pi(target | prompt), to compare the trainer with the rollout engine after a weight push.
- ``Generation.logprobs[k]`` = log softmax(raw logits)[ids[k]]: the model's distribution at temperature 1 with
  no truncation (the sampling distribution's exactly when T = 1 and top-p = 1, the paper's rollouts; vLLM's
  ``logprobs_mode="raw_logprobs"`` is the same). ``ids`` include the final end-of-turn token when generation
  stopped there, so the loss mask covers it; ``text`` excludes it.
The module imports only the interface (engines/__init__.py) and hf_kv.py: policy.py loads models and tokenizers
and builds backends.

Departures from the paper: the paper samples with vLLM on GPUs; this backend exists so everything runs on a CPU
box. It samples as HF's sampler does (temperature, then top-p; no top-k: HF's default of 50 would truncate pi).

How to run
    .venv/bin/python -m pytest -q tests/test_policy.py
    .venv/bin/python bench/bench_generate.py
On a small shared CPU box prefer ``HFBackend(num_threads=1)``: with 2 torch threads, OpenMP workers spin-wait
for descheduled peers and generation got 5-30x slower under load (bench/RESULTS.md).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import inspect
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from engines import SAMPLING, Generation, end_of_turn_ids, request_settings
from engines import hf_kv

log = logging.getLogger(__name__)


# ---- stop and pad ids (the interface: Generation, request_settings, end_of_turn_ids, engines/__init__.py) ----

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
    prefix it shares with a recent prompt in blocks of the prefill's grid (``hf_kv.PrefixCache``,
    ``hf_kv.PREFILL_CHUNK``: the G trajectories of an RL group start from one page, every turn of a task repeats
    the system prompt and the goal); its KV then goes into a preallocated slab (``hf_kv.Slab``) where each decode
    step writes one column per row. Rows may mix temperatures and top-p.
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
    "fixed-shapes": the loop's forwards take shapes that are a function of the request alone (``hf_kv.FIXED_SHAPES``),
    on a machine whose kernels then compute a row alike, which the backend checks with its own model at start
    (``_fixed_shapes_hold``; an error if they do not); "float64": it decodes with a float64 copy of ``model``
    whose logits, rounded to float32, round the batch away (x1.5-2 slower), refreshed by ``take_weights`` after
    each update; "auto": fixed shapes where they hold, else the float64 copy (with a warning). The attribute
    ``invariance`` says which it runs. ``engine_dtype`` (e.g. ``torch.bfloat16``): decode with a copy of ``model``
    in that dtype, refreshed by ``take_weights`` as the float64 one is, so that the engine computes another
    distribution than the trainer, as vLLM in bf16 does beside a DeepSpeed trainer (``rollout.Sample.logprobs``
    keep the engine's; train_mgrpo measures and corrects the mismatch); with ``invariance`` only fixed shapes.
    ``own_weights``: decode with a copy of ``model`` in its dtype, refreshed only by ``take_weights`` (train_mgrpo's
    --async-steps 1: the update runs while this decodes). ``num_threads``: torch threads of the model thread
    (default: torch's setting). On a small shared CPU box 1 is often faster than 2: OpenMP workers spin-wait when
    other processes take the cores.
    """

    def __init__(self, model, tokenizer, *, max_new_tokens: int = SAMPLING.max_new_tokens,
                 temperature: float = SAMPLING.temperature, top_p: float = SAMPLING.top_p,
                 max_batch_size: int = 64, batch_window_s: float = 0.002,
                 stop_ids: Sequence[int] | None = None, num_threads: int | None = None, share_prefill: bool = True,
                 decode: str = "auto", prefix_cache_tokens: int = 65536, invariance: str = "off",
                 engine_dtype: torch.dtype | None = None, own_weights: bool = False):
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
        elif own_weights:   # a copy in the trainer's dtype: the trainer updates while this decodes (one step off)
            self.model, self.copied = copy.deepcopy(model), True
        self.fixed_shapes = False                # the loop's forwards take the shapes of hf_kv.FIXED_SHAPES
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_batch_size, self.batch_window_s = max_batch_size, batch_window_s
        self.share_prefill = share_prefill
        self.loop = continuous_batching_supported(model) if decode == "auto" else decode == "loop"
        self.stop_ids = sorted(set(stop_ids)) if stop_ids is not None else end_of_turn_ids(tokenizer, model)
        self.pad_id = _pad_id(tokenizer, self.stop_ids)
        self.stats = {"requests": 0, "batches": 0, "max_batch": 0, "gen_tokens": 0, "model_s": 0.0,
                      "model_cpu_s": 0.0, "shared_prefill_rows": 0, "prefill_tokens": 0, "prefix_hit_tokens": 0,
                      "prefill_s": 0.0, "decode_steps": 0}
        self._prefixes = hf_kv.PrefixCache(prefix_cache_tokens if share_prefill else 0)
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
        req = _Request(list(map(int, prompt_ids)), *request_settings(self, max_new_tokens, temperature, top_p),
                       loop.create_future(), seed)
        self.stats["requests"] += 1
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

    async def load_weights(self, module) -> None:
        """A resumed run's first sync: ``take_weights`` (the copy was made from the checkpoint's weights already)."""
        self.take_weights(module)

    def take_weights(self, module) -> None:
        """Copy ``module``'s parameters into the backend's model when that is a copy of it (``invariance``'s
        float64 copy, its parameters in the same order, a PEFT wrapper's
        names ending in the base model's); nothing to do when the backend runs the trainer's model itself. Call it
        only with no request in flight (the trainer's update runs then)."""
        if not self.copied:
            return
        with torch.no_grad():   # (the trainer calls it in grad mode; the copy's parameters are leaves)
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
        """Whether this machine computes the decode loop's rows alike at ``hf_kv.FIXED_SHAPES`` (model thread,
        at start): random prompts, each a prefix of the next, decoded ``steps`` tokens alone (prefilled in full)
        and then all together, ``copies`` rows each (more rows than a batch is padded to; prefilled from the blocks
        the previous prompt or copy cached, keys over 1, 2 and 3 blocks of 512); every logit must be the same to
        the bit. Lengths stop short of the model's context."""
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
            slab = hf_kv.Slab(len(kvs[0]), len(rows), max(map(len, group)) + steps + 1, kvs[0][0][0])
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
        slab: hf_kv.Slab | None = None
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

    def _admit(self, reqs: list[_Request], rows: list[_Row], slab: hf_kv.Slab | None) -> hf_kv.Slab | None:
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
                    slab = hf_kv.Slab(len(kv), max(8, len(taken)), cols + 16, kv[0][0])
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
        prefix cache does not hold, in chunks on a fixed grid (``hf_kv.PREFILL_CHUNK``, the cache's block: what it
        holds ends on the grid, so the result is the same to the bit whatever the cache held)."""
        from transformers import DynamicCache
        dev, chunk = next(self.model.parameters()).device, hf_kv.PREFILL_CHUNK
        n, kv = self._prefixes.longest(prompt)          # (n < len(prompt): the last position's logits are computed)
        cache = DynamicCache(config=self.model.config)
        for layer, (k, v) in enumerate(kv or []):
            cache.update(k, v, layer)
        keep = {"logits_to_keep": 1} if self._keep_logits else {}
        for start in range(n, len(prompt), chunk):
            end = min(start + chunk, len(prompt))
            with self._attention():
                logits = self.model(input_ids=torch.tensor([prompt[start:end]], device=dev), use_cache=True,
                                    position_ids=torch.arange(start, end, device=dev)[None], past_key_values=cache,
                                    **keep).logits[:, -1]                             # [1, V]
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        self._prefixes.add(prompt, kv)
        self.stats["prefill_tokens"] += len(prompt) - n
        self.stats["prefix_hit_tokens"] += n
        return logits, kv

    def _forward(self, rows: list[_Row], slab: hf_kv.Slab) -> torch.Tensor:
        """The next-token logits ``[n, V]`` of every row (its last token at its position). With ``fixed_shapes``
        the batch is padded to at least ``hf_kv.FIXED_SHAPES["rows"]`` rows (the spare ones read and write column 0 of
        slab rows nobody uses) and the attention spans ``fixed_cols`` columns."""
        n, dev = len(rows), slab.k[0].device
        pos = torch.tensor([r.pos for r in rows], device=dev)                         # [n]
        cols = int(pos.max()) + 1
        ids = [[r.ids[-1]] for r in rows]
        if self.fixed_shapes:
            rows_to, cols = hf_kv.FIXED_SHAPES["rows"], hf_kv.fixed_cols(cols)
            slab.grow(max(n, rows_to), cols)
            pos = torch.cat([pos, pos.new_zeros(max(0, rows_to - n))])               # [m]
            ids += [[self.pad_id]] * (len(pos) - n)
        slab.n = len(pos)
        slab.write, slab.cols = (torch.arange(len(pos), device=dev), pos), cols
        mask = (torch.arange(cols, device=dev)[None] <= pos[:, None])[:, None, None]   # [m, 1, 1, cols]
        hf_kv.DECODE_ROWS.n = n if self.fixed_shapes else None
        try:
            with self._attention():
                logits = self.model(input_ids=torch.tensor(ids, device=dev), position_ids=pos[:, None],
                                    attention_mask=mask, past_key_values=slab, use_cache=True).logits[:n, -1]  # [n, V]
        finally:
            hf_kv.DECODE_ROWS.n = None
        slab.n = n
        return logits

    def _step(self, rows: list[_Row], slab: hf_kv.Slab) -> None:
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
        """The model's SDPA attention as ``hf_kv.sdpa_gqa`` for one forward of the loop (restored right after it, so a
        forward of the trainer, which runs only when no request is in flight, never sees the switch)."""
        sdpa = self.model.config._attn_implementation == "sdpa"
        return hf_kv.attention(self.model, hf_kv.register_sdpa_gqa(self.fixed_shapes) if sdpa else None)

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

