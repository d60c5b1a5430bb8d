"""The policy pi_theta of WebAgent-R1: loading a model and its tokenizer, and ``make_backend``, the generation
backend that samples actions from it (the engines themselves and their interface are in engines/).

What it implements
- ``build_tokenizer``: a byte-level BPE tokenizer trained offline with the ``tokenizers`` library, with a
  real jinja chat template (ChatML / Qwen2 style or Llama-3 style), an end-of-turn token as ``eos`` and a
  distinct ``pad`` token (so padding masks never hide a real end of turn).
- ``load(spec)``: an HF checkpoint directory (any causal LM with a chat template; ``local_files_only``,
  never the network), or ``"tiny[:layers=2,hidden=128,...]"``: a small Qwen2-architecture model with random
  init and a tokenizer trained on environment text (the MiniWoB++ pages of the ``miniwob`` package plus
  fixed action strings and prompt words). Both round-trip through ``save_pretrained`` / ``from_pretrained``.
- ``decide_device``: CUDA -> bf16 (FlashAttention-2 when its kernels load, else SDPA); CPU -> fp32, SDPA.
  ``to_device`` moves a model there without rounding its fp32 buffers.
- ``make_backend``: the one factory of generation backends (every script builds its own with it), behind the one
  async interface of engines/__init__.py (``await backend.generate(prompt_ids, ...) -> engines.Generation``):
  * ``"hf"``: ``engines.hf_backend.HFBackend``, continuous batching on the model's own forward with a prefix
    cache, raw per-token log-probs (what they mean: hf_backend.py's docstring).
  * ``"openai"``: ``OpenAIBackend``: OpenAI-compatible chat completions over HTTP (stdlib only) with retries and
    a timeout; a bad or empty reply becomes an empty ``Generation`` with ``finish_reason="error: ..."``.
  * ``"vllm"``: ``engines.vllm_backend.VLLMBackend``, vLLM's async engine, in a module of its own with its
    processes and the weight push.

How to run
    .venv/bin/python -c "import policy; m, t = policy.load('tiny'); print(m.num_parameters(), len(t))"
    .venv/bin/python -m pytest -q tests/test_policy.py
Env vars: HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE are set to 1 on import (never touch the Hub);
WEBAGENT_DEVICE=cpu|cuda overrides ``decide_device``; OPENAI_API_KEY is the OpenAI backend's default key.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import glob
import http.client
import importlib.util
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

# Never touch the network for models/tokenizers: set before transformers / huggingface_hub are imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402  (after the offline switches)

import engines  # noqa: E402
from engines import hf_backend  # noqa: E402

log = logging.getLogger(__name__)


# ---- device ----

def decide_device(device: str | torch.device | None = None) -> tuple[torch.device, torch.dtype]:
    """Decide device and dtype once (STYLE.md 10): CUDA -> bf16, CPU -> fp32.

    ``device`` (or the env var ``WEBAGENT_DEVICE``) overrides the choice, e.g. ``decide_device("cpu")``
    -> ``(device("cpu"), torch.float32)``. bf16 on CPUs without AMX is several times slower than fp32.
    """
    choice = device if device is not None else os.environ.get("WEBAGENT_DEVICE")
    dev = torch.device(choice) if choice is not None else torch.device(
        "cuda" if torch.cuda.is_available() else "cpu")
    if choice is None and dev.type == "cpu":
        _warn_unusable_gpu()
    return dev, (torch.bfloat16 if dev.type == "cuda" else torch.float32)


@functools.cache
def _warn_unusable_gpu() -> None:
    """Say it once, loudly, when the machine has an NVIDIA GPU that torch cannot use (a driver older than the
    torch build's CUDA, a CPU-only torch): the run would otherwise train on the CPU in fp32 with gloo, quietly.
    ``CUDA_VISIBLE_DEVICES=""`` (the test suite's choice) hides the GPU on purpose and says nothing."""
    gpus = sorted(glob.glob("/dev/nvidia[0-9]*"))
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "" or not gpus:
        return
    cuda = torch.version.cuda
    fix = ("it is a CPU-only build: install a CUDA build of torch" if cuda is None else
           f"it is built for CUDA {cuda}: check `nvidia-smi`, whose driver must support CUDA {cuda}")
    log.warning("an NVIDIA GPU is present (%s) but torch %s cannot use it (%s); training on the CPU in fp32. "
                "WEBAGENT_DEVICE=cpu says that is meant", ", ".join(gpus),
                torch.__version__, fix)


def attn_implementation(device: torch.device, dtype: torch.dtype) -> str:
    """FlashAttention-2 on CUDA in bf16/fp16 when its kernels load (``flash_attn_usable``), else PyTorch SDPA."""
    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16) and flash_attn_usable():
        return "flash_attention_2"
    return "sdpa"


@functools.cache
def flash_attn_usable() -> bool:
    """Whether FlashAttention-2's compiled kernels really load. A package that is merely installed is not enough:
    a ``flash_attn`` built against another torch imports its extension (``flash_attn_2_cuda``) and fails with
    an undefined symbol, which would otherwise surface only at the first forward. Checked once per process."""
    if importlib.util.find_spec("flash_attn") is None:
        return False
    try:
        from flash_attn import flash_attn_func  # noqa: F401  (imports flash_attn_2_cuda, the kernels)
    except Exception as e:   # ImportError / OSError (undefined symbol, wrong CUDA), or anything its import raises
        log.warning("flash_attn is installed but its kernels do not load (%s: %s); using SDPA",
                    type(e).__name__, e)
        return False
    return True


# ---- tokenizer ----

#: Qwen2's pre-tokenization regex: words, single digits (\p{N} not \p{N}+), punctuation runs, whitespace.
#: Single digits keep element labels like "17" as "1","7", which a tiny model learns quickly.
_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
#: ``split="words"``: a run of letters is always its own pre-token (never glued to the space or quote before
#: it), so a label is the same token sequence in the instruction ("okay"), the page (> okay <) and the thought
#: ('okay'): matching them is then plain copying. About 31% more tokens per sample. Necessary for a tiny model to
#: learn the matching, not sufficient (a 4-layer model trained on 20 demonstrations per task still did not copy).
_SPLIT_PATTERN_WORDS = r"\p{L}+|\p{N}|[^\s\p{L}\p{N}]+|\s+"
_SPLIT_PATTERNS = {"qwen2": _SPLIT_PATTERN, "words": _SPLIT_PATTERN_WORDS}

#: ChatML (Qwen2-style) template: ``<|im_start|>role\ncontent<|im_end|>\n`` per message.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: Llama-3-style template: bos, then ``<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>``;
#: contents are trimmed exactly as Meta's template does.
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim)"
    " + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

#: template name -> (special tokens in id order, roles of some of them, chat template)
_TEMPLATES = {
    # Qwen2: eos = end of turn, pad = <|endoftext|> (never the end-of-turn token), no bos.
    "chatml": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
               dict(eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None),
               CHATML_TEMPLATE),
    # Llama-3.1: bos <|begin_of_text|>, end of turn <|eot_id|>, pad <|finetune_right_pad_id|>.
    "llama3": (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|eot_id|>", "<|finetune_right_pad_id|>"],
               dict(eos_token="<|eot_id|>", pad_token="<|finetune_right_pad_id|>",
                    bos_token="<|begin_of_text|>"),
               LLAMA3_TEMPLATE),
}

#: Non-special added tokens: the response format's tags are single tokens (as in Qwen3), and decode as text.
FORMAT_TOKENS = ["<think>", "</think>", "<answer>", "</answer>"]

#: Padding candidates for checkpoints without a pad token (never an end-of-turn token).
_PAD_CANDIDATES = ("<|finetune_right_pad_id|>", "<|pad|>", "<pad>", "[PAD]", "<|endoftext|>")


def build_tokenizer(corpus: Iterable[str], *, vocab_size: int = 2048, template: str = "chatml",
                    min_frequency: int = 2, split: str = "qwen2"):
    """Train a byte-level BPE tokenizer offline on ``corpus`` and wrap it as a ``PreTrainedTokenizerFast``.

    - Pre-tokenization as Qwen2 (digits one by one), byte-level so any text round-trips; ``split="words"``
      keeps a run of letters its own pre-token (a label tokenizes the same in the instruction and the page).
    - ``template="chatml"``: <|endoftext|> (pad), <|im_start|>, <|im_end|> (eos = end of turn), no bos.
      ``template="llama3"``: <|begin_of_text|> (bos, also prepended by ``tokenizer(text)`` as Meta's does),
      <|end_of_text|>, <|start_header_id|>, <|end_header_id|>, <|eot_id|> (eos = end of turn),
      <|finetune_right_pad_id|> (pad).
    - ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` are single (non-special) tokens.
    - ``tokenizer.eos_token`` is the end-of-turn token, so ``generate`` stops there; ``pad_token`` is
      a different token, so padding masks never hide a real end of turn.

    Example: ``tok = build_tokenizer(["<button> Ok </button>"] * 10, vocab_size=400)``;
    ``tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)``
    -> ``'<|im_start|>user\\nhi<|im_end|>\\n'``.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if template not in _TEMPLATES:
        raise ValueError(f"template must be one of {sorted(_TEMPLATES)}, got {template!r}")
    if split not in _SPLIT_PATTERNS:
        raise ValueError(f"split must be one of {sorted(_SPLIT_PATTERNS)}, got {split!r}")
    specials, roles, chat_template = _TEMPLATES[template]

    tok = Tokenizer(models.BPE())  # no unk: byte-level covers every input
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_SPLIT_PATTERNS[split]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((t for t in corpus), trainer=trainer)
    tok.add_tokens(FORMAT_TOKENS)
    bos = roles["bos_token"]
    if bos is not None:  # Llama-3: tokenizer(text) prepends bos; the chat template writes it itself
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)

    kwargs = {k: v for k, v in roles.items() if v is not None}
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                                 model_max_length=32768, **kwargs)
    hf.add_special_tokens({"additional_special_tokens": [s for s in specials if s not in kwargs.values()]})
    hf.chat_template = chat_template
    return hf


# ---- tiny model ----

#: Fixed text the tiny tokenizer is trained on besides the MiniWoB pages: actions, prompt and observation
#: words, so that e.g. ``do(action="Click", element="`` is a handful of tokens.
_ACTION_TEXT = [
    'do(action="Click", element="{n}")', 'do(action="Right Click", element="{n}")',
    'do(action="Type", argument="{w}", element="{n}")', 'do(action="Search", argument="{w}", element="{n}")',
    'do(action="Hover", element="{n}")', 'do(action="Scroll Up")', 'do(action="Scroll Down")',
    'do(action="Press Enter")', 'do(action="Switch Tab", argument="{n}")',
    'do(action="Select Dropdown Option", argument="{w}", element="{n}")', 'do(action="Wait")',
    'exit(message="{w}")', "go_backward()", "go_forward()",
]
_PROMPT_WORDS = (
    "system user assistant Task Instruction: Round ** Simplified html ** Error from the previous action: "
    "You are a professional web browsing agent assistant that can fulfill user's high-level instructions. "
    "Given simplified html of the browsed webpage at each step, you plan operations in python-style pseudo "
    "code using provided functions. Think first, then answer with exactly one action. # Element: # Note: "
    "the button link input checkbox radio textbox dropdown option menu tab submit search field text "
    "<html> <body> <div> <button> <a> <input> <select> <option> <textarea> <label> <span> <p> <li> <ul> "
    'title= value= type= placeholder= selected= data-value= data-text= data-testid= data-label= '
    'data-bbox= data-status="checked" data-status="not-checked" data-status="selected" '
    "Click Type Search Hover Scroll Up Down Press Enter Switch Tab Select Dropdown Option Wait exit message "
    "element argument action"
)
_FILLER_WORDS = ["Ok", "Submit", "yes", "no", "cancel", "login", "password", "search", "next", "previous"]


def tiny_corpus(max_pages: int | None = None) -> list[str]:
    """Environment text for the tiny tokenizer: the MiniWoB++ task pages shipped in the ``miniwob`` package
    (read as files; env is not imported) + action strings and prompt words repeated so BPE learns them."""
    spec = importlib.util.find_spec("miniwob")
    pages: list[str] = []
    if spec is not None and spec.submodule_search_locations:
        root = os.path.join(list(spec.submodule_search_locations)[0], "html", "miniwob")
        for path in sorted(glob.glob(os.path.join(root, "*.html")))[:max_pages]:
            with open(path, encoding="utf-8", errors="replace") as f:
                pages.append(f.read())
    else:
        log.warning("miniwob package not found: tiny tokenizer trained on action/prompt text only")
    fixed = []
    for k in range(40):
        n, w = str(k), _FILLER_WORDS[k % len(_FILLER_WORDS)]
        fixed += [a.format(n=n, w=w) for a in _ACTION_TEXT]
        fixed.append(f'<think> # Element: the "{w}" button </think><answer> do(action="Click", element="{n}") '
                     f"</answer>")
        fixed.append(f'<button id="{n}" data-bbox="{k},{2 * k},{3 * k},{4 * k}"> {w} </button>')
        fixed.append(_PROMPT_WORDS)
    return pages + fixed


@dataclass
class TinySpec:
    """Sizes of the tiny Qwen2 model, parsed from ``"tiny:layers=2,hidden=128"`` ->
    ``TinySpec(layers=2, hidden=128, ...)``. ``template`` is "chatml" or "llama3"."""
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 512
    vocab: int = 2048
    template: str = "chatml"
    split: str = "qwen2"
    seed: int = 0
    max_pos: int = 32768
    tie: int = 1          # 1: lm_head shares the embedding matrix (Qwen2.5 up to 3B); 0: its own (7B and up)

    @classmethod
    def parse(cls, spec: str) -> "TinySpec":
        if spec != "tiny" and not spec.startswith("tiny:"):
            raise ValueError(f"not a tiny spec: {spec!r}")
        out = cls()
        body = spec[len("tiny:"):] if spec.startswith("tiny:") else ""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        for item in filter(None, (s.strip() for s in body.split(","))):
            key, sep, val = item.partition("=")
            if not sep or key not in types:
                raise ValueError(f"bad tiny option {item!r}; known: {sorted(types)}")
            if types[key] in (str, "str"):
                setattr(out, key, val)
            elif re.fullmatch(r"\d+", val.strip()):
                setattr(out, key, int(val))
            else:
                raise ValueError(f"tiny option {key}={val!r}: expected a non-negative integer")
        if out.hidden % out.heads or out.heads % out.kv_heads:
            raise ValueError(f"hidden ({out.hidden}) % heads ({out.heads}) and heads % kv_heads must be 0")
        return out


def build_tiny(spec: str = "tiny", *, corpus: Iterable[str] | None = None):
    """A randomly initialized Qwen2ForCausalLM + an offline tokenizer (fp32, CPU). The global RNG is not
    touched (init runs under a forked RNG seeded with ``TinySpec.seed``), so the same spec gives the same
    weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    ts = TinySpec.parse(spec)
    tok = build_tokenizer(tiny_corpus() if corpus is None else corpus, vocab_size=ts.vocab,
                          template=ts.template, split=ts.split)
    cfg = Qwen2Config(
        vocab_size=len(tok), hidden_size=ts.hidden, intermediate_size=ts.intermediate,
        num_hidden_layers=ts.layers, num_attention_heads=ts.heads, num_key_value_heads=ts.kv_heads,
        max_position_embeddings=ts.max_pos, tie_word_embeddings=bool(ts.tie),
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    cfg._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ts.seed)
        model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = engines.end_of_turn_ids(tok)
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


# ---- load ----

def load(spec: str, *, device: str | torch.device | None = None, dtype: torch.dtype | None = None,
         corpus: Iterable[str] | None = None, chat_template: str | None = None):
    """Load ``(model, tokenizer)`` in eval mode on ``device`` / ``dtype`` (default: ``decide_device()``).

    ``spec``: ``"tiny"`` / ``"tiny:layers=4,hidden=256,template=llama3"`` (built offline, ``corpus``
    overrides the tokenizer's training text), or a local HF checkpoint directory (``local_files_only``;
    a Hub name that is not cached fails instead of downloading). ``chat_template``: the path of a Jinja
    chat-template file that replaces the checkpoint's (the scripts' ``--chat-template``); it is saved with
    every checkpoint the tokenizer is saved with. The tokenizer must end up with a chat template.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev, default_dtype = decide_device(device)
    dtype = dtype or default_dtype
    attn = attn_implementation(dev, dtype)
    if spec == "tiny" or spec.startswith("tiny:"):
        model, tok = build_tiny(spec, corpus=corpus)
        if attn != "sdpa":
            model.set_attn_implementation(attn)
    else:
        try:
            tok = AutoTokenizer.from_pretrained(spec, local_files_only=True)
        except OSError:   # transformers' message speaks of Hub repos; say what this project loads
            if os.path.isdir(spec):
                raise
            raise ValueError(f"model {spec!r}: no such directory, nor a Hub model in the local cache; give a "
                             "local HF checkpoint directory or tiny[:layers=N,hidden=N,...] (nothing is "
                             "downloaded)") from None
        model = AutoModelForCausalLM.from_pretrained(spec, local_files_only=True, dtype=dtype,
                                                     attn_implementation=attn)
    if chat_template:
        tok.chat_template = read_chat_template(chat_template)
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"{spec}: the tokenizer has no chat template (a base model?); give one with "
                         "--chat-template PATH (a Jinja file, e.g. the template of the instruct model of the family)")
    _ensure_pad_token(tok)
    to_device(model, dev, dtype)
    model.eval()
    return model, tok


def to_device(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """Move ``model`` to ``device`` and cast its parameters to ``dtype``, leaving its buffers' dtypes alone.
    ``model.to(dtype=torch.bfloat16)`` would round the rotary embedding's fp32 ``inv_freq`` too: the angle of
    position p is then off by up to p x 2^-9 radians (32 at 16k tokens), so the trainer's
    log-probs part from vLLM's (which computes the angles in fp32) and from a checkpoint reloaded by
    ``from_pretrained`` (which keeps ``inv_freq`` in fp32) on long contexts. Seen on an H100: the trainer against
    its reloaded bf16 checkpoint differed by up to 3 nats at 16k tokens (bench/RESULTS.md "GPU path")."""
    model.to(device=device)
    for p in model.parameters():
        if p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)
    return model


def read_chat_template(path: str) -> str:
    """The text of a Jinja chat-template file, with a clear error for a missing or empty file."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise ValueError(f"--chat-template {path}: cannot read it ({e.strerror})") from None
    if "{" not in text:
        raise ValueError(f"--chat-template {path}: not a Jinja chat template (no {{ or {{% in it)")
    return text


def _ensure_pad_token(tok) -> None:
    """Give a tokenizer without one a pad token that is not an end-of-turn token (no new embeddings)."""
    if tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id:
        return
    vocab = tok.get_vocab()
    for cand in _PAD_CANDIDATES:
        if cand in vocab and vocab[cand] != tok.eos_token_id:
            tok.pad_token = cand
            return
    log.warning("tokenizer has no pad token distinct from eos; batching pads with id 0 under the mask")


# ---- OpenAI-compatible backend ----

class OpenAIBackend:
    """Chat completions over HTTP (``POST {base_url}/chat/completions``), stdlib only.

    Example::

        backend = OpenAIBackend("http://127.0.0.1:8000/v1", "Qwen2.5-7B-Instruct", timeout_s=60)
        gen = await backend.generate([], messages=[{"role": "user", "content": "hi"}])

    Timeouts, connection errors, HTTP 408/409/429/5xx and malformed JSON are retried ``max_retries``
    times with exponential backoff; other HTTP errors are not. What cannot be fixed by retrying becomes
    ``Generation([], None, "", "error: ...")``, never an exception; an empty reply becomes
    ``finish_reason="error: empty reply"``. ``ids`` come from ``tokenizer`` when given (re-tokenized text,
    so ``logprobs`` is ``None``). API key: ``api_key`` or env ``OPENAI_API_KEY``.
    ``stats``: ``requests``, ``retries``, ``timeouts``, ``http_errors``, ``malformed``, ``failed``.
    """

    RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, tokenizer=None,
                 max_new_tokens: int = engines.SAMPLING.max_new_tokens,
                 temperature: float = engines.SAMPLING.temperature, top_p: float = engines.SAMPLING.top_p,
                 timeout_s: float = 60.0, max_retries: int = 3, backoff_s: float = 1.0,
                 extra_body: dict[str, Any] | None = None):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.tokenizer = model, tokenizer
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.extra_body = dict(extra_body or {})
        self.stats = {"requests": 0, "retries": 0, "timeouts": 0, "http_errors": 0, "malformed": 0,
                      "failed": 0}
        self._stats_lock = threading.Lock()

    async def generate(self, prompt_ids: Sequence[int] | None = None, *, messages: list[dict] | None = None,
                       max_new_tokens: int | None = None, temperature: float | None = None,
                       top_p: float | None = None, seed: int | None = None) -> engines.Generation:
        """One chat completion; ``seed`` goes out as the request's ``seed`` field (vLLM's server seeds that
        request's sampling with it; OpenAI's API treats it as best effort)."""
        if not messages:
            raise ValueError("OpenAIBackend.generate needs messages (chat API)")
        n, t, p = engines.request_settings(self, max_new_tokens, temperature, top_p)
        body = {"model": self.model, "messages": messages, "max_tokens": n, "temperature": t, "top_p": p,
                **({"seed": int(seed)} if seed is not None else {}), **self.extra_body}
        return await asyncio.to_thread(self._complete, body)

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    def _complete(self, body: dict) -> engines.Generation:
        self._count("requests")
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        error = "no attempt"
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._count("retries")
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as exc:       # before URLError: it is a subclass
                self._count("http_errors")
                error = f"HTTP {exc.code}"
                exc.close()
                if exc.code in self.RETRY_STATUS:
                    continue
                break
            except (TimeoutError, socket.timeout) as exc:
                self._count("timeouts")
                error = f"timeout after {self.timeout_s}s ({exc})"
                continue
            except (urllib.error.URLError, ConnectionError, http.client.HTTPException, OSError) as exc:
                if isinstance(getattr(exc, "reason", None), (TimeoutError, socket.timeout)):
                    self._count("timeouts")           # a connect timeout arrives wrapped in URLError
                error = f"{type(exc).__name__}: {exc}"
                continue
            try:
                reply = json.loads(raw)
                choice = reply["choices"][0]
                text = choice["message"]["content"]
                if text is not None and not isinstance(text, str):
                    raise TypeError(f"content is {type(text).__name__}")
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                self._count("malformed")
                error = f"malformed reply ({type(exc).__name__}: {exc})"
                continue
            if not text:
                self._count("failed")
                return engines.Generation([], None, "", "error: empty reply")
            ids = self.tokenizer.encode(text, add_special_tokens=False) if self.tokenizer is not None else []
            return engines.Generation(ids, None, text, str(choice.get("finish_reason") or "stop"))
        self._count("failed")
        log.warning("OpenAIBackend: giving up on %s: %s", self.url, error)
        return engines.Generation([], None, "", f"error: {error}")

    async def aclose(self) -> None:
        """Nothing to release (each request has its own connection); failed requests are reported here."""
        if self.stats["failed"]:
            log.warning("openai backend: %d requests failed (%s)", self.stats["failed"], self.stats)


# ---- factory ----

BACKENDS = ("hf", "vllm", "openai")


def make_backend(kind: str, model, tokenizer=None, *, max_new_tokens: int = engines.SAMPLING.max_new_tokens,
                 temperature: float = engines.SAMPLING.temperature, top_p: float = engines.SAMPLING.top_p, seed: int = 0, max_context: int = 16384, batch_invariant: bool = False,
                 max_batch_size: int = 64, num_threads: int | None = None, chat_template: str | None = None,
                 gpu_memory: float = 0.7, vllm_eager: bool = False, local_rank: int | None = None,
                 own_session: bool = False, base_url: str | None = None, timeout_s: float = 60.0,
                 engine_dtype: str = "", own_weights: bool = False, vllm_devices: str = ""):
    """The generation backend of ``kind`` for ``model``, as every script builds it (train_mgrpo.py, eval.py).

    Every backend has ``generate`` (the interface above), ``.tokenizer`` (the one its prompts are rendered and
    counted with; None for an OpenAI server without a local tokenizer) and ``await backend.aclose()``, which
    releases what it holds (the model thread and the weights; the engine's processes; nothing for HTTP).

    * ``"hf"``: ``model`` is a loaded module (the trainer's own: generation follows its updates; give
      ``tokenizer``) or a checkpoint path / tiny spec (loaded here, on ``decide_device``'s device, with
      ``chat_template``). ``batch_invariant``: on a CPU, rows decoded alike alone or in any batch
      (``HFBackend(invariance="auto")``); ``num_threads``: the model thread's torch threads on a CPU.
    * ``"vllm"``: ``model`` is a checkpoint directory; ``seed`` the engine's, ``gpu_memory`` its share of the
      GPU, ``local_rank`` its GPU under torchrun, ``own_session`` keeps Ctrl-C away from its processes,
      ``vllm_eager`` vLLM's ``enforce_eager`` (no torch.compile, no CUDA graphs: it starts sooner, generates slower).
    * ``engine_dtype`` ("bfloat16", "float32", ...; "" the default: the trainer's dtype for hf, vLLM's choice for
      vllm): the dtype the engine computes in; for hf a copy of the trainer's model in it (HFBackend's
      ``engine_dtype``), so that the engine's distribution differs from the trainer's as at paper scale.
    * ``own_weights``: the engine keeps the weights it decodes with through the trainer's update, which hands it
      the new ones (``after_update``) when its schedule says (train_mgrpo's --async-steps 1): hf decodes with a
      copy of the trainer's model, vllm does not sleep during the update; ``vllm_devices``: the vLLM engines' GPUs
      of their own, one per local rank ("": each rank's engine on the rank's GPU).
    * ``"openai"``: ``model`` is the served model's name at ``base_url``; ``tokenizer`` (optional) counts prompts.
    """
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
    if engine_dtype and not isinstance(getattr(torch, engine_dtype, None), torch.dtype):
        raise ValueError(f"engine_dtype (--engine-dtype) {engine_dtype!r}: a torch dtype, e.g. bfloat16 or float32")
    if kind == "hf":
        if isinstance(model, (str, os.PathLike)):
            device, dtype = decide_device()
            model, tokenizer = load(str(model), device=device, dtype=dtype, chat_template=chat_template)
        on_cpu = next(model.parameters()).device.type == "cpu"
        return hf_backend.HFBackend(model, tokenizer, **sampling, max_batch_size=max_batch_size,
                                    num_threads=num_threads if on_cpu else None,
                                    invariance="auto" if batch_invariant and on_cpu else "off",
                                    engine_dtype=getattr(torch, engine_dtype) if engine_dtype else None,
                                    own_weights=own_weights)
    if kind == "vllm":
        from engines import vllm_backend   # (vLLM is imported only by those who use it)
        if own_weights and not vllm_devices and torch.cuda.is_available():
            log.warning("one step off with vLLM on the trainer's GPU: the engine stays awake through the update "
                        "with its %.0f%% of the GPU's memory; give it GPUs of its own (--vllm-devices) or a "
                        "--vllm-gpu-memory that leaves the update room (docs/gpu.md)", 100 * gpu_memory)
        backend = vllm_backend.VLLMBackend(str(model), tokenizer=tokenizer, **sampling, seed=seed,
                                           max_model_len=max_context, gpu_memory_utilization=gpu_memory,
                                           local_rank=local_rank, own_session=own_session, enforce_eager=vllm_eager,
                                           dtype=engine_dtype or None, devices=vllm_devices or None,
                                           sleep_mode=False if own_weights else None)
        if chat_template and tokenizer is None:   # the engine renders nothing: prompts are ids rendered with this
            backend.tokenizer.chat_template = read_chat_template(chat_template)
        return backend
    if kind == "openai":
        if not base_url:
            raise ValueError("the openai backend needs base_url (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIBackend(base_url, str(model), tokenizer=tokenizer, **sampling, timeout_s=timeout_s)
    raise ValueError(f"unknown backend {kind!r}: expected one of {BACKENDS}")
