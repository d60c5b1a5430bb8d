"""Peak memory of one M-GRPO update (forward + Eq. 2 loss + backward) with log-probs from full-vocabulary
logits of every position (``logprobs.token_logprobs``, what the update used before) and from the action
tokens only (``logprobs.action_logprobs``, what it uses now), side by side in one run.

The model has Qwen2.5's vocabulary (151,936 tokens, tied embeddings as in Qwen2.5-0.5B / 3B) and a small
body (hidden 64, 2 layers, fp32 on this CPU): the logits are what grows with the vocabulary, and the body
is the same for both. A sample is one row of L tokens whose last ``--action-tokens`` are the action (a
multi-turn M-GRPO sample: a long prompt, one short response). Each (variant, L) runs in its own process
whose address space is capped at ``--cap-gib`` (an allocation beyond it fails there, instead of waking the
kernel's OOM killer on a shared box); peak = the process's max RSS minus its RSS before the forward.
The two losses must agree to float tolerance.

Run: .venv/bin/python bench/bench_logprob_memory.py [--lengths 4096,16384] [--action-tokens 256]
Results are recorded by hand in bench/RESULTS.md under "## update memory".
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QWEN25_VOCAB = 151_936


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one(variant: str, length: int, action_tokens: int, cap_gib: float) -> dict:
    """One update's forward + backward in this process; returns its peak memory and loss."""
    cap = int(cap_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import logprobs
    from train_mgrpo import mgrpo_loss
    torch.manual_seed(0)
    torch.set_num_threads(2)
    cfg = Qwen2Config(vocab_size=QWEN25_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      max_position_embeddings=32768)
    model = Qwen2ForCausalLM(cfg).float()
    ids = torch.randint(0, QWEN25_VOCAB, (1, length))
    attn = torch.ones_like(ids)
    mask = torch.zeros(1, length)
    mask[0, -action_tokens:] = 1
    ref = torch.full((1, length), -2.0)
    adv, weight = torch.tensor([1.0]), torch.tensor([1.0 / action_tokens])
    base = rss_bytes()
    t0 = time.perf_counter()
    try:
        if variant == "full":
            logp, _ = logprobs.token_logprobs(model, ids, attn)
        else:
            logp, *_ = logprobs.action_logprobs(model, ids, attn, mask)
        loss, _ = mgrpo_loss(logp, logp.detach(), ref, mask, adv, weight)
        loss.backward()
    except (RuntimeError, MemoryError) as e:           # the cap: "can't allocate memory"
        return {"variant": variant, "length": length, "error": str(e).splitlines()[0][:120]}
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    grad = sum(float(p.grad.double().pow(2).sum()) for p in model.parameters() if p.grad is not None) ** 0.5
    return {"variant": variant, "length": length, "peak_gib": peak / 2**30, "seconds": seconds,
            "loss": float(loss), "grad_norm": grad}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="4096,16384")
    p.add_argument("--action-tokens", type=int, default=256)
    p.add_argument("--cap-gib", type=float, default=16.0)
    p.add_argument("--one", default="", help=argparse.SUPPRESS)        # internal: VARIANT:LENGTH
    a = p.parse_args()
    if a.one:
        variant, length = a.one.split(":")
        print(json.dumps(one(variant, int(length), a.action_tokens, a.cap_gib)))
        return
    print(f"vocabulary {QWEN25_VOCAB}, {a.action_tokens} action tokens per sample, address space capped at "
          f"{a.cap_gib:g} GiB per run")
    print(f"{'tokens':>7} | {'full logits: peak GiB':>22} | {'action tokens: peak GiB':>24} | ratio | "
          f"{'seconds full / action':>22} | loss diff")
    for length in (int(x) for x in a.lengths.split(",")):
        res = {}
        for variant in ("full", "action"):
            out = subprocess.run([sys.executable, __file__, "--one", f"{variant}:{length}", "--action-tokens",
                                  str(a.action_tokens), "--cap-gib", str(a.cap_gib)],
                                 capture_output=True, text=True)
            lines = out.stdout.strip().splitlines()
            res[variant] = json.loads(lines[-1]) if out.returncode == 0 and lines else \
                {"error": f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1][:120] if out.stderr else ''}"}
        f, c = res["full"], res["action"]

        def peak(r: dict) -> str:
            return f"{r['peak_gib']:.2f}" if "peak_gib" in r else f"> {a.cap_gib:g} (failed)"
        ratio = f"{f['peak_gib'] / c['peak_gib']:.0f}x" if "peak_gib" in f and "peak_gib" in c else "-"
        secs = f"{f['seconds']:.1f} / {c['seconds']:.1f}" if "seconds" in f and "seconds" in c else \
            f"- / {c.get('seconds', float('nan')):.1f}"
        diff = f"{abs(f['loss'] - c['loss']):.1e}" if "loss" in f and "loss" in c else "-"
        print(f"{length:>7} | {peak(f):>22} | {peak(c):>24} | {ratio:>5} | {secs:>22} | {diff}")
        for r in (f, c):
            if "error" in r:
                print(f"        {r.get('variant', '?')}: {r['error']}")


if __name__ == "__main__":
    main()
