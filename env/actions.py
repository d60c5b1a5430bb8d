"""The action grammar: what one action of the agent is, how it is read from a model response and written back.
No browser here: execute.py runs the Action that ``parse_action`` returns, experts.py writes its actions with
``format_action``, compress.py's prompt lists the same 11 action names (Table 6 of the paper).

- ``parse_action(text) -> Action``: a whole response (the action region comes from compress.parse_response:
  the <answer> block, else the text outside the thinking) or a bare action. A small tokenizer for ONE
  python-style call (``do(...)``, ``exit(...)``, ``go_backward()``, ``go_forward()``); model text is never
  handed to Python's eval. A response that is not one valid action raises ``ActionParseError``, whose message
  is shown to the agent. Numbers are bounded (``_MAX_NUMBER_DIGITS``): element ids and tab indexes are small integers.
- ``format_action(action)``: the canonical string, ``parse_action(format_action(a)) == a``.
- ``ACTION_NAMES``, ``NEEDS_ELEMENT``, ``NEEDS_ARGUMENT``, ``OPTIONAL_ELEMENT``: the action space and what
  each action takes.

Departures from the paper's reference parser: Right Click, Switch Tab, Wait, bare go_backward()/go_forward()
and exit(message=...) are all accepted; keyword or positional arguments, either quote style, a "# Element:"
comment line before the call and a code fence around it are read as the prompt's examples write them.

    .venv/bin/python -c 'import env; print(env.parse_action("<answer> exit(message=\"42\") </answer>"))'
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from compress import parse_response   # the response format (<think> / <answer>) lives in compress.py


@dataclass(frozen=True)
class Action:
    """A parsed action. ``name`` is one of ACTION_NAMES, ``exit``, ``go_backward`` or ``go_forward``, e.g.
    ``Action("Type", element=12, argument="hello")``, ``Action("exit", message="42")``."""
    name: str
    element: int | None = None
    argument: str | None = None
    message: str | None = None


class ActionParseError(ValueError):
    """A model response that is not one valid action; its message is shown to the agent."""


# ---- action space (Table 6: the paper's system prompt) ----

ACTION_NAMES: tuple[str, ...] = (
    "Click", "Right Click", "Type", "Search", "Hover", "Scroll Up", "Scroll Down", "Press Enter",
    "Switch Tab", "Select Dropdown Option", "Wait",
)
NEEDS_ELEMENT = frozenset({"Click", "Right Click", "Type", "Search", "Select Dropdown Option", "Hover"})
NEEDS_ARGUMENT = frozenset({"Type", "Search", "Switch Tab", "Select Dropdown Option"})
# element is optional for these (Scroll inside a scrollable element, press Enter on an element)
OPTIONAL_ELEMENT = frozenset({"Scroll Up", "Scroll Down", "Press Enter"})
_FUNCTIONS = {"do": ("action", "argument", "element"), "exit": ("message",), "go_backward": (), "go_forward": ()}
_EXAMPLE = 'do(action="Click", element="3")'


def _action_key(name: str) -> str:
    return re.sub(r"[\s_\-]+", " ", name.strip()).lower()


_ACTION_BY_KEY = {_action_key(n): n for n in ACTION_NAMES}


# ---- action parsing: a small tokenizer for one python-style call, never eval ----

_CALL_RE = re.compile(r"(?<![\w.])(do|exit|go_backward|go_forward)\s*\(")
_ANY_CALL_RE = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*$", re.M)
_NUMBER_RE = re.compile(r"[-+]?\d+(?:\.\d+)?")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}


def _action_region(text: str) -> str:
    """The part of a model response that should hold the action (compress.parse_response: the <answer>
    block, else the text outside the thinking); code fences are dropped. Several <answer> blocks are an error."""
    parsed = parse_response(text)
    if parsed.n_answers > 1:
        raise ActionParseError("more than one <answer> block; give exactly one action in one <answer> block")
    return _FENCE_RE.sub(" ", parsed.action)


_COMMENT_LINE_RE = re.compile(r"^[^\S\n]*#[^\n]*", re.M)
_MAX_NUMBER_DIGITS = 30        # element ids and numbers are short; Python refuses int() beyond 4,300 digits


def _small_int(digits: str, what: str) -> int:
    """The one conversion of model-written digits to a number (element ids, tab indexes): ASCII digits only,
    at most _MAX_NUMBER_DIGITS of them, else an ActionParseError for the agent (not Python's ValueError)."""
    if len(digits) > _MAX_NUMBER_DIGITS:
        raise ActionParseError(f"a number of {len(digits)} digits for {what}; ids and indexes are small integers")
    if not re.fullmatch(r"[0-9]+", digits):
        raise ActionParseError(f"{what} must be a non-negative integer, got {digits!r}")
    return int(digits)


def _first_call(text: str, start: int = 0, pattern: re.Pattern = _CALL_RE) -> re.Match | None:
    """The first match of ``pattern`` (a function call) from ``start`` that is not on a "#" comment line, or
    None. Linear in the text: comment lines are skipped as they come (model text can be megabytes)."""
    comments = _COMMENT_LINE_RE.finditer(text, text.rfind("\n", 0, start) + 1)   # from start's line
    comment = next(comments, None)
    for m in pattern.finditer(text, start):
        while comment is not None and comment.end() < m.start():
            comment = next(comments, None)
        if comment is None or m.start() < comment.start():
            return m
    return None


# what ends a run of plain characters inside a string of each quote kind (a newline ends a one-quote string)
_STRING_STOP = {q: re.compile(r"\\|" + re.escape(q) + (r"|\n" if len(q) == 1 else "")) for q in ('"', "'", '"""', "'''")}


def _read_string(s: str, i: int) -> tuple[str, int]:
    """Read a quoted string starting at s[i] (', ", ''' or \"\"\"); returns (value, index after it). Runs of
    plain characters are copied in one slice, so a megabyte-long string costs milliseconds."""
    quote = s[i] * 3 if s.startswith(s[i] * 3, i) else s[i]
    stop = _STRING_STOP[quote]
    i += len(quote)
    out: list[str] = []
    while (m := stop.search(s, i)) is not None:
        out.append(s[i:m.start()])
        i = m.end()
        if m.group(0) == quote:
            return "".join(out), i
        if m.group(0) == "\n":
            raise ActionParseError("a quoted string is not closed before the end of the line")
        nxt = s[i:i + 1]                        # after a backslash: an escape of the next character
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 1
        elif nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 1:i + 5]):
            out.append(chr(int(s[i + 1:i + 5], 16)))
            i += 5
        elif nxt == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", s[i + 1:i + 3]):
            out.append(chr(int(s[i + 1:i + 3], 16)))
            i += 3
        else:                                   # unknown escape (or a final backslash): verbatim, as Python does
            out.append("\\" + nxt)
            i += len(nxt)
    raise ActionParseError("a quoted string is not closed")


def _read_value(s: str, i: int, what: str) -> tuple[Any, int]:
    """A value: a quoted string, an integer (or decimal), or None."""
    if i >= len(s):
        raise ActionParseError(f"missing value for {what}")
    c = s[i]
    if c in "\"'":
        return _read_string(s, i)
    m = _NUMBER_RE.match(s, i)
    if m:
        tok = m.group(0)
        sign, digits = (tok[0], tok[1:]) if tok[0] in "+-" else ("", tok)
        if "." not in digits:
            return (-1 if sign == "-" else 1) * _small_int(digits, what), m.end()
        if len(tok) > _MAX_NUMBER_DIGITS:
            raise ActionParseError(f"a number of {len(tok)} digits for {what}; ids and indexes are small integers")
        return float(tok), m.end()
    m = _IDENT_RE.match(s, i)
    if m and m.group(0) == "None":
        return None, m.end()
    if m:
        raise ActionParseError(f"unexpected name {m.group(0)!r} for {what}; put text in quotes")
    raise ActionParseError(f"unexpected character {c!r} for {what}")


def _skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i].isspace():
        i += 1
    return i


def _read_args(s: str, i: int, func: str) -> tuple[list[Any], dict[str, Any], int]:
    """Read the argument list after the '(' at s[i-1]: positional then keyword arguments, until ')'.
    A missing final ')' is accepted at the end of the text."""
    pos: list[Any] = []
    kw: dict[str, Any] = {}
    while True:
        i = _skip_ws(s, i)
        if i >= len(s):
            return pos, kw, i                      # lenient: missing final ')'
        if s[i] == ")":
            return pos, kw, i + 1
        m = _IDENT_RE.match(s, i)
        j = _skip_ws(s, m.end()) if m else i
        if m and j < len(s) and s[j] == "=" and not s.startswith("==", j):
            name = m.group(0)
            if name in kw:
                raise ActionParseError(f"argument {name!r} given twice in {func}()")
            value, i = _read_value(s, _skip_ws(s, j + 1), f"{name}=")
            kw[name] = value
        else:
            if kw:
                raise ActionParseError(f"a positional argument follows a keyword argument in {func}()")
            value, i = _read_value(s, i, f"argument {len(pos) + 1} of {func}()")
            pos.append(value)
        i = _skip_ws(s, i)
        if i >= len(s):
            return pos, kw, i
        if s[i] == ",":
            i += 1
        elif s[i] != ")":
            raise ActionParseError(f"expected ',' or ')' in {func}() but found {s[i]!r}")


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def _as_element(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str):
        v = value.strip()
        if v.startswith("[") and v.endswith("]"):   # lenient: element="[7]"
            v = v[1:-1].strip()
        if re.fullmatch(r"[0-9]+", v):
            return _small_int(v, "element")
        shown = value if len(value) <= 40 else f"{value[:20]}...({len(value)} characters)"
        raise ActionParseError(f"element must be the integer id of an element in the HTML, got {shown!r}")
    if isinstance(value, int) and value >= 0:
        return value
    raise ActionParseError(f"element must be a non-negative integer id, got {value!r}")


def _build_action(func: str, pos: list[Any], kw: dict[str, Any]) -> Action:
    params = _FUNCTIONS[func]
    if len(pos) > len(params):
        raise ActionParseError(f"{func}() takes {len(params)} argument(s) ({', '.join(params) or 'none'}), "
                               f"got {len(pos)} positional")
    args = dict(zip(params, pos))
    for name, value in kw.items():
        if name not in params:
            expected = ", ".join(params) if params else "no arguments"
            raise ActionParseError(f"unknown argument {name!r} for {func}(); expected {expected}")
        if name in args:
            raise ActionParseError(f"argument {name!r} given twice in {func}()")
        args[name] = value
    if func in ("go_backward", "go_forward"):
        return Action(func)
    if func == "exit":
        return Action("exit", message=_as_text(args.get("message")))
    # do(action, argument, element)
    raw = args.get("action")
    if raw is None:
        raise ActionParseError(f"do() needs action=..., one of {', '.join(ACTION_NAMES)}")
    if not isinstance(raw, str):
        raise ActionParseError(f"action must be a quoted name, one of {', '.join(ACTION_NAMES)}")
    name = _ACTION_BY_KEY.get(_action_key(raw))
    if name is None:
        raise ActionParseError(f"unknown action {raw!r}; use one of {', '.join(ACTION_NAMES)}")
    element = _as_element(args.get("element"))
    argument = _as_text(args.get("argument"))
    if name in NEEDS_ELEMENT and element is None:
        raise ActionParseError(f'action "{name}" needs element="<id>" (an id from the HTML)')
    if name in NEEDS_ARGUMENT and argument is None:
        what = {"Switch Tab": "the tab index (from 0)", "Select Dropdown Option": "the option text"}
        raise ActionParseError(f'action "{name}" needs argument="..." ({what.get(name, "the text to type")})')
    if name == "Switch Tab":
        index = (argument or "").strip()
        if not re.fullmatch(r"[0-9]+", index):
            shown = index if len(index) <= 40 else f"{index[:20]}...({len(index)} characters)"
            raise ActionParseError(f"Switch Tab needs the tab index as argument (0, 1, ...), got {shown!r}")
        argument = str(_small_int(index, "Switch Tab's tab index"))
    if name not in NEEDS_ELEMENT and name not in OPTIONAL_ELEMENT:
        element = None                              # ignored by this action: drop it (canonical form)
    if name not in NEEDS_ARGUMENT:
        argument = None
    return Action(name, element=element, argument=argument)


def parse_action(text: str) -> Action:
    """Parse a model response (``<think>..</think><answer>ACTION</answer>`` or a bare ACTION) into an Action.

    >>> parse_action('<think># Element: the Ok button</think><answer>do(action="Click", element="7")</answer>')
    Action(name='Click', element=7, argument=None, message=None)

    Lenient where the intent is unambiguous (quotes, int or string element, keyword order, a missing final
    ')', whitespace, code fences, surrounding prose or ``#`` comments, action names in any case); strict
    elsewhere. Raises ActionParseError with a message meant for the agent. Never evaluates the text."""
    if not isinstance(text, str):
        raise ActionParseError("the response is not text")
    region = _action_region(text)
    if not region.strip():
        what = "no action found after the thinking" if text.strip() else "empty response"
        raise ActionParseError(f"{what}; answer with exactly one action, e.g. <answer>{_EXAMPLE}</answer>")
    first = _first_call(region)
    if first is None:
        other = _first_call(region, pattern=_ANY_CALL_RE)
        hint = f"unknown function {other.group(1)}(); " if other else "no action found; "
        raise ActionParseError(hint + f"use do(...), exit(message=...), go_backward() or go_forward(), e.g. {_EXAMPLE}")
    func = first.group(1)
    pos, kw, end = _read_args(region, first.end(), func)
    if _first_call(region, end):
        raise ActionParseError("more than one action; give ONLY ONE action per round")
    return _build_action(func, pos, kw)


def _quote(s: str) -> str:
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return f'"{s}"'


def format_action(action: Action) -> str:
    """Canonical string of an action; ``parse_action(format_action(a)) == a``.

    >>> format_action(Action("Type", element=3, argument="hi"))
    'do(action="Type", argument="hi", element="3")'"""
    if action.name == "exit":
        return "exit()" if action.message is None else f"exit(message={_quote(action.message)})"
    if action.name in ("go_backward", "go_forward"):
        return f"{action.name}()"
    parts = [f"action={_quote(action.name)}"]
    if action.argument is not None:
        parts.append(f"argument={_quote(action.argument)}")
    if action.element is not None:
        parts.append(f'element="{action.element}"')
    return f"do({', '.join(parts)})"
