"""The HF engine's memory and attention: the KV slab its rows decode in (``Slab``), the prefix cache that
prefills a prompt from the blocks it shares with a recent one (``PrefixCache``), and the SDPA attention it
registers with HF: grouped-query heads shared, not copied (``sdpa_gqa``), and, for batch invariance, computed
at shapes that depend on the request alone (``FIXED_SHAPES``, ``sdpa_fixed``). Used by hf_backend.py alone; it
imports nothing of the project."""
from __future__ import annotations

import contextlib
import functools
import threading

import torch


class Slab:
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


# A prompt is prefilled in chunks of PREFILL_CHUNK positions on a grid from position 0, whatever the prefix cache
# holds (PrefixCache keeps blocks of this size, so its hits end on the grid): a chunk's shapes, and so its
# rounding, never depend on which earlier prompt left which blocks. Prefilling positions 512-898 in one forward
# after 512 cached ones gave logits 1.4e-6 away from the whole prompt's in one (issue 100: two runs of one
# --async-steps 1 command drew their second turns' log-probs differently, by which turn of a group reached the
# cache first; it held blocks of 16 then).
PREFILL_CHUNK = 128


class PrefixCache:
    """The KV of recently prefilled prompts in blocks of ``block`` tokens, each block stored once under the hash
    of the whole prefix it ends (a chain: the hash of the previous block's hash and its own tokens), as vLLM's
    automatic prefix caching keeps them: a new prompt reuses the longest run of cached blocks it starts with.
    The G trajectories of an RL group share their first prompt, then every prompt of a task repeats the system
    prompt and the goal, and siblings that took the same actions repeat whole prompts. Least recently used
    blocks leave past ``max_tokens``. Valid for one set of weights: the backend drops it whenever it has
    nothing in flight (weights are only updated then)."""

    def __init__(self, max_tokens: int, block: int = PREFILL_CHUNK):
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

def sdpa_gqa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """HF's SDPA attention without copying the KV heads for grouped-query attention: ``enable_gqa`` lets the
    kernel share each KV head among its query heads (HF repeats them when a mask is given, copying the whole
    cache at every decode step). Same arithmetic; ``[batch, heads, q, d]`` in, ``[batch, q, heads, d]`` out."""
    is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=query.shape[2] > 1 and attention_mask is None and is_causal,   # as HF's sdpa decides
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


DECODE_ROWS = threading.local()   # .n: the rows of a padded decode batch that are requests (the model thread's)


def sdpa_fixed(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """``sdpa_gqa`` over ``fixed_cols(keys)`` key columns (zeros past the last key, masked),
    always with an explicit mask: a query row's arithmetic then depends on its own keys, not on how many there
    are (``HFBackend(invariance="fixed-shapes")``). The spare rows of a padded decode batch get zeros (their
    linear layers are what the padding is for; a batch entry's attention is computed alone anyway)."""
    rows = getattr(DECODE_ROWS, "n", None)
    if rows is not None and rows < query.shape[0]:   # a padded decode batch: its spare rows need no attention
        out, _ = sdpa_fixed(module, query[:rows], key[:rows], value[:rows], attention_mask[:rows], dropout, scaling)
        return torch.cat([out, out.new_zeros(query.shape[0] - rows, *out.shape[1:])]), None
    q, kv = query.shape[2], key.shape[2]
    if attention_mask is None:                                       # causal over the last q positions
        attention_mask = (torch.arange(kv, device=key.device)[None]
                          <= torch.arange(kv - q, kv, device=key.device)[:, None])[None, None]   # [1, 1, q, kv]
    pad = fixed_cols(kv) - kv
    if pad:
        key, value = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (key, value))
        attention_mask = torch.nn.functional.pad(attention_mask, (0, pad), value=False)
    return sdpa_gqa(module, query, key, value, attention_mask, dropout, scaling, is_causal=False)


@functools.cache
def register_sdpa_gqa(fixed: bool = False) -> str:
    """Register ``sdpa_gqa`` (``sdpa_fixed``) with HF (its masks are SDPA's) and return its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    name = "webagent_sdpa_fixed" if fixed else "webagent_sdpa_gqa"
    AttentionInterface.register(name, sdpa_fixed if fixed else sdpa_gqa)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name


@contextlib.contextmanager
def attention(model, name: str | None):
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


# ``HFBackend(invariance="fixed-shapes")``'s shapes: every decode step computes at least ``rows`` rows (it pads its
# batch), every attention spans ``fixed_cols`` key columns (``sdpa_fixed``), and a prompt's prefill runs in the
# chunks of ``PREFILL_CHUNK`` above, the same whatever the prefix cache holds. A CPU's kernels pick
# their code by shape: on the 2-core box (AMD EPYC, torch's CPU kernels) a row of a matrix product came out the
# same to the bit in every product of >= 4 rows at 1 thread (>= 12 at 2) and differently in smaller ones, and
# SDPA gave a query row the same result whatever the number of keys once they were padded to at least 512 and a
# multiple of 64 (its kernel splits keys into blocks of 512, or into one block of their own length below that, so
# a row's keys must never sit in a shorter block; bench/RESULTS.md).
# At 2 threads attention over a few rows still differed, so there the start-up check fails.
# ``HFBackend._fixed_shapes_hold`` checks the rule on the machine at hand.
FIXED_SHAPES = {"rows": 16, "cols": 512, "col_step": 64}


def fixed_cols(n: int) -> int:
    """The key columns an attention over ``n`` keys spans at fixed shapes: at least ``FIXED_SHAPES["cols"]`` (512),
    a multiple of ``col_step`` (64) past that."""
    step = FIXED_SHAPES["col_step"]
    return max(FIXED_SHAPES["cols"], -(-n // step) * step)
