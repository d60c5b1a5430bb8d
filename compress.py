"""What the model sees and what it is trained on: system prompts, the multi-turn history with dynamic
context compression (paper Sec. 2.3), and rendering through the model's own chat template into token ids
plus a loss mask on the action tokens.

What it implements
- ``system_prompt(kind)``: the action space of the paper's Table 6 in our own wording, in the thinking
  format (default; ``<think> ... </think> <answer> ACTION </answer>``), the plain format (bare action,
  the Table 3 ablation), and short variants for tiny CPU models (the prompt is part of every sample).
- ``format_response`` / ``parse_response`` / ``split_response``: the response format (thought + action) in one
  place; actions.parse_action (also env.parse_action) reads responses through ``parse_response``.
- ``Turn`` / ``build_messages``: h_t = (s'_1, a_1, ..., s'_{t-1}, a_{t-1}, s_t), every earlier
  observation s'_k replaced by ``PLACEHOLDER`` ("** Simplified html **"); ``compress=False`` keeps them.
- ``render_prompt`` / ``render_sample``: ``tokenizer.apply_chat_template`` -> ``input_ids`` and a loss mask
  equal to 1 exactly on the last assistant response and its end-of-turn token (the BC loss of Sec. 2.2 and
  the "loss only on action tokens" of Sec. 2.3). Any chat template works that renders a conversation's
  prefixes consistently; others fail with ``ChatTemplateError`` naming the problem.
- ``rl_sample``: the token-exact M-GRPO sample of one step: the prompt ids fed to the generator followed by
  the ids it generated, never re-tokenized, mask on the generated ids.
- ``fit_prompt``: the length policy: only the current observation is cut (token-wise, at a character
  boundary, marked in the text) so that prompt + max new tokens <= max context (16,384 in the paper).

Departures from / additions to the paper
- Prompt wording is ours; the function signatures, the 11 action names and the tag format are those of
  Table 6, so checkpoints trained on WebRL / VisualAgentBench data read them as intended. The plain format
  drops the tags entirely (the paper only says "the gray part is removed"); a "# Element: ..." comment line
  before the bare action is allowed, as in WebRL data.
- The env's error about the previous action is shown in the next user turn, before the observation, as
  ``"Error from the previous action: {error}"``; it is kept when that observation is compressed.
- ``think_in_loss=False`` drops ``<think> ... </think>`` from the BC loss (the reference code does so); the
  default keeps it, as Eq. 1 / Eq. 2 sum over all tokens of a_t.
- Control-token strings inside messages (a web page may contain "<|im_end|>") are encoded as plain text
  (transformers' ``sanitize_control_tokens`` method, done here: ``_template_ids``), so page text can never
  close a turn.
- Truncation of an over-long observation is not described in the paper; we cut its tail.

How to run
    .venv/bin/python -c "import compress; print(compress.system_prompt('short'))"
    .venv/bin/python -m pytest -q tests/test_compress.py
    .venv/bin/python bench/bench_compress.py
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, NamedTuple, Sequence, get_args

import engines

# ---- constants ----

#: Sec. 2.3: what every earlier observation becomes under dynamic context compression.
PLACEHOLDER = "** Simplified html **"
#: Put before the env's error text in the user turn that follows a failed action.
ERROR_PREFIX = "Error from the previous action: "
#: Appended to a cut observation (``fit_prompt``), so the model knows the page goes on.
TRUNCATION_MARK = "\n... [observation truncated] ..."
#: The paper's max context (App. B; its max new tokens: ``engines.SAMPLING``).
MAX_CONTEXT = 16384
#: ``fit_prompt`` stops searching once at most this many tokens of the budget are left unused.
_FIT_SLACK = 32


class ChatTemplateError(ValueError):
    """A chat template this module cannot derive exact loss masks from (the message names the problem)."""


class ContextOverflowError(ValueError):
    """The prompt does not fit the context even with the current observation emptied."""


# ---- system prompts (Table 6, our wording) ----

_INTRO = (
    "You are a web browsing agent that carries out a user's high-level instruction on a website. Each round "
    "you receive the simplified HTML of the current page, in which every interactive element carries a "
    "numeric id, and you operate the page by writing one call to the functions defined below, in "
    "python-style pseudo code."
)

_FORMAT = {
    "thinking": (
        "First reason about the task and the page as an internal monologue, then choose the action. Put the "
        "reasoning between <think> and </think> and the action between <answer> and </answer>, that is, "
        "reply as: <think> ... </think> <answer> ... </answer>"
    ),
    "plain": (
        "Reply with the action only: exactly one function call, without any tags. You may put a single "
        "comment line such as \"# Element: ...\" before it."
    ),
}

_FUNCTIONS = '''Functions (write exactly ONE action per round):

def do(action, argument, element):
    """Perform one browser operation on the page.
    Args:
        :param action: one of ["Click", "Right Click", "Type", "Search", "Hover", "Scroll Up",
            "Scroll Down", "Press Enter", "Switch Tab", "Select Dropdown Option", "Wait"].
        :param argument: optional. Only for "Type", "Search", "Switch Tab" and "Select Dropdown Option":
            the text to type, the index of the tab to switch to (counting from 0), or the option to
            choose. "Search" types the text and then presses Enter.
        :param element: optional. Required for "Click", "Right Click", "Type", "Search",
            "Select Dropdown Option" and "Hover": the id of the target element in the HTML.
    Returns:
        None. The page changes once the operation has run.
    """

def exit(message):
    """Stop browsing when the instruction is fulfilled.
    Args:
        :param message: optional. When the instruction asks a question, the answer, taken from the pages.
    Returns:
        None.
    """

def go_backward():
    """Return to the previous page."""

def go_forward():
    """Move forward to the next page."""'''

_EXAMPLE_ACTIONS = [
    ("# Element: the 'Sign in' button in the top right corner", 'do(action="Click", element="4")'),
    ("# Element: the 'Sort by' dropdown above the product list",
     'do(action="Select Dropdown Option", argument="Price", element="31")'),
    ("# Note: the order placed on 3/2/2023 cost $64.20", 'exit(message="64.20")'),
]

_RULES = {
    "thinking": [
        "Write ONLY ONE action per round; keep other candidate actions for later rounds.",
        "Only use element ids that appear in the current HTML.",
        'In the think part, describe the chosen element with "# Element: ..." and write down facts you '
        'will need for the final answer with "# Note: ...".',
        "If you keep repeating yourself without progress, try a different way.",
        'If the page still seems to be loading or animating, use the "Wait" action.',
        "Never navigate by typing into the browser's address bar.",
        "Write the action as plain text, not inside a code block.",
        '"Click", "Right Click", "Type", "Search", "Select Dropdown Option" and "Hover" always need an '
        "element.",
        "Do not refuse the instruction; work around the problems you meet.",
    ],
}
_RULES["plain"] = [r.replace("In the think part, describe", "Optionally describe") for r in _RULES["thinking"]]

_SHORT = {
    "thinking": (
        "You are a web agent. Each round shows the task and the page as simplified HTML with numbered "
        "elements. Reply <think> brief reasoning </think> <answer> one action </answer>. "
    ),
    "plain": (
        "You are a web agent. Each round shows the task and the page as simplified HTML with numbered "
        "elements. Reply with one action only. "
    ),
}
_SHORT_ACTIONS = (
    'Actions: do(action="A", argument="text", element="N") with A one of Click, Right Click, Type, '
    "Search, Hover, Scroll Up, Scroll Down, Press Enter, Switch Tab, Select Dropdown Option, Wait; "
    'exit(message="answer") when done; go_backward(); go_forward().'
)

#: The kinds ``system_prompt`` knows.
PromptKind = Literal["thinking", "plain", "short", "short_plain"]   # a flag's type in the scripts' Args
PROMPT_KINDS: tuple[str, ...] = get_args(PromptKind)


def system_prompt(kind: str = "thinking") -> str:
    """The system prompt: "thinking" (default), "plain" (Table 3 ablation), "short" / "short_plain"
    (a few hundred characters, for tiny models). ``system_prompt("short")[:30]`` -> ``'You are a web agent. Each roun'``."""
    if kind in ("short", "short_plain"):
        return _SHORT["thinking" if kind == "short" else "plain"] + _SHORT_ACTIONS
    if kind not in _FORMAT:
        raise ValueError(f"prompt kind must be one of {PROMPT_KINDS}, got {kind!r}")
    sep = "\n- " if kind == "thinking" else "\n\n"  # one-line examples; two-line ones in the plain format
    examples = sep.lstrip("\n") + sep.join(format_response(n, a, prompt=kind) for n, a in _EXAMPLE_ACTIONS)
    rules = "\n".join(f"- {r}" for r in _RULES[kind])
    return f"{_INTRO}\n\n{_FORMAT[kind]}\n\n{_FUNCTIONS}\n\nExamples:\n{examples}\n\nRemember:\n{rules}"


# ---- the response format ----

# parse_response's rules (see there): tags in any case; a <think> block ends at </think>, else at <answer>, else
# at the end; the answer runs from the first <answer> to the last </answer> (else to the end).
_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|(?=<answer>)|\Z)", re.S | re.I)
_ANSWER_RE = re.compile(r"<answer>(.*)</answer>|<answer>(.*)", re.S | re.I)
_OPEN_ANSWER_RE = re.compile(r"<answer>", re.I)
_OPEN_THINK_RE = re.compile(r"<think>", re.I)
_CLOSE_THINK_RE = re.compile(r"</think>", re.I)


def format_response(thought: str, action: str, *, prompt: str = "thinking") -> str:
    """A response in the format ``system_prompt(prompt)`` asks for: ``<think> {thought} </think> <answer>
    {action} </answer>`` (thinking, short) or ``{thought}\\n{action}`` (plain, short_plain; the thought a
    "# Element: ..." comment line, may be empty). ``action`` is env.format_action's string.
    ``format_response("# Element: the Ok button", 'do(action="Click", element="0")')``
    -> ``'<think> # Element: the Ok button </think> <answer> do(action="Click", element="0") </answer>'``."""
    if prompt not in PROMPT_KINDS:
        raise ValueError(f"prompt kind must be one of {PROMPT_KINDS}, got {prompt!r}")
    thought, action = thought.strip(), action.strip()
    if prompt in ("thinking", "short"):
        return f"<think> {thought} </think> <answer> {action} </answer>"
    return f"{thought}\n{action}" if thought else action


@dataclass(frozen=True)
class ParsedResponse:
    """A response split into its parts, e.g. ``parse_response('<think> # Element: Ok </think> <answer>
    do(action="Click", element="0") </answer>')`` ->
    ``ParsedResponse(thought='# Element: Ok', action='do(action="Click", element="0")', n_answers=1)``.
    ``action`` is the text that should hold the action, not yet parsed (env.parse_action does that)."""
    thought: str
    action: str
    n_answers: int          # <answer> tags outside the thinking; env.parse_action accepts 0 (bare action) or 1


def parse_response(response: str) -> ParsedResponse:
    """Split a response in either prompt format into thought and action text; the one place that reads the
    <think> / <answer> tags (env.parse_action, split_response and the scripts all come here).

    Rules, chosen to match the prompt ("<think> ... </think> <answer> ... </answer>", or a bare action):
    - tags in any case. A <think> block ends at </think>, else at <answer>, else at the end of the
      response: a response cut off while thinking has no action (whatever calls its thought mentions);
    - a leading </think> with no <think> before it closes a thought that the chat template opened in the
      prompt: the text before it is thought;
    - the action runs from the first <answer> to the last </answer> (else to the end), so an action may
      type the text "</answer>"; ``n_answers`` counts the <answer> tags, so that env.parse_action can
      refuse several answers;
    - without <answer>, the action is the text outside the <think> blocks;
    - untagged (plain format): leading "#" comment lines are the thought, the rest is the action;
    - both parts are stripped; the action text is otherwise left as it is.

    >>> parse_response("<think> x </think> go_backward()")
    ParsedResponse(thought='x', action='go_backward()', n_answers=0)
    >>> parse_response('<think> cut off do(action="Wait")')
    ParsedResponse(thought='cut off do(action="Wait")', action='', n_answers=0)
    """
    thoughts: list[str] = []
    close, open_ = _CLOSE_THINK_RE.search(response), _OPEN_THINK_RE.search(response)
    if close and (open_ is None or open_.start() > close.start()):
        thoughts.append(response[:close.start()])
        response = response[close.end():]
    thoughts += _THINK_RE.findall(response)
    outside = _THINK_RE.sub(" ", response)
    answer = _ANSWER_RE.search(outside)
    if answer:
        action = answer.group(1) if answer.group(1) is not None else answer.group(2)
    elif thoughts:
        action = outside
    else:                                   # plain format: "# Element: ..." comment lines, then the action
        lines = response.strip().splitlines()
        n = next((i for i, line in enumerate(lines) if not line.lstrip().startswith("#")), len(lines))
        thoughts, action = ["\n".join(lines[:n])], "\n".join(lines[n:])
    thought = "\n".join(t.strip() for t in thoughts if t.strip())
    return ParsedResponse(thought=thought, action=action.strip(), n_answers=len(_OPEN_ANSWER_RE.findall(outside)))


def split_response(response: str) -> tuple[str, str]:
    """``(thought, action text)`` of a response in either format, the inverse of ``format_response``
    (``parse_response`` without the answer count), e.g.
    ``split_response("<think> x </think> <answer> exit() </answer>") == ("x", "exit()")``."""
    parsed = parse_response(response)
    return parsed.thought, parsed.action


# ---- messages with dynamic context compression (Sec. 2.3) ----

@dataclass
class Turn:
    """One past round: the observation text shown then, the env's error shown with it, the model's full
    response. Example: ``Turn(obs='<html> <button id="0"> Ok </button> </html>', error=None,
    response='<think> # Element: the Ok button </think> <answer> do(action="Click", element="0") </answer>')``."""
    obs: str
    response: str
    error: str | None = None


def user_content(round_idx: int, obs: str, error: str | None = None, intent: str | None = None) -> str:
    """The user message of round k: ``Task Instruction: {intent}\\n\\nRound 0\\n\\n{obs}`` for k = 0,
    ``Round {k}\\n\\n{obs}`` after; an error about the previous action goes before the observation."""
    head = f"Task Instruction: {intent}\n\n" if round_idx == 0 else ""
    err = f"{ERROR_PREFIX}{error}\n\n" if error else ""
    return f"{head}Round {round_idx}\n\n{err}{obs}"


def build_messages(intent: str, turns: Sequence[Turn], obs: str, error: str | None = None, *,
                   prompt: str | None = "thinking", compress: bool = True) -> list[dict[str, str]]:
    """Chat messages for the current step: system (``prompt`` kind, None = no system message), then per past
    turn k a user message (observation k, or ``PLACEHOLDER`` when ``compress``) and the assistant response,
    then the current user message with the full observation ``obs``. Append
    ``{"role": "assistant", "content": response}`` to get a training sample for ``render_sample``."""
    messages = [] if prompt is None else [{"role": "system", "content": system_prompt(prompt)}]
    for k, turn in enumerate(turns):
        shown = PLACEHOLDER if compress else turn.obs  # Sec. 2.3: s'_k
        messages.append({"role": "user", "content": user_content(k, shown, turn.error, intent)})
        messages.append({"role": "assistant", "content": turn.response})
    messages.append({"role": "user", "content": user_content(len(turns), obs, error, intent)})
    return messages


# ---- rendering through the tokenizer's own chat template ----

_START, _END = "\U000f0000", "\U000f0001"      # private-use markers around control tokens found in messages


def _control_tokens(tokenizer) -> re.Pattern:
    """The tokenizer's control tokens as one pattern, longest first: its special added tokens plus the added tokens
    its chat template writes (transformers' rule for ``sanitize_control_tokens``)."""
    template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else str(tokenizer.chat_template)
    tokens = {t.content for t in tokenizer.added_tokens_decoder.values()
              if t.content and (t.special or (t.content in template and not t.content.isspace()))}
    return re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))) or "(?!)")


def _template_ids(tokenizer, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
    """``apply_chat_template`` -> ids, with control-token strings inside messages encoded as plain text: only the
    chat template writes control tokens, so page text can never close a turn.

    transformers 5.2x does this with ``sanitize_control_tokens``; the release vLLM accepts (5.19) predates it, so
    here is the same method in small: each control token in a message is wrapped in private-use markers (markers
    already in the text are dropped, so none can be forged), the chat is rendered to text (the template's string
    tests such as ``'</think>' in content`` still see the token), and the text is encoded piece by piece, the
    marked tokens as plain text; a lone marker (the template split a marked token) only separates pieces. A
    conversation without control-token text renders exactly as ``apply_chat_template`` renders it."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError("the tokenizer has no chat template (tokenizer.chat_template is empty)")
    controls = _control_tokens(tokenizer)
    if not any(isinstance(m.get("content"), str) and (controls.search(m["content"]) or _START in m["content"]
                                                       or _END in m["content"]) for m in messages):
        out = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                            return_dict=True)
        return list(out["input_ids"])
    marked = [{**m, "content": controls.sub(f"{_START}\\g<0>{_END}",
                                            m["content"].replace(_START, "").replace(_END, ""))}
              if isinstance(m.get("content"), str) else m for m in messages]
    text = tokenizer.apply_chat_template(marked, add_generation_prompt=generation_prompt, tokenize=False)
    pieces = re.split(f"{_START}({controls.pattern}){_END}|[{_START}{_END}]", text)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    ids = tokenizer.encode(pieces[0], add_special_tokens=False)
    for i, piece in enumerate(pieces[1:], start=1):
        if not piece:
            continue
        as_text = i % 2 == 1                          # odd pieces: marked control tokens
        got = tokenizer.encode("\n" + piece, add_special_tokens=False, split_special_tokens=as_text)
        # after a newline, so a SentencePiece tokenizer adds no word-start space to a piece mid-chat
        ids += got[len(newline):] if got[:len(newline)] == newline else \
            tokenizer.encode(piece, add_special_tokens=False, split_special_tokens=as_text)
    return ids


def render_prompt(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Prompt ids for generation: the conversation plus the template's generation prompt."""
    return _template_ids(tokenizer, messages, generation_prompt=True)


def _special_ids(tokenizer) -> set[int]:
    ids = set(tokenizer.all_special_ids)
    ids.update(i for i, t in tokenizer.added_tokens_decoder.items() if t.special)
    return ids


def _first_divergence(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def render_sample(tokenizer, messages: list[dict[str, str]], *, think_in_loss: bool = True
                  ) -> tuple[list[int], list[int]]:
    """A supervised sample: ``(input_ids, loss_mask)`` for ``messages`` ending with an assistant message; the
    mask is 1 exactly on that response's tokens (tokenized inside the full rendering) and the end-of-turn
    token after it; tokens the template adds after the end of turn (a newline) are 0. A thinking template
    whose generation prompt opens ``<think>`` renders the final message its own way (``reasoning \n</think>
    \n\n answer``): the target is that rendering, the tokens after the generation prompt.
    ``think_in_loss=False`` also zeroes the tokens up to and including ``</think>``.
    Raises ``ChatTemplateError`` when the template does not render the conversation's prefix consistently
    (string- or token-wise), loses the final response's thought or action, or does not close it with a
    special token."""
    if not messages or messages[-1].get("role") != "assistant":
        raise ValueError("render_sample needs messages ending with an assistant message")
    response = messages[-1]["content"]
    prefix = render_prompt(tokenizer, messages[:-1])
    full = _template_ids(tokenizer, messages, generation_prompt=False)
    if full[:len(prefix)] != prefix:
        i = _first_divergence(prefix, full)
        text_p = tokenizer.decode(prefix, skip_special_tokens=False)
        text_f = tokenizer.decode(full, skip_special_tokens=False)
        if text_f.startswith(text_p):
            problem = ("the token ids differ at the boundary between the generation prompt and the response "
                       "(the template's last prompt characters merge with the response's first ones)")
        else:
            problem = ("the template renders the conversation differently once the final assistant message is "
                       "added (e.g. it rewrites earlier turns, drops <think> from history, or inserts "
                       "message-count- or date-dependent text)")
        raise ChatTemplateError(
            f"chat template does not render prefixes consistently: {problem}; first difference at token {i}: "
            f"prompt ...{tokenizer.decode(prefix[max(0, i - 8):i + 8])!r} vs "
            f"full ...{tokenizer.decode(full[max(0, i - 8):i + 8])!r}")
    tail = full[len(prefix):]
    special = _special_ids(tokenizer)
    end = next((j for j, t in enumerate(tail) if t in special), None)
    if end is None:
        raise ChatTemplateError("chat template does not close the assistant message with a special "
                                f"end-of-turn token: rendered {tokenizer.decode(tail[-16:])!r}")
    shown = tokenizer.decode(tail[:end], skip_special_tokens=False).strip()
    if not _same_response(tokenizer, shown, response):
        raise ChatTemplateError(
            "chat template rewrites the final assistant message and loses part of it (e.g. it strips "
            f"<think> ... </think>): rendered {shown[:80]!r}... for response {response[:80]!r}...")
    mask = [0] * len(prefix) + [1] * (end + 1) + [0] * (len(tail) - end - 1)
    if not think_in_loss:
        n_think = _tokens_through(tokenizer, tail[:end], "</think>")
        for j in range(n_think):
            mask[len(prefix) + j] = 0
    return full, mask


def _same_response(tokenizer, shown: str, response: str) -> bool:
    """Does the template's rendering of the final assistant message (``shown``, from the end of the generation
    prompt to the end-of-turn token) carry the response? Either verbatim, or reformatted the way thinking
    templates do (the generation prompt opens ``<think>``, so the target starts inside the thought; newlines
    around the tags change): then the thought and the action it parses into must be the response's own, up to
    whitespace. The target trained on is then the template's rendering, which is what the model must produce
    after that generation prompt."""
    if shown in (response.strip(), _round_trip(tokenizer, response).strip()):
        return True
    a, b = parse_response(shown), parse_response(response)
    return (" ".join(a.thought.split()) == " ".join(b.thought.split()) and a.n_answers == b.n_answers
            and " ".join(a.action.split()) == " ".join(b.action.split()))


def _round_trip(tokenizer, text: str) -> str:
    """``text`` as the tokenizer gives it back (its normalizer, e.g. NFC, and decode clean-up applied)."""
    return tokenizer.decode(tokenizer.encode(text, add_special_tokens=False), skip_special_tokens=False)


def _tokens_through(tokenizer, ids: list[int], marker: str) -> int:
    """The fewest leading tokens of ``ids`` whose decoded text contains ``marker`` (0 if none does)."""
    if marker not in tokenizer.decode(ids, skip_special_tokens=False):
        return 0
    lo, hi = 0, len(ids)  # decode(ids[:hi]) contains the marker, decode(ids[:lo]) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if marker in tokenizer.decode(ids[:mid], skip_special_tokens=False):
            hi = mid
        else:
            lo = mid
    return hi


# ---- token-exact RL samples ----

def rl_sample(prompt_ids: Sequence[int], action_ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """The M-GRPO sample of one step: exactly the ids the policy saw and produced, never re-tokenized;
    mask 1 on the generated ids a_j (including the end-of-turn id when generation stopped on it).
    ``rl_sample([5, 6], [7, 2])`` -> ``([5, 6, 7, 2], [0, 0, 1, 1])``."""
    prompt_ids, action_ids = [int(t) for t in prompt_ids], [int(t) for t in action_ids]
    return prompt_ids + action_ids, [0] * len(prompt_ids) + [1] * len(action_ids)


# ---- length policy ----

class FittedPrompt(NamedTuple):
    """``fit_prompt``'s result: the prompt's token ids, the observation tokens cut (counted on the observation
    alone), the observation text shown (store that in the ``Turn``) and the same prompt as chat messages (for
    backends that take messages: ``policy.OpenAIBackend``)."""
    ids: list[int]
    cut: int
    shown: str
    messages: list[dict]


def fit_prompt(tokenizer, intent: str, turns: Sequence[Turn], obs: str, error: str | None = None, *,
               max_context: int = MAX_CONTEXT, max_new_tokens: int = engines.SAMPLING.max_new_tokens,
               prompt: str | None = "thinking", compress: bool = True) -> FittedPrompt:
    """The prompt for the current step such that ``len(ids) + max_new_tokens <= max_context``. Only the current
    observation is cut: its tail is dropped at a character boundary and replaced by ``TRUNCATION_MARK``.
    Raises ``ContextOverflowError`` when even an empty observation does not fit."""
    budget = max_context - max_new_tokens
    if budget <= 0:
        raise ValueError(f"max_new_tokens ({max_new_tokens}) must be below max_context ({max_context})")

    def render(shown: str) -> FittedPrompt:    # (cut filled in at the end)
        msgs = build_messages(intent, turns, shown, error, prompt=prompt, compress=compress)
        return FittedPrompt(render_prompt(tokenizer, msgs), 0, shown, msgs)

    whole = render(obs)
    if len(whole.ids) <= budget:
        return whole
    empty = render(TRUNCATION_MARK)
    if len(empty.ids) > budget:
        raise ContextOverflowError(
            f"prompt has {len(empty.ids)} tokens with the current observation emptied, more than max_context "
            f"{max_context} - max_new_tokens {max_new_tokens} = {budget} ({len(turns)} past turns, "
            f"compress={compress}); shorten the history, enable compression or raise max_context")
    # Search the number of kept characters c: render(obs[:c] + mark) fits at lo, overflows at hi.
    # Tokens grow about linearly with c, so interpolate (regula falsi); usually 1-3 renders.
    lo, n_lo, best = 0, len(empty.ids), empty
    hi, n_hi = len(obs), len(whole.ids)
    target = budget - _FIT_SLACK // 2  # aim inside the accepted band [budget - slack, budget]
    for it in range(64):
        if hi - lo <= 1 or budget - n_lo <= _FIT_SLACK:
            break
        if it < 8:
            c = lo + int((target - n_lo) * (hi - lo) / max(n_hi - n_lo, 1))
            c = min(max(c, lo + 1), hi - 1)
        else:  # interpolation stalls on very uneven text: plain bisection, O(log |obs|) more renders
            c = (lo + hi) // 2
        cand = render(obs[:c] + TRUNCATION_MARK)
        if len(cand.ids) <= budget:
            lo, n_lo, best = c, len(cand.ids), cand
        else:
            hi, n_hi = c, len(cand.ids)
    n_obs = len(tokenizer.encode(obs, add_special_tokens=False))
    n_kept = len(tokenizer.encode(obs[:lo], add_special_tokens=False)) if lo else 0
    return best._replace(cut=n_obs - n_kept)
