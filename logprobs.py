"""log pi(a | h): the log-probs of the action tokens under a model, as the update scores them (Eq. 2's pi_theta,
pi_old and pi_ref), at the rollouts' temperature.

Read in this order:
- the definition, the reader's path (``train_mgrpo.update(how="plain")``): ``plain_logprobs``, each sample one
  right-padded row scored by ``token_logprobs``: the logits of every position divided by the temperature,
  log-softmax, the taken token's entry;
- ``micro_batches``: the samples in micro-batches, and what several ranks add (a reader of one process can skip it);
- the update's default, ``packed_logprobs``, a swap held equal to the definition in values and gradients
  (tests/test_mgrpo_loss.py): a context computed once for every action taken from it (``context_batches`` puts
  them in one micro-batch, ``merge_identical`` scores an action taken several times once), and the action tokens
  scored alone, without the full vocabulary's logits for every position (``action_logprobs``: ``_scored``,
  ``_TargetLogprobs``); ``forward_logprobs``, a row per sample scored so, sits between the two.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any

import torch

from trainlib import distributed


# ---- the definition: a row per sample, every position scored ----

def plain_logprobs(model, samples: typing.Sequence[Any], pad_id: int, device,
                   temperature: float = 1.0) -> tuple[torch.Tensor, ...]:
    """Log-probs and entropies of the samples' action tokens (rollout.Sample: ``ids``, ``mask``) under ``model`` at
    ``temperature``, the textbook way: the samples right-padded into one batch, every position scored
    (``token_logprobs``), the action tokens kept. Returns log-probs, entropies and the mask, [N, L] each (0 off
    the mask)."""
    ids, attn, mask = pad_batch([s.ids for s in samples], [s.mask for s in samples], pad_id)   # [N, L] each
    ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
    logp, ent = token_logprobs(model, ids, attn, temperature)                                  # [N, L] each
    return logp * mask, ent * mask, mask


def pad_batch(seqs: list[list[int]], masks: list[list[int]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-pad token lists: returns input_ids, attention_mask, loss_mask, all [B, L]."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), L), dtype=torch.long)
    loss = torch.zeros((len(seqs), L), dtype=torch.float32)
    for i, (s, m) in enumerate(zip(seqs, masks)):
        ids[i, :len(s)] = torch.tensor(s)
        attn[i, :len(s)] = 1
        loss[i, :len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, attn, loss


def token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of each token given its prefix, and the entropy of each position's distribution, from the
    full-vocabulary logits of every position at ``temperature`` (the distribution the rollouts sampled from:
    softmax(logits / T)): the plain definition, which ``action_logprobs`` is held equal to.

    input_ids, attention_mask: [B, L] (right-padded). Returns logp [B, L] and entropy [B, L], where
    position t scores input_ids[:, t] (position 0 gets 0: it has no prefix).
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits  # [B, L, V]
    logits = logits[:, :-1].float() / temperature                     # [B, L-1, V] position t predicts token t+1
    logp_all = torch.log_softmax(logits, dim=-1)                      # [B, L-1, V]
    logp = logp_all.gather(-1, input_ids[:, 1:, None]).squeeze(-1)    # [B, L-1] the tokens taken
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)                # [B, L-1]
    pad = logp.new_zeros(logp.shape[0], 1)
    return torch.cat([pad, logp], 1), torch.cat([pad, entropy], 1)    # [B, L], [B, L]


# ---- micro-batches: what several ranks add ----

@dataclasses.dataclass
class MicroBatch:
    """Samples scored and stepped together: their advantages A_i and Eq. 2 weights (times the world size)."""
    samples: list                # rollout.Sample: ids, mask, the engine's logprobs
    adv: torch.Tensor            # [n]
    weight: torch.Tensor         # [n]

    def __len__(self) -> int:    # its samples, a filler not counted
        return sum(not isinstance(s, _Filler) for s in self.samples)


@dataclasses.dataclass
class _Filler:
    """A micro-batch a rank adds when it has fewer than another: two pad tokens, no action token, weight 0."""
    ids: list[int]
    mask: list[int]
    logprobs: list[float]


def micro_batches(samples: list, adv: list[float], weight: list[float], size: int, pad_id: int, *,
                  merge: bool = True, same_advantage: bool = False) -> list[MicroBatch]:
    """This rank's samples in micro-batches of at most ``size``: with ``merge``, identical samples scored once
    (``merge_identical``; ``same_advantage`` when the batch is used more than once) and a context's samples
    together (``context_batches``); else in rollout order. Several ranks: every rank runs the same number of
    micro-batches (under ZeRO-3 each forward gathers the parameters collectively), a rank with fewer adding
    fillers of weight 0, and the weights are multiplied by the world size (DeepSpeed averages the ranks'
    gradients; Eq. 2 adds them)."""
    if merge:
        samples, adv, weight = merge_identical(samples, adv, weight, same_advantage=same_advantage)
        index = context_batches(samples, size)
    else:
        index = [list(range(i, min(i + size, len(samples)))) for i in range(0, len(samples), size)]
    index += [[]] * (distributed.all_reduce_max(len(index)) - len(index))
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    filler = _Filler([pad_id, pad_id], [0, 0], [])
    return [MicroBatch([samples[i] for i in idx] or [filler], torch.tensor([adv[i] for i in idx] or [0.0]),
                       torch.tensor([weight[i] for i in idx] or [0.0]) * world) for idx in index]


# ---- the update's default: a context computed once for its actions (a swap) ----

def merge_identical(samples: list, adv: list[float], weight: list[float],
                    same_advantage: bool = False) -> tuple[list, list[float], list[float]]:
    """One loss term for the samples with the same ids and mask (the same action in the same context: G
    trajectories of a group often take the same first action on their shared start page). Eq. 2's loss is a sum
    of w_n f(log-probs_n, A_n); equal ids give equal log-probs, so the terms merge exactly into one sample of
    weight sum(w) and advantage sum(w A) / sum(w) when the ratio is 1 (one update per batch: the clipped
    surrogate's gradient is then A grad ratio whatever the sign of A), or, with ``same_advantage``, only samples
    whose advantages are equal too (any ratio). Returns (samples, advantages, weights)."""
    merged: dict[tuple, list] = {}   # key -> [the first such sample, sum of w, sum of w A]
    for s, a, w in zip(samples, adv, weight):
        m = merged.setdefault((tuple(s.ids), tuple(s.mask)) + ((a,) if same_advantage else ()), [s, 0.0, 0.0])
        m[1] += w
        m[2] += w * a
    rows = list(merged.values())
    return [r[0] for r in rows], [r[2] / r[1] if r[1] else 0.0 for r in rows], [r[1] for r in rows]


def action_start(sample) -> int:
    """Index of a sample's first action token: its ids before it are the context (a filler without action
    tokens: its last token)."""
    return sample.mask.index(1) if 1 in sample.mask else len(sample.ids) - 1


def context_of(sample) -> tuple[int, ...]:
    """A sample's context: its ids before ``action_start``."""
    return tuple(sample.ids[:action_start(sample)])


def context_batches(samples: typing.Sequence[Any], size: int) -> list[list[int]]:
    """Micro-batches of at most ``size`` sample indices, the samples of one context (``action_start``) together,
    so that ``packed_logprobs`` computes it once for them (a context's samples split only when more than
    ``size``): the contexts of one sample first, then the shared ones (so that most micro-batches need no mask
    of their own), each in order of length (so that a micro-batch's rows are alike)."""
    by_context: dict[tuple, list[int]] = {}
    for i, s in enumerate(samples):
        by_context.setdefault(context_of(s), []).append(i)
    batches, current = [], []
    for _, members in sorted(by_context.items(), key=lambda kv: (len(kv[1]) > 1, len(kv[0]))):
        for k in range(0, len(members), size):
            if len(current) + len(members[k:k + size]) > size:
                batches.append(current)
                current = []
            current += members[k:k + size]
    return batches + [current] * bool(current)


def shares_contexts(model) -> bool:
    """Whether ``packed_logprobs`` can put several actions after one context: its attention takes a 4D mask
    (PyTorch SDPA, eager), which FlashAttention-2 does not."""
    return getattr(model, "module", model).config._attn_implementation in ("sdpa", "eager")


def packed_logprobs(model, samples: typing.Sequence[Any], pad_id: int, device, temperature: float = 1.0,
                    chunk_tokens: int = 512) -> tuple[torch.Tensor, ...]:
    """``forward_logprobs`` with each context computed once. The samples (rollout.Sample) with the same context
    (``action_start``: the G trajectories of a group on their common start page, and any that reached the same
    page the same way) share one row: the context, then each of their actions, an action attending to the
    context and to its own earlier tokens only (a 4D mask), its positions continuing the context's. The same
    log-probs as one row per sample to float rounding, with the context's tokens computed once instead of once
    per action (the context is most of a sample: the prompt). Returns log-probs, entropies and the mask, each
    [N, A] on the actions' tokens (column t: the t-th token from ``action_start``; A the longest action).
    Where the attention takes no 4D mask (``shares_contexts``) every sample is a row of its own."""
    share = shares_contexts(model)
    starts = [action_start(s) for s in samples]
    groups: dict[tuple, list[int]] = {}
    for n, (s, a) in enumerate(zip(samples, starts)):
        groups.setdefault(tuple(s.ids[:a]) if share else (n,), []).append(n)
    row_ids, row_pos, row_seg = [], [], []              # per row: ids, positions, segment (0 the context, j action j)
    at = []       # per action token: (row, column of the position predicting it, the token, sample, index in action)
    for r, members in enumerate(groups.values()):
        a = starts[members[0]]
        ids, pos, seg = list(samples[members[0]].ids[:a]), list(range(a)), [0] * a
        for j, n in enumerate(members, 1):   # token t of action j: predicted by the context's last position (t =
            s, first = samples[n], len(ids)  # 0) or by the action's token t - 1
            at += [(r, first + t - 1 if t else a - 1, s.ids[a + t], n, t) for t in range(len(s.ids) - a)
                   if s.mask[a + t]]
            ids, pos, seg = ids + s.ids[a:], pos + list(range(a, len(s.ids))), seg + [j] * (len(s.ids) - a)
        row_ids.append(torch.tensor(ids))
        row_pos.append(torch.tensor(pos))
        row_seg.append(torch.tensor(seg))
    pad = torch.nn.utils.rnn.pad_sequence
    ids_t, seg_t = pad(row_ids, batch_first=True, padding_value=pad_id), pad(row_seg, True, -1)   # [R, L]; -1: pad
    if max(map(len, groups.values())) > 1:
        # the query at q sees the key at k <= q of the context or of its own action; padding sees itself only
        q, k, L = seg_t[:, :, None], seg_t[:, None, :], seg_t.shape[1]              # [R, L, 1], [R, 1, L]
        attn = (torch.ones(L, L, dtype=torch.bool).tril() & (k >= 0) & ((k == 0) | (k == q))) | torch.eye(L).bool()
        inputs = {"input_ids": ids_t, "attention_mask": attn[:, None], "position_ids": pad(row_pos, True)}
    else:   # a row per sample: the causal mask and the padding's, as forward_logprobs
        inputs = {"input_ids": ids_t, "attention_mask": (seg_t >= 0).long()}
    rows, cols, targets, sample_at, token_at = torch.tensor(at, dtype=torch.long, device=device).reshape(-1, 5).T
    shape = (len(samples), max(len(s.ids) - a for s, a in zip(samples, starts)))   # [N, A]
    logp, ent, _ = _scored(model, {key: v.to(device) for key, v in inputs.items()}, rows, cols, targets,
                           (sample_at, token_at), shape, temperature, chunk_tokens)
    mask = torch.zeros(shape, dtype=torch.float32, device=device)
    mask[sample_at, token_at] = 1.0
    return logp, ent, mask


# ---- scoring the action tokens alone (a swap) ----

def forward_logprobs(model, samples: typing.Sequence[Any], pad_id: int, device,
                     temperature: float = 1.0) -> tuple[torch.Tensor, ...]:
    """``plain_logprobs``'s numbers (to float rounding, tested), the action tokens scored alone
    (``action_logprobs``): log-probs and entropies [N, L] each (0 off the mask), + mask [N, L]."""
    ids, attn, mask = pad_batch([s.ids for s in samples], [s.mask for s in samples], pad_id)
    ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
    logp, ent, _ = action_logprobs(model, ids, attn, mask, temperature=temperature)
    return logp, ent, mask


def demonstration_nll(model, piece: typing.Sequence[tuple[list[int], list[int]]], pad_id: int,
                      device) -> tuple[torch.Tensor, ...]:
    """Eq. 1 on demonstration steps ``piece`` ((input ids, loss mask) pairs, one padded batch): the summed negative
    log-likelihood of their action tokens [], and the top-1 hits and the mask of those tokens [b, L-1] (shifted:
    position t predicts token t + 1). BC's step (train_bc.py) and M-GRPO's ``--demo-data`` term divide the sum."""
    ids, attn, loss_mask = (t.to(device) for t in pad_batch(*zip(*piece), pad_id=pad_id))
    logp, _, top1 = action_logprobs(model, ids, attn, loss_mask)            # [b, L] each
    m = loss_mask[:, 1:]                                                    # [b, L-1]
    return -(logp[:, 1:] * m).sum(), top1[:, 1:] * m, m


def action_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor,
                    temperature: float = 1.0, chunk_tokens: int = 512) -> tuple[torch.Tensor, ...]:
    """``token_logprobs`` where the loss needs it: log-probs, entropies and top-1 hits (1.0 where the token is
    the model's argmax), each [B, L], on the positions with ``loss_mask`` = 1 (the action tokens), 0 elsewhere,
    without full-vocabulary logits for the sequence (``_scored``). Used by BC (Eq. 1) and, through
    ``forward_logprobs``, by checks against the trainer. With Qwen2.5's vocabulary (151,936) the full version
    holds ~0.6 MB per token per fp32 copy, several copies for every prompt token; this one the action tokens'
    logits and their gradient in the model's dtype. Equal to ``token_logprobs`` on the action tokens to float
    rounding."""
    rows, cols = loss_mask[:, 1:].nonzero(as_tuple=True)               # action token (row, col + 1) ...
    return _scored(model, {"input_ids": input_ids, "attention_mask": attention_mask}, rows, cols,
                   input_ids[rows, cols + 1], (rows, cols + 1), input_ids.shape, temperature, chunk_tokens)


def _scored(model, inputs: dict[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor, targets: torch.Tensor,
            at: tuple[torch.Tensor, ...], shape: tuple[int, ...], temperature: float,
            chunk_tokens: int) -> tuple[torch.Tensor, ...]:
    """Run ``model`` on ``inputs``, score each of ``targets`` [K] from the position (rows, cols) [K] that
    predicts it, and place the log-probs, entropies and top-1 hits at ``at`` in zero tensors of ``shape``.

    The model runs with ``logits_to_keep=1`` (its LM head scores one position per row) while a hook keeps the
    final norm's output, the hidden states the head reads; the head then scores the K positions in one call (so
    every rank makes the same calls: under ZeRO-3 each call gathers the head's weights collectively) and the
    softmax runs in fp32 ``chunk_tokens`` rows at a time, in the forward and in the backward
    (``_TargetLogprobs``). With no target (a rank's zero-weight filler) the head still scores one position,
    times 0, so that its backward reaches every parameter as on the other ranks."""
    hf = getattr(model, "module", model)                   # a DeepSpeed engine wraps the HF model
    norm, head = hf.get_decoder().norm, hf.get_output_embeddings()
    kept: list[torch.Tensor] = []
    hook = norm.register_forward_hook(lambda _m, _i, out: kept.append(out))
    try:
        model(**inputs, use_cache=False, logits_to_keep=1)
    finally:
        hook.remove()
    hidden = kept[-1]                                                  # [B, L, H]
    empty = len(rows) == 0
    if empty:                                                          # score one position, weighted 0
        rows, cols, targets = rows.new_zeros(1), cols.new_zeros(1), targets.new_zeros(1)
    # the positions by index_select, not hidden[rows, cols]: a context's last position predicts the first token of
    # each of its actions, and the backward of advanced indexing adds such repeats with atomic adds across CPU
    # threads, in an order that varies run to run; index_select's (index_add_) adds them in index order
    at_positions = hidden.flatten(0, 1).index_select(0, rows * hidden.shape[1] + cols)             # [K, H]
    lp, ent, hit = _TargetLogprobs.apply(head(at_positions), targets, temperature, chunk_tokens)   # [K]
    logp = torch.zeros(shape, dtype=torch.float32, device=hidden.device)
    entropy, top1 = torch.zeros_like(logp), torch.zeros_like(logp)
    if empty:
        return logp + 0.0 * lp.sum(), entropy, top1
    return logp.index_put(at, lp), entropy.index_put(at, ent), top1.index_put(at, hit)


class _TargetLogprobs(torch.autograd.Function):
    """log softmax(logits / T)[target] per row, the rows' entropies and whether the target is the argmax,
    computed ``chunk`` rows at a time in fp32: the only [K, V] tensors are the logits and their gradient, in
    the model's dtype."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, temperature: float, chunk: int):
        logp = logits.new_empty(len(target), dtype=torch.float32)      # [K]
        logz, entropy, top1 = torch.empty_like(logp), torch.empty_like(logp), torch.empty_like(logp)
        for i in range(0, len(target), chunk):
            x = logits[i:i + chunk].float() / temperature              # [c, V] fp32, one chunk
            logz[i:i + chunk] = torch.logsumexp(x, dim=-1)
            logp[i:i + chunk] = x.gather(-1, target[i:i + chunk, None])[:, 0] - logz[i:i + chunk]
            entropy[i:i + chunk] = logz[i:i + chunk] - (torch.softmax(x, dim=-1) * x).sum(-1)
            top1[i:i + chunk] = (x.argmax(-1) == target[i:i + chunk]).float()
        ctx.save_for_backward(logits, target, logz)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.mark_non_differentiable(entropy, top1)
        return logp, entropy, top1

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor, _grad_entropy: torch.Tensor, _grad_top1: torch.Tensor):
        logits, target, logz = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for i in range(0, len(target), ctx.chunk):
            x = logits[i:i + ctx.chunk].float() / ctx.temperature
            g = grad_logp[i:i + ctx.chunk, None]                         # [c, 1]
            gx = -torch.exp(x - logz[i:i + ctx.chunk, None]) * g         # d logp / d x = onehot - softmax
            gx.scatter_add_(-1, target[i:i + ctx.chunk, None], g)
            grad[i:i + ctx.chunk] = gx / ctx.temperature
        return grad, None, None, None
