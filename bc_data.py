"""The demonstrations behavior cloning (train_bc.py, Eq. 1) learns from: reading them, one sample per step, and the
R1-CoT rewrite of their thoughts.

- ``load_records``: JSON or JSONL files of two formats, each record checked (``check_record`` names what is wrong):
  our demos.py trajectories (``{"task", "seed", "intent", "reward", "steps": [{"observation", "error",
  "response", "url"}]}``) and the WebRL / VisualAgentBench BC data (LLaMA-Factory sharegpt: ``{"conversations":
  [{"from": "human", "value": <full prompt>}, {"from": "gpt", "value": <action>}]}``, one step per record).
- ``records_to_steps`` / ``render_step``: every step of every demonstration becomes one sample (h_t, a_t), its
  history rendered by compress.py (dynamic context compression) and the loss mask on the action's tokens.
  WebRL's human turns carry the earlier rounds with Llama-3 control tokens written inline: they are rendered as
  WebRL's LLaMA-Factory template rendered them (``render_llama3_web``), or split into messages for any model.
- R1-CoT (Sec. 3.4, Appendix C): ``rewrite_with_cot`` asks a teacher model behind an OpenAI-compatible endpoint
  to rewrite each thought into a first-person long chain of thought, cached on disk; the action never changes.
- R1-CoT in miniature, without a teacher (demos.py ``--thoughts long``): ``long_thought`` writes one step's
  thought from what the agent sees only (the intent and the observation, whose numbered elements
  ``observed_elements`` names as a person would), then the short thought's "# Element: ..." line.
"""
from __future__ import annotations

import asyncio
import bisect
import hashlib
import html
import json
import logging
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import compress

if TYPE_CHECKING:   # annotations only: experts.py imports the long thoughts without torch (policy)
    import policy
    from env.actions import Action

log = logging.getLogger("webagent.bc")


# ---- data ----

@dataclass
class Step:
    """One (h_t, a_t) pair before rendering: ``messages`` ends with the assistant action. ``render`` says how it
    becomes token ids: "chat" through the model's chat template (``compress.render_sample``), "llama3_web" as
    WebRL's LLaMA-Factory template (``render_llama3_web``)."""
    messages: list[dict]
    source: str
    render: str = "chat"


def load_records(paths: str, names: list[str] | None = None) -> list[dict]:
    """Read JSON lists or JSONL files into one list of records; each is checked (``check_record``) and a bad
    one is reported with its file and line (or list index). ``names``, when given, receives each record's
    "file line N" / "file item N" (for messages about a record found bad later)."""
    records = []
    for path in paths.split(","):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: cannot read it ({e})") from None
        if text.lstrip().startswith("["):
            try:
                items = list(enumerate(json.loads(text)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from None
            where = "item"
        else:
            items, where = [], "line"
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        items.append((n, json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path} line {n}: not valid JSON ({e.msg} at column {e.colno})") from None
        for n, rec in items:
            problem = check_record(rec)
            if problem:
                raise ValueError(f"{path} {where} {n}: {problem}")
            records.append(rec)
            if names is not None:
                names.append(f"{path} {where} {n}")
    return records


def check_record(rec: Any) -> str | None:
    """What is wrong with a training record, or None: an experts.py trajectory (intent, steps of observation
    and response strings) or a sharegpt record (conversations / messages)."""
    if not isinstance(rec, dict):
        return f"a record must be a JSON object, not {type(rec).__name__}"
    if "steps" in rec:
        if not isinstance(rec.get("intent"), str):
            return "trajectory record without an 'intent' string"
        if not isinstance(rec["steps"], list):
            return f"'steps' must be a list of steps, not {type(rec['steps']).__name__}"
        for j, st in enumerate(rec["steps"]):
            if not isinstance(st, dict):
                return f"step {j} must be an object"
            for key in ("observation", "response"):
                if not isinstance(st.get(key), str):
                    return f"step {j} without a {key!r} string"
        return None
    conv = rec.get("conversations") or rec.get("messages")
    if not isinstance(conv, list) or not all(isinstance(m, dict) for m in conv):
        return "neither a trajectory ('intent', 'steps') nor a sharegpt record ('conversations' / 'messages' list)"
    return None


def trajectory_steps(rec: dict, prompt: str) -> list[Step]:
    """experts.py trajectory -> one Step per action, history compressed as at rollout time."""
    turns: list[compress.Turn] = []
    out = []
    for s in rec["steps"]:
        msgs = compress.build_messages(rec["intent"], turns, s["observation"], s.get("error"), prompt=prompt)
        out.append(Step(msgs + [{"role": "assistant", "content": s["response"]}], rec.get("task", "?")))
        turns.append(compress.Turn(s["observation"], s["response"], s.get("error")))
    return out


_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def sharegpt_steps(rec: dict, webrl_render: str = "verbatim", name: str | None = None) -> list[Step]:
    """WebRL / VAB / LLaMA-Factory sharegpt record -> one Step per gpt (assistant) turn, each with the
    conversation before it, as LLaMA-Factory trains every response of a multi-turn record. WebRL's own records
    have one step each, the history already inside the human turn: such a record (``has_inline_turns``) gets
    ``render="llama3_web"`` (``webrl_render="verbatim"``), or its human turns are split back into messages
    (``"split"``; only the record's own gpt turns are trained, the responses found inside a human turn are
    context, as in WebRL). ``name`` names the record in errors (default: its "id")."""
    name = name or str(rec.get("id", "sharegpt record"))
    conv = rec.get("conversations") or rec.get("messages")
    if not conv:
        raise ValueError(f"{name}: sharegpt record without 'conversations'/'messages'")
    msgs = []
    for m in conv:
        role = _ROLES.get(m.get("from", m.get("role")))
        if role is None:
            raise ValueError(f"{name}: sharegpt record: unknown role {m.get('from', m.get('role'))!r}")
        msgs.append({"role": role, "content": m.get("value", m.get("content", ""))})
    if rec.get("system") and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": rec["system"]})
    if msgs[-1]["role"] != "assistant":
        raise ValueError(f"{name}: sharegpt record must end with the gpt/assistant turn")
    if not has_inline_turns(msgs):
        return [Step(msgs[:k + 1], name) for k, m in enumerate(msgs) if m["role"] == "assistant"]
    if webrl_render == "verbatim":
        return [Step(msgs[:k + 1], name, render="llama3_web") for k, m in enumerate(msgs) if m["role"] == "assistant"]
    if webrl_render != "split":
        raise ValueError(f"webrl_render must be 'verbatim' or 'split', not {webrl_render!r}")
    out, split = [], []
    for m in msgs:
        if m["role"] == "user" and _has_markers(m["content"]):
            try:
                split += split_inline_turns(m["content"])
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
        else:
            split.append(m)
            if m["role"] == "assistant":        # the record's own gpt turn: a sample
                out.append(Step(list(split), name))
    return out


def records_to_steps(records: list[dict], prompt: str, webrl_render: str = "verbatim",
                     names: list[str] | None = None, only_successes: bool = True) -> list[Step]:
    """Every record's samples; ``names[i]`` (from ``load_records``) names record i in errors. ``only_successes``:
    an experts.py trajectory is cloned only if it succeeded (reward > 0); False clones failed ones too."""
    steps = []
    for i, rec in enumerate(records):
        if "steps" in rec:
            if rec.get("reward", 1.0) > 0 or not only_successes:
                steps += trajectory_steps(rec, prompt)
        else:
            name = names[i] if names else f"record {i}"
            if rec.get("id") is not None:
                name += f" (id {rec['id']!r})"
            steps += sharegpt_steps(rec, webrl_render, name)
    return steps


def tokenized(records: list[dict], names: list[str], tokenizer, prompt: str, *, webrl_render: str = "verbatim",
              think_in_loss: bool = True, only_successes: bool = True, max_len: int = 16384,
              flag: str = "--data", verbose: bool = True) -> tuple[list[tuple[list[int], list[int]]], int]:
    """One sample (input ids, loss mask) per step of every record (``records_to_steps``, ``render_step``), and how
    many were dropped as longer than ``max_len`` tokens. A bad record, or no sample left, exits naming ``flag``.
    Used by BC (train_bc.py) and by M-GRPO's demonstrations kept in the loss (``--demo-data``)."""
    try:
        steps = records_to_steps(records, prompt, webrl_render, names, only_successes)
        webrl = [st for st in steps if st.render == "llama3_web"]
        if webrl:   # before any rendering: the first such record is named
            check_llama3_tokens(tokenizer, webrl[0].source)
        rendered = [render_step(tokenizer, st, think_in_loss=think_in_loss) for st in steps]
    except ValueError as e:   # (WebRLFormatError is one)
        raise SystemExit(f"{flag}: {e}") from None
    if webrl and verbose:
        log.info("%d samples from WebRL-format records rendered as WebRL's LLaMA-Factory llama3_web template "
                 "(not the model's chat template)", len(webrl))
    samples = [(ids, mask) for ids, mask in rendered if len(ids) <= max_len]
    if not samples:
        raise SystemExit(f"{flag}: no training samples (dropped {len(rendered)} longer than {max_len})")
    return samples, len(rendered) - len(samples)


def draw(samples: list, index: int, size: int, world: int, rank: int, seed: int) -> list:
    """Micro-batch number ``index`` of this rank: ``size`` samples of a fresh permutation per epoch (seeded by
    ``seed`` and the epoch), sharded by rank: a function of its arguments, so a resumed run draws the same."""
    per_epoch = len(samples) // (size * world) or 1
    epoch, k = divmod(index, per_epoch)
    order = list(range(len(samples)))
    random.Random(seed * 100003 + epoch).shuffle(order)
    start = (k * world + rank) * size
    return [samples[order[(start + i) % len(order)]] for i in range(size)]


# ---- WebRL's BC data: chat-template turns written inline into one human turn ----
#
# THUDM/WebRL scripts/process_data.py (format_prompt) and VisualAgentBench's WebRLPromptConstructor
# (VAB-WebArena-Lite/new/prompt_constructor.py) write the whole history into ONE human turn, Llama-3 control
# tokens as text:
#   Task Instruction: {intent}\n\n
#   Round 0\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n{obs}\n\n
#   <|eot_id|><|start_header_id|>assistant<|end_header_id|>\n{response}\n\n
#   Round 1\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n{obs}\n\n
#   <|eot_id|><|start_header_id|>assistant<|end_header_id|>\n            <- the gpt turn follows
# WebRL trained on it with LLaMA-Factory (LLaMA-Factory/examples/train_full/llama3_full_policy_web.yaml:
# "template: llama3_web", dataset web_policy_sft = sharegpt "conversations"), whose llama3_web template
# (WebRL's LLaMA-Factory/src/llamafactory/data/template.py) is
#   format_user=StringFormatter(slots=["{{content}}"])               <- the human turn verbatim, no header
#   format_system=StringFormatter(slots=["<|start_header_id|>system<|end_header_id|>\n\n{{content}}<|eot_id|>"])
#   format_prefix=EmptyFormatter(slots=[{"bos_token"}]), stop_words=["<|eot_id|>"], replace_eos=True
# with the default assistant slots ["{{content}}", {"eos_token"}] (eos replaced by <|eot_id|>), each slot
# tokenized on its own (``_convert_elements_to_ids``: ``tokenizer.encode(elem, add_special_tokens=False)``), and
# special tokens in text are parsed as such (LLaMA-Factory's ``split_special_tokens`` defaults to False). The
# supervised processor (data/processors/supervised.py) masks each prompt and trains each response
# (``labels += source_mask + target_ids``), so the inline responses, being prompt text, are not trained.
#
# Hence WebRL's sample is  <|begin_of_text|> [system slot] enc(human) | enc(gpt) <|eot_id|>  with the loss on
# the part after "|". That is reproduced token for token by rendering the record verbatim (``render_llama3_web``)
# with a tokenizer that has the Llama-3 special tokens. Splitting the human turn into messages and rendering them
# through a Llama-3 chat template can NOT give those ids: Meta's template writes "<|end_header_id|>\n\n" (WebRL:
# one "\n"), trims contents (WebRL keeps "\n\n" before each <|eot_id|>), and puts every text under a header
# (WebRL's "Task Instruction: ..." follows <|begin_of_text|> directly). So "verbatim" is the default; "split"
# (``split_inline_turns``) is the explicit choice for a model without those tokens (e.g. Qwen2.5), where
# verbatim would train the markers as plain text: that case is refused with the record's name, never silent.

#: Llama-3 control tokens that WebRL writes as text into its human turns.
LLAMA3_MARKERS = ("<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>")
WebRLRender = Literal["verbatim", "split"]
_INLINE_TURN = re.compile(r"<\|eot_id\|><\|start_header_id\|>(\w+)<\|end_header_id\|>\n")
_ROUND_TAIL = re.compile(r"\n\n(Round \d+\n\n)\Z")


def _has_markers(text: str) -> bool:
    return any(t in text for t in LLAMA3_MARKERS)


def has_inline_turns(messages: list[dict]) -> bool:
    """Does a human (user) turn write chat-template turns inline (WebRL's BC data)?"""
    return any(m["role"] == "user" and _has_markers(m["content"]) for m in messages)


class WebRLFormatError(ValueError):
    """A WebRL-format record cannot be rendered as WebRL trained on it (the tokenizer lacks the Llama-3 tokens)."""


def check_llama3_tokens(tokenizer, name: str) -> None:
    """Raise ``WebRLFormatError`` naming record ``name`` unless each of ``LLAMA3_MARKERS`` written in text
    tokenizes to its one special token, as in WebRL's training."""
    bad = []
    for t in LLAMA3_MARKERS:
        tid = tokenizer.convert_tokens_to_ids(t)
        if tid is None or tid == tokenizer.unk_token_id or tokenizer.encode(t, add_special_tokens=False) != [tid]:
            bad.append(t)
    if bad:
        raise WebRLFormatError(
            f"{name}: its human turn writes Llama-3 chat-template tokens inline (WebRL's BC format), which WebRL "
            f"trained as Llama-3 special tokens, but this tokenizer ({type(tokenizer).__name__}, "
            f"{getattr(tokenizer, 'name_or_path', '') or 'unnamed'}) does not tokenize {', '.join(bad)} as one "
            "special token each: they would be trained as plain text. Use a Llama-3 tokenizer, or "
            "--webrl-render split to rebuild the turns as messages rendered by this model's chat template.")


def render_llama3_web(tokenizer, messages: list[dict], *, name: str = "record", think_in_loss: bool = True
                      ) -> tuple[list[int], list[int]]:
    """``(input_ids, loss_mask)`` of a sharegpt conversation as WebRL's LLaMA-Factory ``llama3_web`` template
    rendered it (see the comment above): bos, the system slot if any, each user content verbatim (inline
    special-token strings become the special tokens), each assistant content followed by <|eot_id|>, every
    piece tokenized on its own. The loss covers the final assistant content and its <|eot_id|>; earlier
    assistant turns are samples of their own (``sharegpt_steps``). ``think_in_loss=False`` also zeroes the
    tokens through ``</think>``. The model's own chat template is not used."""
    check_llama3_tokens(tokenizer, name)
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError(f"{name}: a sample must end with the gpt/assistant turn")

    def enc(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False) if text else []

    eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
    ids = [] if tokenizer.bos_token_id is None else [tokenizer.bos_token_id]
    turns = messages
    if messages[0]["role"] == "system":
        turns = messages[1:]
        if messages[0]["content"]:
            ids += enc("<|start_header_id|>system<|end_header_id|>\n\n" + messages[0]["content"] + "<|eot_id|>")
    mask = [0] * len(ids)
    for k, m in enumerate(turns):
        if m["role"] != ("user" if k % 2 == 0 else "assistant"):
            raise ValueError(f"{name}: turns must alternate human, gpt, ... (LLaMA-Factory drops the record "
                             f"otherwise); turn {k} is {m['role']!r}")
        if m["role"] == "user":
            piece = enc(m["content"])
            mask += [0] * len(piece)
        else:
            piece = enc(m["content"]) + [eot]
            last = k == len(turns) - 1
            mask += [int(last)] * len(piece)
            if last and not think_in_loss:
                n = compress._tokens_through(tokenizer, piece[:-1], "</think>")
                mask[len(ids):len(ids) + n] = [0] * n
        ids += piece
    return ids, mask


def split_inline_turns(text: str) -> list[dict]:
    """A WebRL human turn -> the messages it embeds: user, assistant, ..., user (the gpt turn follows it).
    WebRL writes "Round k\\n\\n" before the <|eot_id|> that closes the previous turn; it is moved to the user
    turn it numbers, so the user turns read "Task Instruction: {intent}\\n\\nRound 0\\n\\n{obs}" and
    "Round k\\n\\n{obs}" (the paper's prompt turns), and the "\\n\\n" WebRL writes before each <|eot_id|> is
    dropped. Raises ValueError when the text is not in that layout."""
    parts = _INLINE_TURN.split(text)
    roles, bodies = parts[1::2], parts[2::2]
    if not roles or roles[-1] != "assistant" or bodies[-1].strip():
        raise ValueError("the human turn writes chat-template tokens inline but does not end with "
                         "'<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n' (WebRL's layout); "
                         "--webrl-render verbatim renders it as it is")
    out, carry = [], parts[0]
    for k, (role, body) in enumerate(zip(roles[:-1], bodies[:-1])):
        if role != ("user" if k % 2 == 0 else "assistant"):
            raise ValueError(f"inline turn {k} is {role!r}: WebRL's layout alternates user and assistant, "
                             "from a user turn; --webrl-render verbatim renders it as it is")
        body = body[:-2] if body.endswith("\n\n") else body
        if role == "user":
            out.append({"role": "user", "content": carry + body})
            carry = ""
        else:
            m = _ROUND_TAIL.search(body + "\n\n")
            if m:
                body, carry = body[:m.start()], m.group(1)
            out.append({"role": "assistant", "content": body})
    if not out or out[-1]["role"] != "user":
        raise ValueError("the inline turns do not end with a user turn before the assistant header")
    return out


def render_step(tokenizer, step: Step, *, think_in_loss: bool = True) -> tuple[list[int], list[int]]:
    """A Step's ``(input_ids, loss_mask)``: WebRL's rendering for ``render="llama3_web"``, else the model's
    chat template (``compress.render_sample``)."""
    if step.render == "llama3_web":
        return render_llama3_web(tokenizer, step.messages, name=step.source, think_in_loss=think_in_loss)
    return compress.render_sample(tokenizer, step.messages, think_in_loss=think_in_loss)


# ---- R1-CoT: long chain-of-thought rewrite (Appendix C) ----

COT_PROMPT = """You explain what a web agent was thinking. The agent helps a user by acting on a web page.
You get the user's intent, the actions the agent took so far, the current simplified HTML of the page, and
the agent's next action with its short remark. Explain, in the first person and as if deciding right now,
why this next action is the right one: what the agent sees on the page, what it has done, what is left,
and which element it picks and why. Do not propose a different action.

User intent: {intent}

Action history: {history}

Current observation: {observation}

Next action: {action}
Remarks: {remark}

Now explain the agent's thinking in the first person."""


def cot_requests(records: list[dict]) -> list[tuple[dict, int, str]]:
    """(record, step index, teacher prompt) for every step of every experts.py trajectory."""
    out = []
    for rec in records:
        if "steps" not in rec:
            continue
        history = []
        for j, s in enumerate(rec["steps"]):
            remark, action = compress.split_response(s["response"])
            prompt = COT_PROMPT.format(intent=rec["intent"], history=json.dumps(history),
                                       observation=s["observation"], action=action, remark=remark)
            out.append((rec, j, prompt))
            history.append({"round": str(j), "observation": compress.PLACEHOLDER, "remarks": remark,
                            "action": action})
    return out


async def rewrite_with_cot(records: list[dict], teacher: policy.OpenAIBackend, cache_path: str,
                           concurrency: int) -> dict[str, int]:
    """Replace each step's thought by the teacher's first-person chain of thought, in place.

    The cache maps sha256(teacher model + prompt) -> answer; cached prompts are not sent again. A failed or
    empty answer keeps the original thought and counts as a failure (not cached, so a rerun retries it).
    """
    model = teacher.model
    cache_file = Path(cache_path)
    cache: dict[str, str] = {}
    if cache_file.exists():
        for line in cache_file.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                cache[row["key"]] = row["answer"]
    sem = asyncio.Semaphore(concurrency)
    counts = {"cot/requests": 0, "cot/cached": 0, "cot/failures": 0}
    cache_file.parent.mkdir(parents=True, exist_ok=True)

    async def one(rec: dict, j: int, prompt: str) -> None:
        key = hashlib.sha256((model + "\0" + prompt).encode()).hexdigest()
        answer = cache.get(key)
        if answer is not None:
            counts["cot/cached"] += 1
        else:
            async with sem:
                counts["cot/requests"] += 1
                gen = await teacher.generate([], messages=[{"role": "user", "content": prompt}])
            answer = gen.text.strip()
            if not answer:
                counts["cot/failures"] += 1
                log.warning("CoT teacher failed for %s step %d (%s): original thought kept",
                            rec.get("task"), j, gen.finish_reason)
                return
            cache[key] = answer
            with cache_file.open("a") as f:
                f.write(json.dumps({"key": key, "answer": answer}) + "\n")
        _, action = compress.split_response(rec["steps"][j]["response"])
        rec["steps"][j]["response"] = compress.format_response(answer, action)

    await asyncio.gather(*(one(*r) for r in cot_requests(records)))
    return counts


# ---- long thoughts without a teacher: R1-CoT in miniature (demos.py --thoughts long) ----

_ELEMENT_RE = re.compile(r'<(\w+) id="(\d+)"([^>]*)>([^<]*)')      # a numbered element, its attributes, its text
_ATTR_RE = re.compile(r'([\w-]+)="([^"]*)"')
_KINDS = {"a": "link", "button": "button", "select": "dropdown", "textarea": "text area", "li": "list item",
          "option": "option", "img": "image", "label": "label"}
_DQ, _SQ = '"', "'"   # element texts are quoted in "...": their own double quotes become single ones
_INPUT_KINDS = {"checkbox": "checkbox", "radio": "radio button", "password": "password field",
                "submit": "button", "button": "button", "date": "date field"}


def _clean(text: str, limit: int = 60) -> str:
    """One line of page or intent text to quote in a thought: unescaped, spaces collapsed, no tags, at most
    ``limit`` chars."""
    text = " ".join(html.unescape(text).replace("<", " ").replace(">", " ").split())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def observed_elements(obs_text: str) -> dict[int, str]:
    """The numbered elements of an observation, described as a person would name them: id -> 'button 2
    "Submit"', 'text field 0 (after "Username")', 'span 8 (class "trash", after "Glen")'. The text is the
    element's own text, else its title / placeholder / value, else its class hint and the page text just
    before it (an input's label, the row of an icon)."""
    texts = [(t.end(1), t.group(1)) for t in re.finditer(r">([^<>]*[^\s<>][^<>]*)(?=<)", obs_text)]   # (end, page text)
    ends = [end for end, _ in texts]
    out = {}
    for m in _ELEMENT_RE.finditer(obs_text):
        tag, el, attrs = m.group(1).lower(), int(m.group(2)), dict(_ATTR_RE.findall(m.group(3)))
        kind = _INPUT_KINDS.get(attrs.get("type", ""), "text field") if tag == "input" else _KINDS.get(tag, tag)
        text = _clean(m.group(4)) or next((_clean(attrs[a]) for a in ("title", "placeholder", "value", "data-text")
                                           if _clean(attrs.get(a, ""))), "")
        before = bisect.bisect_right(ends, m.start()) - 1                 # the last page text before it
        near = _clean(texts[before][1], 200).replace(_DQ, _SQ) if before >= 0 else ""
        if len(near) > 40:                  # the words just before it
            near = "..." + near[-40:].split(" ", 1)[-1]
        if text:
            out[el] = f'{kind} {el} "{text.replace(_DQ, _SQ)}"'
        elif attrs.get("class"):            # env's hint for a text-less control (an icon)
            out[el] = f'{kind} {el} (class "{_clean(attrs["class"])}"' + (f', after "{near}")' if near else ")")
        else:
            out[el] = f'{kind} {el} (after "{near}")' if near else f"{kind} {el}"
    return out


def _action_words(action: Action) -> str:
    arg = _clean(action.argument or "", 80)
    el = f"element {action.element}"
    return {"Click": f"click {el}", "Right Click": f"right-click {el}", "Hover": f"hover over {el}",
            "Type": f'type "{arg}" into {el}', "Search": f'search for "{arg}" in {el}',
            "Select Dropdown Option": f'choose the option "{arg}" in {el}',
            "Scroll Up": "scroll up", "Scroll Down": "scroll down", "Wait": "wait for the page",
            "Press Enter": "press Enter", "Switch Tab": f'switch to tab "{arg}"',
            "exit": f'finish with the answer "{_clean(action.message or "", 80)}"' if action.message else "finish",
            "go_backward": "go back", "go_forward": "go forward"}[action.name]


def long_thought(intent: str, obs_text: str, action: Action, what: str, key: str) -> str:
    """A long first-person thought for one demonstration step, from what the agent sees only (the intent and
    the observation text): it restates the goal, names 2-4 other elements of the observation it considered,
    quotes the text that decides the target ``action.element`` (or says why no element is needed), names
    the action, and ends with the short thought's line "# Element: {what}". Phrasing and candidates are
    drawn from ``random.Random(key)`` (key = task id / seed / step), so a demonstration is reproducible."""
    rng = random.Random(key)
    elements = observed_elements(obs_text)
    target = None if action.element is None else elements.get(action.element, f"element {action.element}")
    goal = _clean(intent, 300).rstrip(".")
    parts = [rng.choice(["Okay, let me restate the goal: {}.", "The task asks me to: {}.",
                         "So the user wants this: {}.", "Let me think about what I need to do. The goal is: {}."]
                        ).format(goal)]
    others = [el for el in elements if el != action.element]
    if others:
        seen = [elements[el] for el in sorted(rng.sample(others, min(len(others), rng.randint(2, 4))))]
        seen_text = ", ".join(seen[:-1]) + (" and " if len(seen) > 1 else "") + seen[-1]
        parts.append(rng.choice(["Looking at the page, I can see {}.", "On the page there are {}, among others.",
                                 "The elements I considered include {}."]).format(seen_text))
    if target is not None:
        words = re.findall(r'"([^"]+)"', target)
        text = words[0].rstrip(".") if words else ""
        deciding = text if text and re.search(rf"(?<!\w){re.escape(text)}(?!\w)", intent, re.I) else ""
        if deciding:
            parts.append(rng.choice([f'The task mentions "{deciding}", and {target} is {what}, so it is the one.',
                                     f'{target[0].upper() + target[1:]} carries "{deciding}", the text the task '
                                     f"names: it is {what}."]))
        elif action.argument and _clean(action.argument, 80).lower() in intent.lower():
            parts.append(f'The task gives the value "{_clean(action.argument, 80)}", and {target} is {what}, '
                         "where it belongs.")
        else:
            parts.append(f"{target[0].upper() + target[1:]} is {what}, which is what the task needs at this point.")
    else:
        reason = re.sub(r"^none( yet)?;\s*", "", what)
        parts.append(rng.choice(["No element needs acting on right now: {}.", "I do not need any of them now: {}."]
                                ).format(reason.rstrip(".")))
    parts.append(rng.choice(["So I will {}.", "Therefore, I should {}.", "My next action: {}."]
                            ).format(_action_words(action)))
    return " ".join(parts) + f"\n# Element: {what}"
