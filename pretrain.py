"""Pretrain a tiny base model on synthetic web pages (synthweb.py): generic "find what the instruction names
and act on it" skills that a real base model brings and a randomly initialized tiny model lacks.

    python pretrain.py --model tiny:layers=4,hidden=192 --out runs/base --easy-frac 1 --steps 5087 --batch 256
    (scripts/pretrain_base.sh runs both stages of the committed base)

Rows are rendered exactly as the agent sees a step (compress.build_messages with the short prompt, the
tokenizer's chat template); the loss is on the response tokens plus ``--dense`` times the other tokens (plain
next-token prediction on the page, which practises the copying the response needs). Rows are generated on
the fly in ``--workers`` processes, so no data set is stored. Every ``--probe-every`` steps it prints
teacher-forced accuracies on held-out synthetic rows (``exact``: every response token right, i.e. what greedy
decoding would output; ``eid``: the element id) and, with ``--probe-demos``, the same on demonstration steps
of real tasks (evaluation only: those rows are never trained on).
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import dataclass

import compress
from trainlib import cli


@dataclass
class Args:
    """Pretrain a tiny base model on synthetic web pages (synthweb.py)."""
    out: str
    """run directory: args.json, hf/ (the model, saved every --save-every steps and at the end)"""
    model: str = "tiny:layers=4,hidden=192,split=words"
    """tiny spec or checkpoint dir"""
    steps: int = 6000
    """optimizer steps"""
    time_budget: float = 0.0
    """stop after this many seconds (0: no limit)"""
    batch: int = 64
    """rows per step"""
    lr: float = 1e-3
    """peak learning rate (cosine after the warm-up)"""
    warmup: int = 200
    """linear warm-up steps"""
    dense: float = 0.25
    """loss weight of the non-response tokens"""
    mix: str = "click=0.6,type=0.2,select=0.2"
    """share of each kind of synthetic row"""
    easy_frac: float = 0.0
    """share of easy rows: short click pages without system prompt (a curriculum's start)"""
    workers: int = 4
    """processes generating rows"""
    probe_every: int = 500
    """steps between probes"""
    probe_n: int = 256
    """held-out rows per probe"""
    probe_demos: str = ""
    """demos.py JSONL to probe on (never trained on; empty: none)"""
    save_every: int = 2000
    """steps between saves"""
    seed: int = 0
    """rows and initialisation"""
    device: str = ""
    """cuda or cpu (empty: cuda when available)"""
    threads: int = 0
    """torch threads (0: torch's default)"""


cli.answer_help(Args, __name__)   # before the imports of torch and the model stack: --help at once

import torch  # noqa: E402

import logprobs  # noqa: E402
import policy  # noqa: E402
import synthweb  # noqa: E402


def render_row(tok, intent: str, history: list[str], obs: str, response: str, prompt: str = "short"):
    turns = [compress.Turn(obs="", response=h) for h in history]
    messages = compress.build_messages(intent, turns, obs, None, prompt=prompt)
    return compress.render_sample(tok, messages + [{"role": "assistant", "content": response}])


class Rows(torch.utils.data.IterableDataset):
    """An endless stream of rendered synthetic rows; each worker draws from its own seeded RNG."""

    def __init__(self, tok, seed: int, mix: dict[str, float], easy_frac: float = 0.0):
        self.tok, self.seed, self.mix, self.easy_frac = tok, seed, mix, easy_frac

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        rng = random.Random(self.seed * 1000 + (info.id if info else 0))
        labels = synthweb.Labels(list(self.tok.get_vocab()))
        while True:
            easy = rng.random() < self.easy_frac
            _, intent, history, obs, resp = synthweb.record(rng, labels, self.mix, easy=easy)
            yield render_row(self.tok, intent, history, obs, resp, prompt=None if easy else "short")


def collate(rows, pad: int):
    """(ids, mask) rows -> input_ids, attention_mask, loss_mask."""
    return logprobs.pad_batch([ids for ids, _ in rows], [mask for _, mask in rows], pad)


def probe_rows(tok, seed: int, n: int, mix: dict[str, float], easy: bool = False):
    rng = random.Random(seed)
    labels = synthweb.Labels(list(tok.get_vocab()))
    out = []
    for _ in range(n):
        skill, intent, history, obs, resp = synthweb.record(rng, labels, mix, easy=easy)
        out.append((skill + ("-easy" if easy else ""),
                    *render_row(tok, intent, history, obs, resp, prompt=None if easy else "short")))
    return out


def demo_rows(tok, path: str, n: int):
    """Demonstration steps of real tasks (demos.py JSONL), rendered as train_bc renders them."""
    out = []
    with open(path) as f:
        for line in f:
            demo = json.loads(line)
            turns = []
            for step in demo["steps"]:
                messages = compress.build_messages(demo["intent"], turns, step["observation"], step.get("error"),
                                                   prompt="short")
                ids, mask = compress.render_sample(tok, messages + [{"role": "assistant",
                                                                      "content": step["response"]}])
                out.append((demo["task"].split("/")[-1], ids, mask))
                turns.append(compress.Turn(obs=step["observation"], response=step["response"],
                                           error=step.get("error")))
    random.Random(0).shuffle(out)
    return out[:n]


@torch.no_grad()
def probe(model, tok, rows, device, batch: int = 64) -> dict[str, dict[str, float]]:
    """Per group: share of rows whose response tokens are all argmax-right (``exact``), and of element-id
    digits right (``eid``), teacher-forced."""
    model.eval()
    digit = {i for t, i in tok.get_vocab().items() if t.replace("\u0120", "").isdigit()}
    stats: dict[str, list[int]] = {}
    for s in range(0, len(rows), batch):
        chunk = rows[s:s + batch]
        ids, att, mask = collate([(i, m) for _, i, m in chunk], tok.pad_token_id or 0)
        ids, att = ids.to(device), att.to(device)
        pred = model(input_ids=ids, attention_mask=att).logits[:, :-1].argmax(-1).cpu()
        tgt = ids[:, 1:].cpu()
        m = mask[:, 1:] > 0
        for k, (group, _, _) in enumerate(chunk):
            ok = (pred[k] == tgt[k]) | ~m[k]
            # the element id: the digit tokens right after the response's last "element" token
            resp = [j for j in range(len(tgt[k])) if m[k][j]]
            marks = [j for j in resp if "element" in tok.decode([int(tgt[k][j])])]
            pos = []
            if marks:
                j = marks[-1] + 1
                while j < len(tgt[k]) and not any(c.isdigit() for c in tok.decode([int(tgt[k][j])])):
                    j += 1
                while j < len(tgt[k]) and int(tgt[k][j]) in digit:
                    pos.append(j)
                    j += 1
            eid_ok = all(bool(ok[j]) for j in pos)
            st = stats.setdefault(group, [0, 0, 0])
            st[0] += bool(ok.all())
            st[1] += eid_ok
            st[2] += 1
    model.train()
    return {g: {"exact": round(a / n, 3), "eid": round(b / n, 3), "n": n} for g, (a, b, n) in sorted(stats.items())}


def main(argv: list[str] | None = None):
    args = cli.parse_args(Args, argv)
    mix = {k: float(v) for k, v in (item.split("=") for item in args.mix.split(","))}

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, tok = policy.load(args.model, device=device, dtype=torch.float32)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "args.json"), "w") as f:
        json.dump(cli.args_dict(args), f, indent=1)
    probes = probe_rows(tok, 10_000 + args.seed, args.probe_n, mix) + probe_rows(
        tok, 20_000 + args.seed, args.probe_n, {"click": 1.0}, easy=True)
    if args.probe_demos:
        probes += demo_rows(tok, args.probe_demos, args.probe_n * 2)
    loader = torch.utils.data.DataLoader(Rows(tok, args.seed, mix, args.easy_frac), batch_size=args.batch,
                                         num_workers=args.workers, prefetch_factor=8 if args.workers else None,
                                         collate_fn=lambda rows: collate(rows, tok.pad_token_id or 0))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01)
    log = open(os.path.join(args.out, "metrics.jsonl"), "a")
    t0, step = time.time(), 0

    def save(path):  # written beside, then renamed: a crash never leaves a half-written model
        tmp = path + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if os.path.isdir(path):
            os.rename(path, path + ".old")
        os.rename(tmp, path)
        if os.path.isdir(path + ".old"):
            shutil.rmtree(path + ".old")

    for ids, att, mask in loader:
        step += 1
        frac = min(1.0, (time.time() - t0) / args.time_budget) if args.time_budget else step / args.steps
        lr = args.lr * min(1.0, step / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, att, mask = ids.to(device), att.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        tgt = ids[:, 1:]
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tgt.reshape(-1),
                                                reduction="none").view(tgt.shape)
        resp = mask[:, 1:] * att[:, 1:]
        w = resp + args.dense * (att[:, 1:] - resp)
        loss = (nll * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step >= args.steps or (args.time_budget and time.time() - t0 >= args.time_budget)
        if step % args.probe_every == 0 or step == 1 or done:
            rec = {"step": step, "s": round(time.time() - t0), "loss": round(loss.item(), 4), "lr": round(lr, 6),
                   "probe": probe(model, tok, probes, device)}
            print(json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if step % args.save_every == 0 or done:
            save(os.path.join(args.out, "hf"))
        if done:
            break
    print("saved", os.path.join(args.out, "hf"), flush=True)


if __name__ == "__main__":
    main()
