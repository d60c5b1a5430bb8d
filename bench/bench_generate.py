"""Benchmark: dynamic batching in hf_backend.HFBackend vs one-at-a-time generation (target: >= 3x at 8
concurrent requests with the tiny model on CPU), plus the tiny model's single-request latency.

Each request is a chat prompt (system words + a synthetic MiniWoB-like observation) of a different length;
decoding is greedy with no stop token, so both modes generate exactly the same tokens (checked) and the
ratio is pure batching gain. "one at a time" awaits each request before sending the next (what a rollout
loop without batching does); "batched" sends all of them concurrently (asyncio.gather), as the
asynchronous rollouts of train_mgrpo.py do.

Speedups are ratios of the model thread's CPU time (best of --reps; with --threads 1 that is all of the
model's work, so the ratio holds on a busy shared box), wall-clock ratios are printed too.

Run:
    .venv/bin/python bench/bench_generate.py                      # tiny model, 8 requests, CPU
    .venv/bin/python bench/bench_generate.py --prompt-tokens 1000 --new-tokens 40
    .venv/bin/python bench/bench_generate.py --grid               # table over prompt / response lengths
    .venv/bin/python bench/bench_generate.py --vllm --spec assets/tiny-web-base   # HF vs vLLM-CPU, push time
    .venv/bin/python bench/bench_generate.py --decode-compare --spec runs/demo/bc/hf --n 64 --group 8  # loop vs generate

``--decode-compare``: the HF backend's two decode paths on the same concurrent requests: continuous batching on
its own loop (``decode="loop"``, the default) against dynamic batches of ``model.generate`` (``decode="generate"``,
the code before issue 43). G copies of each of n/G pages (an RL group's first turn), each request with its own
response length (drawn once, from new_tokens/4 to new_tokens: responses end at different tokens), greedy, so both
paths must give the same tokens (checked); model-thread CPU and wall seconds, best of --reps.

``--vllm``: the same prompts through HFBackend (dynamic batching) and VLLMBackend (the real engine, vllm-cpu
on a CPU box, prefix caching on, its cache reset before each repetition), all sent concurrently, greedy with
no stop; the prompts are G copies of each of n/G pages, as the G rollouts of a group start from one page
(shared prefixes). Wall-clock ratio (vLLM runs in its own processes), then the time of one weight push.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainlib import cli  # noqa: E402


@dataclass
class Args:
    """Benchmark settings (one field per flag)."""
    spec: str = "tiny"               # model: "tiny[:...]" or a local HF checkpoint
    n: int = 8                       # concurrent requests
    prompt_tokens: int = 600         # longest prompt, in tokens; the others are shorter (down to 60%)
    new_tokens: int = 64             # tokens generated per request (greedy, no stop)
    reps: int = 3                    # repetitions; the median is reported
    threads: int = 1                 # torch threads of the model thread (0 = torch's default); with 1 the
    #                                  model-thread CPU time is all of the model's work (contention-robust)
    device: str = "cpu"
    grid: bool = False               # print a table over prompt / response lengths instead
    vllm: bool = False               # compare HFBackend with VLLMBackend (real engine) instead
    group: int = 4                   # --vllm, --decode-compare: requests per distinct page (G)
    decode_compare: bool = False     # the HF backend's decode loop vs its model.generate batches instead


def parse_args() -> Args:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in vars(Args()).items():
        if isinstance(default, bool):
            p.add_argument("--" + name.replace("_", "-"), action="store_true")
        else:
            p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return Args(**vars(p.parse_args()))


cli.answer_help(parse_args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402

from engines import hf_backend  # noqa: E402
import policy  # noqa: E402
from engines import vllm_backend  # noqa: E402


def make_prompts(tok, n: int, longest: int) -> list[list[int]]:
    """n prompts, lengths spread evenly from 60% to 100% of ``longest`` tokens."""
    prompts = []
    for i in range(n):
        want = int(longest * (0.6 + 0.4 * i / max(1, n - 1)))
        items, ids = 1, []
        while True:
            obs = " ".join(f'<button id="{k}" data-bbox="{k},{2 * k},40,20"> item {k} </button>' for k in range(items))
            msgs = [{"role": "system", "content": "You are a web agent. Answer with one action."},
                    {"role": "user", "content": f"Task Instruction: click item {i}\n\nRound 0\n\n{obs}"}]
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            new = tok(text, add_special_tokens=False)["input_ids"]
            if len(new) > want:
                break
            ids, items = new, items + 1
        prompts.append(ids)
    return prompts


async def run_sequential(backend, prompts, new_tokens):
    return [await backend.generate(p, max_new_tokens=new_tokens) for p in prompts]


async def run_batched(backend, prompts, new_tokens):
    return await asyncio.gather(*(backend.generate(p, max_new_tokens=new_tokens) for p in prompts))


def timed(coro_fn, backend, *a):
    """(wall seconds, model-thread CPU seconds, outputs) of one run."""
    t0, c0 = time.perf_counter(), backend.stats["model_cpu_s"]
    out = asyncio.run(coro_fn(backend, *a))
    return time.perf_counter() - t0, backend.stats["model_cpu_s"] - c0, out


def measure(args: Args, model, tok, prompt_tokens: int, new_tokens: int) -> dict:
    """Best-of / median wall and model-thread CPU seconds of both modes for one setting."""
    threads = args.threads or None
    backend = hf_backend.HFBackend(model, tok, max_new_tokens=new_tokens, temperature=0.0, stop_ids=[],
                                   max_batch_size=max(16, args.n), num_threads=threads)
    # the baseline does not pay the batching window (2 ms per request)
    serial = hf_backend.HFBackend(model, tok, max_new_tokens=new_tokens, temperature=0.0, stop_ids=[],
                                  batch_window_s=0.0, num_threads=threads)
    prompts = make_prompts(tok, args.n, prompt_tokens)
    timed(run_batched, backend, prompts[:2], 4)                      # warm up both model threads
    timed(run_sequential, serial, prompts[:2], 4)
    r = {k: [] for k in ("seq_t", "seq_c", "bat_t", "bat_c", "one_t")}
    for _ in range(args.reps):
        t, c, seq = timed(run_sequential, serial, prompts, new_tokens)
        r["seq_t"].append(t)
        r["seq_c"].append(c)
        t, c, bat = timed(run_batched, backend, prompts, new_tokens)
        r["bat_t"].append(t)
        r["bat_c"].append(c)
        r["one_t"].append(timed(run_sequential, serial, prompts[-1:], new_tokens)[0])
        assert [g.ids for g in seq] == [g.ids for g in bat], "batched greedy outputs differ from unbatched"
    assert backend.stats["max_batch"] == args.n
    r["lens"] = [len(p) for p in prompts]
    for k in ("seq_t", "seq_c", "bat_t", "bat_c", "one_t"):
        r[k + "_min"], r[k + "_med"] = min(r[k]), statistics.median(r[k])
    r["speedup_cpu"] = r["seq_c_min"] / r["bat_c_min"]
    r["speedup_wall"] = r["seq_t_min"] / r["bat_t_min"]
    return r


def compare_vllm(args: Args, model, tok) -> None:
    """HFBackend vs VLLMBackend on the same concurrent greedy requests (wall-clock, best of --reps), then push."""
    import tempfile
    pages = make_prompts(tok, max(1, args.n // args.group), args.prompt_tokens)
    prompts = [p for p in pages for _ in range(args.group)]
    toks = len(prompts) * args.new_tokens
    hf = hf_backend.HFBackend(model, tok, max_new_tokens=args.new_tokens, temperature=0.0, stop_ids=[],
                              max_batch_size=max(16, len(prompts)), num_threads=args.threads or None)

    async def run(backend, reset: bool):
        if reset:
            await backend.engine.reset_prefix_cache()
        t0 = time.perf_counter()
        out = await run_batched(backend, prompts, args.new_tokens)
        return time.perf_counter() - t0, out

    async def go():
        with tempfile.TemporaryDirectory() as path:
            model.save_pretrained(path)
            tok.save_pretrained(path)
            t0 = time.perf_counter()
            vl = vllm_backend.VLLMBackend(path, tokenizer=tok, max_new_tokens=args.new_tokens, temperature=0.0,
                                    stop_ids=[], max_model_len=max(2048, args.prompt_tokens * 2))
            start = time.perf_counter() - t0
            plain = vl.sampling_params                # no stop at all: vLLM would still stop at eos
            vl.sampling_params = lambda **kw: plain(**kw, ignore_eos=True)
            await run(vl, True)                       # warm-up both
            await run(hf, False)
            hf_t, vl_t = [], []
            for _ in range(args.reps):
                t, hf_out = await run(hf, False)
                hf_t.append(t)
                t, vl_out = await run(vl, True)
                vl_t.append(t)
            assert all(len(g.ids) == args.new_tokens for g in hf_out + vl_out)
            same = sum(a.ids == b.ids for a, b in zip(hf_out, vl_out)) / len(prompts)
            pushes = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                await vllm_backend.push_weights_to_vllm(vl, model)
                pushes.append(time.perf_counter() - t0)
            await vl.aclose()
            await hf.aclose()
        return start, min(hf_t), min(vl_t), same, min(pushes)

    start, hf_s, vl_s, same, push = asyncio.run(go())
    n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"{len(prompts)} concurrent requests ({len(pages)} pages x G={args.group}), prompts {[len(p) for p in pages]} "
          f"tokens, {args.new_tokens} new tokens each, greedy; best of {args.reps}")
    print(f"HF backend ({args.threads or torch.get_num_threads()} thread(s)): {hf_s:.3f} s  ({toks / hf_s:.0f} tok/s)")
    print(f"vLLM (real engine, prefix caching): {vl_s:.3f} s  ({toks / vl_s:.0f} tok/s)   engine start {start:.1f} s")
    print(f"vLLM / HF speed: x{hf_s / vl_s:.2f} (wall)   identical greedy outputs: {same:.0%}")
    print(f"weight push ({n_bytes / 1e6:.1f} MB): {push * 1000:.0f} ms")
    print(f"load average  : {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores")


def compare_decode(args: Args, model, tok) -> None:
    """decode="generate" vs decode="loop" on the same concurrent greedy requests (see the module docstring)."""
    import random
    pages = make_prompts(tok, max(1, args.n // args.group), args.prompt_tokens)
    prompts = [p for p in pages for _ in range(args.group)]
    rng = random.Random(0)
    lengths = [rng.randint(max(1, args.new_tokens // 4), args.new_tokens) for _ in prompts]

    async def run(backend):
        return await asyncio.gather(*(backend.generate(p, max_new_tokens=n) for p, n in zip(prompts, lengths)))

    backends = {d: hf_backend.HFBackend(model, tok, max_new_tokens=args.new_tokens, temperature=0.0, stop_ids=[],
                                        max_batch_size=len(prompts), num_threads=args.threads or None, decode=d)
                for d in ("generate", "loop")}
    for b in backends.values():
        timed(lambda be: run(be), b)                                  # warm-up
    res = {d: [] for d in backends}
    outs = {}
    for _ in range(args.reps):
        for d, b in backends.items():
            t, c, outs[d] = timed(lambda be: run(be), b)
            res[d].append((t, c))
        assert [g.ids for g in outs["generate"]] == [g.ids for g in outs["loop"]], "the two paths' tokens differ"
    print(f"{len(prompts)} concurrent requests ({len(pages)} pages x G={args.group}), prompts {[len(p) for p in pages]} "
          f"tokens, {sum(lengths)} new tokens ({min(lengths)}-{max(lengths)} per request), greedy; best of {args.reps}")
    best = {d: (min(t for t, _ in r), min(c for _, c in r)) for d, r in res.items()}
    for d, (t, c) in best.items():
        print(f"decode={d:>8}: wall {t:.2f} s, model-thread CPU {c:.2f} s, {sum(lengths) / t:.0f} tok/s")
    print(f"loop / generate: x{best['generate'][1] / best['loop'][1]:.2f} (CPU), x{best['generate'][0] / best['loop'][0]:.2f} "
          f"(wall); identical greedy outputs: yes; load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    args = parse_args()
    print("args:", vars(args))
    model, tok = policy.load(args.spec, device=args.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {args.spec}  params={n_params:,}  vocab={len(tok)}  layers={model.config.num_hidden_layers} "
          f"hidden={model.config.hidden_size}  torch threads={args.threads or torch.get_num_threads()}")
    if args.vllm:
        return compare_vllm(args, model, tok)
    if args.decode_compare:
        return compare_decode(args, model, tok)
    if args.grid:
        print(f"\n| prompt tokens (longest) | new tokens | one at a time s | batched ({args.n}) s | "
              "speedup (CPU) | speedup (wall) | single request ms |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for p_tok, n_tok in [(300, 32), (300, 64), (300, 128), (440, 28), (600, 32), (600, 64), (600, 128),
                             (1000, 40), (1000, 128)]:
            r = measure(args, model, tok, p_tok, n_tok)
            print(f"| {r['lens'][-1]} | {n_tok} | {r['seq_c_min']:.3f} | {r['bat_c_min']:.3f} | "
                  f"{r['speedup_cpu']:.2f}x | {r['speedup_wall']:.2f}x | {r['one_t_min'] * 1000:.0f} |", flush=True)
        print(f"(CPU = model-thread CPU seconds, best of {args.reps}; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
        return
    r = measure(args, model, tok, args.prompt_tokens, args.new_tokens)
    toks = args.n * args.new_tokens
    print(f"prompt tokens: {r['lens']}")
    print(f"single request ({r['lens'][-1]}-token prompt, {args.new_tokens} new tokens): "
          f"{r['one_t_min'] * 1000:.0f} ms best, {r['one_t_med'] * 1000:.0f} ms median")
    print(f"one at a time : {r['seq_t_min']:.3f} s wall ({toks / r['seq_t_min']:.0f} tok/s), "
          f"model-thread CPU {r['seq_c_min']:.3f} s   (best of {args.reps})")
    print(f"batched ({args.n:>2})  : {r['bat_t_min']:.3f} s wall ({toks / r['bat_t_min']:.0f} tok/s), "
          f"model-thread CPU {r['bat_c_min']:.3f} s")
    print(f"speedup       : {r['speedup_cpu']:.2f}x model-thread CPU, {r['speedup_wall']:.2f}x wall "
          f"(target >= 3x)  [greedy outputs identical]")
    print(f"load average  : {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
