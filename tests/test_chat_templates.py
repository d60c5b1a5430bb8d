"""Chat templates as today's model families ship them, written for these tests (no family's own file is
copied): a thinking template whose generation prompt opens <think> and that re-renders the final assistant
turn, templates that lose part of the response (refused loudly), and --chat-template for a checkpoint
without a template (a base model)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import compress
import env
import policy
import warm
from compress import ChatTemplateError

ROOT = Path(__file__).resolve().parent.parent

# Qwen3-thinking-like behaviour: the generation prompt ends with "<think>\n"; the final assistant turn (after
# the last user message) is rendered as "<think>\n" + reasoning + "\n</think>\n\n" + answer; reasoning is
# dropped from assistant turns before the last user message.
THINKING = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}"
    "{%- set content = m.content %}{%- set reasoning = '' %}"
    "{%- if '</think>' in content %}"
    "{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip() %}"
    "{%- set content = content.split('</think>')[-1].strip() %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_user %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)
THOUGHT = "# Element: the 'Ok' button"
ACTION = 'do(action="Click", element="0")'
RESPONSE = f"<think> {THOUGHT} </think> <answer> {ACTION} </answer>"


@pytest.fixture(scope="module")
def tok():
    spec = policy.TinySpec()
    t = policy.build_tokenizer(policy.tiny_corpus(max_pages=20), vocab_size=spec.vocab, template="chatml")
    t.chat_template = THINKING
    return t


def _messages(turns: int) -> list[dict[str, str]]:
    history = [compress.Turn(f'<button id="0"> Ok {k} </button>', RESPONSE) for k in range(turns)]
    return compress.build_messages('Click on the "Ok" button.', history, '<button id="0"> Ok </button>',
                                   prompt="short")


def test_generation_prompt_opens_the_thought(tok):
    ids = compress.render_prompt(tok, _messages(2))
    assert tok.decode(ids).endswith("<|im_start|>assistant\n<think>\n")
    assert THOUGHT not in tok.decode(ids)            # reasoning of earlier turns is dropped from the history


def test_bc_target_is_the_templates_own_rendering(tok):
    msgs = _messages(2) + [{"role": "assistant", "content": RESPONSE}]
    ids, mask = compress.render_sample(tok, msgs)
    prompt = compress.render_prompt(tok, msgs[:-1])
    assert ids[:len(prompt)] == prompt and mask[:len(prompt)] == [0] * len(prompt)
    target = tok.decode([t for t, m in zip(ids, mask) if m])   # (decode spaces added tokens: compare words)
    assert target.split() == f"{THOUGHT}\n</think>\n\n<answer> {ACTION} </answer><|im_end|>".split()
    assert "\n</think>\n\n" in target
    assert sum(mask) == len(ids) - len(prompt) - 1    # everything after the prompt but the final newline
    # --no-think-in-loss: the reasoning and its </think> leave the loss, the answer stays
    _, mask2 = compress.render_sample(tok, msgs, think_in_loss=False)
    assert tok.decode([t for t, m in zip(ids, mask2) if m]).split() == f"<answer> {ACTION} </answer><|im_end|>".split()


@pytest.mark.parametrize("lossy", [
    THINKING.replace("'\\n</think>\\n\\n' + content", "'\\n</think>\\n\\n'"),               # drops the answer
    THINKING.replace("'<|im_start|>assistant\\n<think>\\n' + reasoning", "'<|im_start|>assistant\\n<think>\\nhmm'"),
])                                                                                            # replaces the thought
def test_templates_that_lose_part_of_the_response_fail_loudly(tok, lossy, monkeypatch):
    monkeypatch.setattr(tok, "chat_template", lossy)
    with pytest.raises(ChatTemplateError, match="loses part of it"):
        compress.render_sample(tok, _messages(1) + [{"role": "assistant", "content": RESPONSE}])


def test_rl_response_generated_inside_the_open_thought(tok):
    """What a model generates after "<think>\\n": the thought, "</think>", the answer. It parses, its thought is
    what the viewer shows, and its RL sample is the generated ids as they are."""
    prompt = compress.render_prompt(tok, _messages(1))
    text = f"{THOUGHT}\n</think>\n\n<answer> {ACTION} </answer>"
    gen = tok.encode(text, add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]
    assert env.parse_action(text) == env.Action("Click", element=0)
    assert compress.split_response(text) == (THOUGHT, ACTION)
    ids, mask = compress.rl_sample(prompt, gen)
    assert ids == prompt + gen and mask == [0] * len(prompt) + [1] * len(gen)
    # as history, the template renders the response without its reasoning, as the family's template does
    later = tok.apply_chat_template(compress.build_messages("x", [compress.Turn("<p> a </p>", text)], "<p> b </p>",
                                                            prompt="short"), tokenize=False, add_generation_prompt=True)
    assert f"<|im_start|>assistant\n<answer> {ACTION} </answer><|im_end|>" in later and THOUGHT not in later


def test_chat_template_flag_for_a_model_without_one(tmp_path):
    """A checkpoint without a template (a base model) is refused with a message naming --chat-template; with
    the flag it loads, trains, and the checkpoint it writes carries the template for later stages."""
    base = tmp_path / "base"
    model, t = policy.load("tiny", device="cpu")
    t.chat_template = None
    model.save_pretrained(base)
    t.save_pretrained(base)
    (base / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ValueError, match="--chat-template"):
        policy.load(str(base), device="cpu")
    template = tmp_path / "template.jinja"
    template.write_text(THINKING)
    _, t2 = policy.load(str(base), device="cpu", chat_template=str(template))
    assert t2.chat_template == THINKING
    with pytest.raises(ValueError, match="cannot read"):
        policy.load(str(base), device="cpu", chat_template=str(tmp_path / "missing.jinja"))

    demos = tmp_path / "demos.jsonl"
    demos.write_text(json.dumps({"task": "miniwob/click-button", "seed": 0, "intent": 'Click on the "Ok" button.',
                                 "reward": 1.0, "steps": [{"observation": '<button id="0"> Ok </button>',
                                                           "error": None, "url": "", "response": RESPONSE}]}) + "\n")
    out = tmp_path / "bc"
    proc = warm.run([sys.executable, "train_bc.py", "--model", str(base), "--chat-template", str(template),
                           "--data", str(demos), "--out", str(out), "--max-steps", "1", "--batch-size", "1",
                           "--micro-batch", "1", "--prompt", "short", "--torch-threads", "1"],
                    cwd=ROOT, capture_output=True, text=True, timeout=600,
                    env={**os.environ, "TORCH_EXTENSIONS_DIR": str(ROOT / ".torch_extensions")})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    from transformers import AutoTokenizer
    assert AutoTokenizer.from_pretrained(out / "hf", local_files_only=True).chat_template == THINKING
    assert policy.load(str(out / "hf"), device="cpu")[1].chat_template == THINKING
