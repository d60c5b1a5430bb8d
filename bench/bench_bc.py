"""Where a BC step's time goes, and what padding costs it: one step of Eq. 1 on a micro-batch of demonstration
steps, run as one right-padded batch (train_bc.py before issue 68) and as the same samples sorted by length and
split into pieces whose gradients add up to the same step (the sum of action-token log-probs over the piece,
divided by the micro-batch's action tokens). Every variant runs on the same micro-batches, taking turns
(A B ... B A) so that a busy box slows them alike; the table prints seconds per step, the ratio to one padded
batch, the share of computed tokens that are padding, and how far each variant's gradient is from the padded
batch's (float rounding only).

    .venv/bin/python bench/bench_bc.py --model assets/tiny-web-base --data runs/recipe/demos.jsonl --steps 6
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="assets/tiny-web-base")
    ap.add_argument("--data", required=True, help="demonstrations (demos.py's JSONL)")
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--splits", default="1,2,4,16",
                    help="pieces per micro-batch to compare, the first the reference (1: one padded batch)")
    ap.add_argument("--steps", type=int, default=6, help="micro-batches, each run by every variant")
    ap.add_argument("--prompt", default="short")
    return ap


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainlib import cli  # noqa: E402

cli.answer_help(parser().parse_args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402

import bc_data  # noqa: E402
import policy  # noqa: E402
import logprobs  # noqa: E402
import train_bc  # noqa: E402  (its pieces, the split this bench times)


def step(model, batch: list, n: int, pad_id: int) -> tuple[float, int, int]:
    """Forward and backward of one micro-batch in ``n`` pieces (train_bc.pieces of ceil(len / n) samples; n = 1:
    one padded batch); seconds, tokens computed, tokens real."""
    model.zero_grad(set_to_none=True)
    total = sum(sum(m) for _, m in batch)
    computed = real = 0
    t0 = time.perf_counter()
    for piece in train_bc.pieces(batch, -(-len(batch) // n) if n > 1 else 0):
        ids, attn, mask = logprobs.pad_batch(*zip(*piece), pad_id=pad_id)
        logp, _, _ = logprobs.action_logprobs(model, ids, attn, mask)
        (-(logp[:, 1:] * mask[:, 1:]).sum() / total).backward()
        computed += ids.numel()
        real += int(attn.sum())
    return time.perf_counter() - t0, computed, real


def main() -> None:
    args = parser().parse_args()
    torch.manual_seed(0)
    model, tok = policy.load(args.model, device="cpu", dtype=torch.float32)
    names: list[str] = []
    records = bc_data.load_records(args.data, names)
    steps = bc_data.records_to_steps(records, args.prompt, "verbatim", names, only_successes=False)
    samples = [bc_data.render_step(tok, st) for st in steps]
    rng = random.Random(0)
    splits = [int(x) for x in args.splits.split(",")]
    secs = {n: 0.0 for n in splits}
    toks = {n: [0, 0] for n in splits}
    grad_diff = dict.fromkeys(splits, 0.0)
    step(model, rng.sample(samples, args.micro_batch), 1, tok.pad_token_id)          # warm-up
    for k in range(args.steps):
        batch = rng.sample(samples, args.micro_batch)
        order = splits if k % 2 == 0 else splits[::-1]
        grads = {}
        for n in order:
            s, computed, real = step(model, batch, n, tok.pad_token_id)
            secs[n] += s
            toks[n][0] += computed
            toks[n][1] += real
            grads[n] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        for n in splits:
            ref = grads[splits[0]]
            grad_diff[n] = max(grad_diff[n], float((grads[n] - ref).abs().max() / ref.abs().max()))
    print(f"{len(samples)} samples of {args.data}, {args.steps} micro-batches of {args.micro_batch}, "
          f"{torch.get_num_threads()} torch threads")
    print(f"| pieces | s a step | vs {splits[0]} | padding share | max grad diff (relative) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in splits:
        pad = 1 - toks[n][1] / toks[n][0]
        print(f"| {n} | {secs[n] / args.steps:.2f} | x{secs[splits[0]] / secs[n]:.2f} | {pad:.0%} | {grad_diff[n]:.1e} |")


if __name__ == "__main__":
    main()
