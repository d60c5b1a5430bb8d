"""Behavior cloning warm-up (WebAgent-R1, Sec. 2.2, Eq. 1): L_BC = -E_{(h_t, a_t) ~ D} log pi(a_t | h_t).

Every step of every demonstration becomes one sample (h_t, a_t): the history h_t is rendered by
compress.py with dynamic context compression (earlier observations replaced by the placeholder), and
the loss covers the action's tokens only (its <think> part included, as in Eq. 1; ``--no-think-in-loss``
drops it as the reference code does).

Data: our demos.py JSONL (one trajectory per line: ``{"task", "seed", "intent", "reward",
"steps": [{"observation", "error", "response", "url"}]}``) and the WebRL / VisualAgentBench BC data
(LLaMA-Factory sharegpt: ``{"conversations": [{"from": "human", "value": <full prompt>}, {"from": "gpt",
"value": <action>}]}``, one step per record, JSON list or JSONL). WebRL's human turns carry the earlier rounds
with Llama-3 control tokens written inline; they are rendered as WebRL's LLaMA-Factory template rendered them
(``--webrl-render``, see ``bc_data.render_llama3_web``). Reading and rendering both formats is bc_data.py.

R1-CoT (Sec. 3.4, Appendix C): ``--cot-teacher-url`` rewrites each demonstration's thought into a
first-person long chain of thought by asking a teacher model behind an OpenAI-compatible endpoint;
answers are cached on disk (``--cot-cache``) so a rerun asks nothing twice; the action is never changed,
and a failed request keeps the original thought (counted in ``cot/failures``).

Departures from the paper: the loss is the mean over the action tokens of a micro-batch (as
LLaMA-Factory does) rather than a per-sample sum; paper defaults (lr 5e-5, cosine with 5% warmup,
effective batch 128) assume a pretrained model -- the tiny demo model trains from scratch with a
larger learning rate (see the Makefile's demo target).

Run:
    python train_bc.py --model tiny --data data/demos.jsonl --out ckpt/bc            # one process
    deepspeed --num_gpus 8 train_bc.py --model Qwen/Qwen2.5-3B-Instruct --data ... \\
        --ds-config configs/zero3.json --grad-checkpointing
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import bc_data
import compress
from trainlib import cli

log = logging.getLogger("webagent.bc")


@dataclass
class Args:
    """Behavior cloning (Eq. 1) under DeepSpeed."""
    model: str = "tiny"
    """HF checkpoint path, or "tiny" to build a small Qwen2-architecture model offline"""
    chat_template: str = ""
    """Jinja chat-template file replacing the model's own (a base model has none); saved with the checkpoint"""
    data: str = "data/demos.jsonl"
    """comma-separated files: demos.py JSONL and/or WebRL/VAB sharegpt JSON(L)"""
    out: str = "ckpt/bc"
    """run directory: checkpoints (step_N/, latest), hf/ (final model), metrics.jsonl, tb/, loss.png"""
    ds_config: str = ""
    """DeepSpeed config; default configs/zero3.json on GPU, configs/zero0.json on CPU"""
    lr: float = 5e-5
    """peak learning rate (paper: 5e-5)"""
    batch_size: int = 128
    """effective batch in samples = micro_batch x grad_accum x world size (paper: 128)"""
    micro_batch: int = 4
    """samples per process whose action tokens one loss averages over (Eq. 1's mean, one gradient)"""
    forward_batch: int = 0
    """samples per forward/backward pass within a micro-batch, sorted by length first (0: the whole micro-batch,
    right-padded); the gradient is the micro-batch's either way. On a CPU 1 is fastest: no padding, no mask
    (x2.2 on make demo's BC: bench/bench_bc.py)"""
    epochs: float = 3.0
    """passes over the data (fractional allowed); ignored when max_steps > 0"""
    max_steps: int = 0
    """optimizer steps; 0 = derived from epochs"""
    warmup_frac: float = 0.05
    """fraction of steps with linear warmup before the cosine decay (paper: 5%)"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    grad_clip: float = 1.0
    """gradient norm clipping"""
    max_len: int = 16384
    """samples longer than this many tokens are dropped (counted)"""
    prompt: compress.PromptKind = "thinking"
    """system prompt: thinking | plain | short | short_plain (compress.system_prompt)"""
    think_in_loss: bool = True
    """include the <think> part of each response in the loss (Eq. 1); --no-think-in-loss as the reference code"""
    grad_checkpointing: bool = False
    """trade compute for memory (gradient checkpointing)"""
    seed: int = 0
    """data order and init seed"""
    torch_threads: int = 0
    """CPU only: torch threads (0 = torch's default)"""
    save_every: int = 0
    """checkpoint every N optimizer steps (0: only at the end)"""
    resume: bool = False
    """continue from <out>/latest"""
    cot_teacher_url: str = ""
    """R1-CoT: OpenAI-compatible base URL of the teacher (empty: off)"""
    cot_teacher_model: str = "QwQ-32B"
    """R1-CoT: teacher model name sent to the endpoint"""
    cot_cache: str = "data/cot_cache.jsonl"
    """R1-CoT: on-disk cache of teacher answers (one JSON line per request hash)"""
    cot_concurrency: int = 8
    """R1-CoT: concurrent teacher requests"""
    cot_max_tokens: int = 2048
    """R1-CoT: max tokens of one teacher answer"""
    cot_retries: int = 3
    """R1-CoT: retries of a failed teacher request (timeouts, 5xx, malformed replies)"""
    cot_timeout: float = 300.0
    """R1-CoT: seconds before a teacher request times out"""
    webrl_render: bc_data.WebRLRender = "verbatim"
    """sharegpt records whose human turn writes Llama-3 chat-template tokens inline (WebRL's BC data): verbatim =
    token for token as WebRL trained (LLaMA-Factory llama3_web; needs a Llama-3 tokenizer); split = rebuilt into
    user/assistant messages and rendered through the model's chat template (any model, not WebRL's tokens)"""
    only_successes: bool = True
    """clone only the trajectories of --data that succeeded (reward > 0); --no-only-successes clones every one, as
    an unfiltered log would be (demos.py --mistakes writes failed ones)"""


cli.answer_help(Args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402

import logprobs  # noqa: E402
import policy  # noqa: E402
from trainlib import checkpoints, distributed, optim, runlog  # noqa: E402


# ---- data ----

Sample = tuple[list[int], list[int]]          # (input ids, loss mask): one step of a demonstration


def read_demonstrations(args: Args) -> tuple[list[dict], list[str], dict[str, int]]:
    """The records of ``--data`` with each one's name (its file and line, for errors), their thoughts rewritten by
    the R1-CoT teacher when ``--cot-teacher-url`` is given (and its counts, else {}). A bad file exits naming
    what is wrong."""
    names: list[str] = []
    try:
        records = bc_data.load_records(args.data, names)
    except ValueError as e:
        raise SystemExit(f"--data: {e}") from None
    if not args.cot_teacher_url:
        return records, names, {}
    teacher = policy.OpenAIBackend(args.cot_teacher_url, args.cot_teacher_model, max_new_tokens=args.cot_max_tokens,
                                   max_retries=args.cot_retries, timeout_s=args.cot_timeout, temperature=0.6)
    counts = asyncio.run(bc_data.rewrite_with_cot(records, teacher, args.cot_cache, args.cot_concurrency))
    log.info("R1-CoT rewrite: %s", counts)
    return records, names, counts


def tokenize(records: list[dict], names: list[str], tokenizer, args: Args, rank: int) -> tuple[list[Sample], int]:
    """One sample per step of every demonstration, and how many were dropped as longer than ``--max-len``."""
    return bc_data.tokenized(records, names, tokenizer, args.prompt, webrl_render=args.webrl_render,
                             think_in_loss=args.think_in_loss, only_successes=args.only_successes,
                             max_len=args.max_len, verbose=rank == 0)


# ---- training ----

def pieces(batch: list[Sample], size: int) -> list[list[Sample]]:
    """``batch`` sorted by length and cut into runs of ``size`` samples (0: the batch as it is, one piece)."""
    if size <= 0 or size >= len(batch):
        return [batch]
    order = sorted(batch, key=lambda s: len(s[0]))
    return [order[i:i + size] for i in range(0, len(order), size)]


def bc_step(engine, batches: list[list[Sample]], pad_id: int, forward_batch: int = 0) -> dict[str, float]:
    """One optimizer step of Eq. 1 over ``batches`` (the step's micro-batches): the negative log-likelihood of the
    action tokens only, averaged over a micro-batch's action tokens (scored only there: no full-vocabulary logits
    for the prompt tokens), the micro-batches' losses averaged. Each micro-batch runs in ``pieces`` of
    ``forward_batch`` samples whose summed log-likelihoods, divided by the micro-batch's action tokens, add up to
    its loss (and their gradients to its gradient)."""
    loss_sum = acc_sum = tok_sum = 0.0
    gn = -1.0
    for k, batch in enumerate(batches):
        tokens = max(sum(sum(mask[1:]) for _, mask in batch), 1)     # the micro-batch's action tokens (shifted)
        parts = pieces(batch, forward_batch)
        for j, piece in enumerate(parts):
            nll, hits, m = logprobs.demonstration_nll(engine, piece, pad_id, engine.device)
            loss = nll / tokens
            last = k == len(batches) - 1 and j == len(parts) - 1
            gn = optim.accumulate(engine, loss / len(batches), boundary=last)   # the mean over micro-batches
            with torch.no_grad():
                acc_sum += float(hits.sum())
                tok_sum += float(m.sum())
                loss_sum += float(loss)
    return {"train/loss": loss_sum / len(batches), "train/action_token_acc": acc_sum / max(tok_sum, 1),
            "train/lr": engine.get_lr()[0], "train/grad_norm": optim.last_grad_norm(engine, gn)}


def main(args: Args) -> Path:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    rank, _, world = distributed.init_distributed()
    optim.set_cpu_threads(args.torch_threads)
    device, dtype = policy.decide_device()
    args.ds_config = optim.checked_ds_config(args.ds_config, device)
    grad_accum = max(1, args.batch_size // (args.micro_batch * world))
    effective_batch = args.micro_batch * grad_accum * world
    out = Path(args.out)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        log.info("args %s", json.dumps(vars(args)))
        log.info("effective batch %d = micro %d x accum %d x world %d",
                 effective_batch, args.micro_batch, grad_accum, world)
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    records, names, cot_counts = read_demonstrations(args)
    model, tokenizer = policy.load(args.model, device=device, dtype=dtype, chat_template=args.chat_template or None)
    samples, dropped = tokenize(records, names, tokenizer, args, rank)
    total_steps = args.max_steps or max(1, math.ceil(args.epochs * math.ceil(len(samples) / effective_batch)))
    if rank == 0:
        log.info("%d samples (%d dropped as too long), %d optimizer steps", len(samples), dropped, total_steps)
        learned = sorted(sum(mask) for _, mask in samples)    # its response (its answer with --no-think-in-loss)
        log.info("responses %d tokens at the median, %d at the longest: a policy cloned from them needs that many "
                 "new tokens a turn (--max-new-tokens of eval.py and train_mgrpo.py), or its answers are cut",
                 learned[len(learned) // 2], learned[-1])

    if args.grad_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    cfg = optim.ds_config(args.ds_config, micro_batch=args.micro_batch, grad_accum=grad_accum,
                          world_size=world, bf16=dtype == torch.bfloat16, grad_clip=args.grad_clip)
    engine = optim.make_engine(model, cfg, lr=args.lr, weight_decay=args.weight_decay,
                               schedule=optim.cosine_with_warmup(total_steps, args.warmup_frac))
    step, cursor = 0, 0   # optimizer steps done; micro-batches consumed (this rank)
    if args.resume and (ckpt := checkpoints.latest_checkpoint(out)):
        state = checkpoints.load_checkpoint(engine, ckpt, rank)
        step, cursor = state["step"], state["cursor"]
        log.info("resumed from %s at step %d", ckpt, step)
    metrics = runlog.Metrics(out, enabled=rank == 0, start_step=step)
    if cot_counts:
        metrics.log(0, {k: float(v) for k, v in cot_counts.items()})
    stop = {"flag": False}
    signal.signal(signal.SIGINT, lambda *_: stop.update(flag=True))   # Ctrl-C: save, then exit

    from tqdm import tqdm
    bar = tqdm(total=total_steps, initial=step, desc="bc", disable=rank != 0, dynamic_ncols=True)
    engine.train()
    t0 = time.time()
    while step < total_steps and not stop["flag"]:
        batches = [bc_data.draw(samples, cursor + i, args.micro_batch, world, rank, args.seed)
                   for i in range(grad_accum)]
        cursor += grad_accum
        stats = bc_step(engine, batches, tokenizer.pad_token_id, args.forward_batch)
        step += 1
        bar.update(1)
        metrics.log(step, {**stats, "train/samples_per_s": step * effective_batch / (time.time() - t0)})
        bar.set_postfix(loss=f"{stats['train/loss']:.3f}", acc=f"{stats['train/action_token_acc']:.2f}")
        if args.save_every and step % args.save_every == 0 and step < total_steps:
            checkpoints.save_checkpoint(engine, tokenizer, out, step, {"cursor": cursor}, rank)
    bar.close()

    ckpt = checkpoints.save_checkpoint(engine, tokenizer, out, step, {"cursor": cursor}, rank)
    final = checkpoints.publish_hf(ckpt, out, rank)
    if rank == 0:
        metrics.close()
        runlog.plot_metrics(out / "metrics.jsonl", [("train/loss", "loss (Eq. 1)"),
                            ("train/action_token_acc", "action-token accuracy"), ("train/lr", "learning rate")],
                            out / "loss.png", title=f"BC: {args.model}")
        log.info("saved %s%s", final, " (interrupted)" if stop["flag"] else "")
    torch.distributed.barrier()
    return final


if __name__ == "__main__":
    main(cli.parse_args(Args))
