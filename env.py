"""Web environment for WebAgent-R1: a Playwright browser pool, MiniWoB++ and WebArena tasks,
simplified-HTML observations, the paper's action space (Table 6), and rule-based binary rewards.

What it implements
- ``BrowserPool``: one headless Chromium (async Playwright), many isolated contexts (own cookies and
  storage). Browser: $WEBAGENT_CHROMIUM, else Playwright's bundled Chromium when installed, else a system
  one (chromium / chromium-browser on PATH, /usr/bin/chromium). Relaunched when it dies.
- ``WebEnv.reset(task) / step(response)``: ``step`` takes the model's whole reply, parses ONE action
  (``parse_action``, a real tokenizer, never eval), executes it, and returns s_{t+1}, the binary reward
  and info (action, parse_error, error, done_reason, blocked_requests, raw_reward, counters).
- Tasks: ``load_tasks("miniwob:click-button,login-user" | "miniwob:all" | "<webarena config>.json")``;
  ``MINIWOB_UNSOLVABLE`` lists the package's tasks this action space + text observation cannot solve.
- Task families (``TaskFamily``; ``MiniWoBFamily``, ``WebArenaFamily``, ``register_family`` for more): how
  a kind of task loads, sets up its context, starts an episode, reports its status and scores exit();
  WebEnv asks ``Task.family``'s family and never branches on the site.
- Observation s_t: simplified HTML of the current viewport (``<tag id="N" attr="v"> text </tag>``),
  interactive elements numbered from 0 and stamped in the page as ``data-webagent-id``; one
  ``page.evaluate`` (EXTRACT_JS, which also returns the family's ``status_js`` value). ``max_obs_chars``
  (default MAX_OBS_CHARS) truncates it (never the intent) and says so.
- Reward: binary, from the family. MiniWoB: the page's raw reward > 0 when the page ends the episode
  (``exit()`` before that scores 0); WebArena: the rubric ``evaluate`` (string_match / url_match /
  program_html) on exit().
- Security: a context reaches only its task's origins (host:port). The request and WebSocket routers abort
  other requests and count them (info["blocked_requests"], by kind in info["blocked_kinds"]); every
  connection goes through this process's SandboxProxy (SOCKS5), which refuses any other host:port before
  resolving or connecting (redirect hops, workers, preconnects included); Chromium resolves no name itself;
  WebRTC is removed; downloads and service workers are off. The program_html scoring context obeys the same.
- Faults: a crashed page, a closed context or a dead browser ends the episode (done_reason "crash", a
  reason in info); the next reset works (fresh context, browser relaunched).

Departures from the paper / its reference code
- The reference code sleeps a fixed 3 s after each action; we wait on page events (one round trip,
  in-flight requests capped at ``idle_cap_ms``, the load event after a navigation). A page that changes
  later on its own (animations, autocomplete delays) is waited for by the agent's own "Wait" (1 s).
- The reference parser rejects Right Click, Switch Tab, Wait, bare go_backward()/go_forward() and
  exit(message=...); all are supported. Early stop after K unparseable responses or K identical actions in
  a row (K=5), done_reason "parse_failures" / "repeated_action".
- Observation details the paper leaves open: nested interactive elements are all numbered when each has
  content of its own (a wrapper around exactly one control is not); a text-less control gets its CSS class
  (else its page id) as ``class`` hint; aria-label/alt become ``title``; a scrollable page or list says
  "[more content below: scroll to see it]"; the tab list "Tabs (* = current): [0]* title [1] title" is
  prefixed only when more than one tab is open (``tab_header``: the model needs tab indices for Switch
  Tab, but a constant header on single-tab MiniWoB pages would only cost tokens); the URL is not in the
  text (Observation.url has it). Off-screen subtrees in normal flow are pruned (a fixed/absolute element
  inside an off-screen box is missed).
- Actions: Type clears first and types key by key (pages listen to keys), date/time inputs are filled
  with the parsed value; a click on an element covered by another (an SVG label) goes to the covering
  one, as a person's would; Scroll Up/Down take an optional element (else the page, or the largest
  scrollable list when the page cannot scroll); Select Dropdown Option adds to a <select multiple>;
  alert/confirm/prompt dialogs are accepted and their text reported in info["dialogs"].
- MiniWoB pages are served from the installed ``miniwob`` package under http://miniwob.local/ by the
  context's request router (no server process, no port); the page's own episode timer is disabled; the
  page is reloaded for every episode (``MiniWoBFamily(in_place=True)`` restarts it in place, faster but some
  pages keep state across episodes).

Quick manual check (prints the observation, then reads actions from stdin until the episode ends):
    .venv/bin/python env.py miniwob:click-button 3
    action> do(action="Click", element="0")
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib.util
import json
import logging
import mimetypes
import os
import re
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import unquote, urlsplit

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from compress import parse_response   # the response format (<think> / <answer>) lives in compress.py

log = logging.getLogger("webagent.env")


#: MiniWoB episode seeds: demonstrations and RL rollouts use TRAIN_SEEDS, evaluation uses EVAL_SEEDS, so
#: held-out evaluation never sees a training page.
TRAIN_SEEDS = range(0, 1_000_000)
EVAL_SEEDS = range(1_000_000, 2_000_000)


# ---- data classes (cross files: compress.py, experts.py and the scripts read these) ----

@dataclass(frozen=True)
class Task:
    """One task. MiniWoB: ``Task("miniwob/click-button", "miniwob", "",
    "http://miniwob.local/miniwob/click-button.html", eval={"type": "miniwob"}, seed=7,
    allowed_hosts=("miniwob.local",))`` (made by ``load_tasks``); the intent is filled in from the page at
    ``reset`` (``WebEnv.task.intent`` / ``Observation.intent``).
    Another episode of the same task is ``dataclasses.replace(task, seed=s)``.
    WebArena: ``start_url`` may hold several tabs joined by `` |AND| ``; ``eval`` is the config's eval dict.
    ``family`` names the TaskFamily that starts, observes and scores its episodes ("miniwob", "webarena",
    or one added with ``register_family``); every caller sets ``seed`` (families without seeds ignore it)."""
    task_id: str
    site: str                       # "miniwob" or the WebArena site(s), e.g. "shopping_admin"
    intent: str                     # the instruction; "" for MiniWoB until the page generates it
    start_url: str
    eval: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    storage_state: str | None = None   # Playwright storage-state JSON path (WebArena logins)
    require_login: bool = False
    allowed_hosts: tuple[str, ...] = ()  # hosts a context may reach; derived from start_url when empty
    max_steps: int = 15
    family: str = "webarena"        # the registered TaskFamily's name


@dataclass
class Observation:
    """What the agent sees at one step, e.g.
    ``Observation(text='<html> <button id="0" data-bbox="2,74,33,21"> Ok </button> </html>',
    url="http://miniwob.local/miniwob/click-button.html", intent='Click on the "Ok" button.',
    tabs=["Click Button Task"], active_tab=0, error=None, truncated=False)``.
    ``error`` is the environment's message about the previous action (parse failure, missing element...)."""
    text: str
    url: str
    intent: str
    tabs: list[str] = field(default_factory=list)
    active_tab: int = 0
    error: str | None = None
    truncated: bool = False


@dataclass(frozen=True)
class Action:
    """A parsed action. ``name`` is one of ACTION_NAMES, ``exit``, ``go_backward`` or ``go_forward``, e.g.
    ``Action("Type", element=12, argument="hello")``, ``Action("exit", message="42")``."""
    name: str
    element: int | None = None
    argument: str | None = None
    message: str | None = None


@dataclass
class StepResult:
    """Result of ``WebEnv.step``: the next observation, the binary reward (non-zero only when done),
    whether the episode ended, and info (``action``, ``error``, ``parse_error``, ``done_reason``, ...)."""
    obs: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpisodeStatus:
    """What a page says about its own episode after an action (``TaskFamily.status``), e.g. a MiniWoB page
    that was solved: ``EpisodeStatus(done=True, reward=1.0, raw_reward=1.0, reason=None)``.
    ``reward`` is the binary reward if the episode ends now; ``raw_reward`` (the page's own score) goes to
    info["raw_reward"] and ``reason`` to info["reason"]."""
    done: bool
    reward: float
    raw_reward: float | None = None
    reason: str | None = None


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


# ---- observation: simplified HTML, extracted in one page.evaluate ----
# Format (WebRL / VisualAgentBench checkpoints): <tag id="N" attr="v"> text </tag>. Interactive elements
# visible in the current viewport get integer ids from 0 in document order and are stamped in the live DOM
# with data-webagent-id="N" (the executor and the scripted experts find them by that attribute).
# Non-interactive text is kept, unlabelled. Wrappers with no text of their own, no kept attribute and no
# label collapse into their children. Hidden elements, scripts and styles are dropped, and so is content
# outside the viewport or clipped away by a scrolled container.

#: Attributes copied from the page's elements into the observation, in this order (EXTRACT_JS gets them in
#: its opts). The others it writes come from live state: title (from aria-label / an image's alt when there is
#: no title), value (inputs, textareas), selected (options), data-status (checked / not-checked / selected),
#: data-bbox and, for a text-less control, class (labelled elements only).
KEPT_ATTRS = ("title", "type", "placeholder", "data-value", "data-text", "data-testid", "data-label")
#: Default observation cap in characters (WebEnv's max_obs_chars): one value for demonstrations, RL and eval.
MAX_OBS_CHARS = 60_000

EXTRACT_JS = r"""
(opts) => {
  // opts: {keep: KEPT_ATTRS, exclude: ids of top-level-document elements left out with their subtrees}
  const t0 = performance.now();
  const KEEP = opts.keep;
  const ROLES = new Set(['button', 'link', 'checkbox', 'radio', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'option', 'textbox', 'combobox', 'switch', 'treeitem', 'searchbox', 'slider',
    'spinbutton', 'listbox', 'gridcell']);
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE', 'BASE',
    'PARAM', 'SOURCE', 'TRACK', 'DATALIST', 'DEFS', 'CLIPPATH', 'MASK', 'LINEARGRADIENT', 'RADIALGRADIENT']);
  const SEMANTIC = new Set(['H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'P', 'LI', 'TABLE', 'TR', 'TD', 'TH', 'LABEL',
    'IMG', 'DIALOG', 'TEXTAREA', 'SELECT', 'BUTTON', 'A', 'INPUT', 'PRE', 'CODE', 'BLOCKQUOTE', 'TEXT']);
  const VOID = new Set(['INPUT', 'IMG', 'BR', 'HR', 'AREA', 'EMBED', 'WBR']);
  const NOVALUE = new Set(['checkbox', 'radio', 'file', 'image', 'hidden', 'color', 'range']);
  const exclude = new Set(opts.exclude || []);
  const vw = window.innerWidth, vh = window.innerHeight;
  let frameSeq = 0;
  let moreAbove = window.scrollY > 2, moreBelow = false;

  const clean = (s) => s.replace(/\s+/g, ' ').trim();
  const SEP = {sep: true};
  const WORD = /[\p{L}\p{N}]/u;
  const clearStamps = (root) => {
    root.querySelectorAll('[data-webagent-id]').forEach((e) => e.removeAttribute('data-webagent-id'));
    root.querySelectorAll('[data-webagent-frame]').forEach((e) => e.removeAttribute('data-webagent-frame'));
  };

  // does the page attach a click-like handler directly to this element? (jQuery, d3 v3/v4, onclick)
  const hasHandler = (el, win) => {
    if (el.onclick || el.onmousedown || el.onmouseup || el.hasAttribute('onclick')) return true;
    if (el.__onclick || el.__onmousedown || el.__onmouseup) return true;            // d3 v3
    if (el.__on) { for (const h of el.__on) { if (/^(click|mousedown|mouseup|dblclick)$/.test(h.type)) return true; } }  // d3 v4
    const jq = win.jQuery;
    if (jq && jq._data) {
      const ev = jq._data(el, 'events');
      if (ev) {
        for (const t of ['click', 'mousedown', 'mouseup', 'dblclick']) {
          if (ev[t] && ev[t].some((h) => !h.selector)) return true;                   // direct, not delegated
        }
      }
    }
    return false;
  };

  // selectors of click-like jQuery handlers delegated from an element to its descendants
  const delegated = (el, win) => {
    const jq = win.jQuery;
    if (!jq || !jq._data) return null;
    const ev = jq._data(el, 'events');
    if (!ev) return null;
    const sels = [];
    for (const t of ['click', 'mousedown', 'mouseup', 'dblclick']) {
      if (ev[t]) for (const h of ev[t]) if (h.selector) sels.push(h.selector);
    }
    return sels.length ? sels : null;
  };
  const matchesAny = (el, sels) => {
    for (const s of sels) { try { if (el.matches(s)) return true; } catch (e) { /* a jQuery-only selector */ } }
    return false;
  };

  const isInteractive = (el, TAG, startsPointer, win, dsels) => {
    if (TAG === 'A') return el.hasAttribute('href') || startsPointer || hasHandler(el, win);
    if (TAG === 'BUTTON' || TAG === 'SELECT' || TAG === 'TEXTAREA' || TAG === 'SUMMARY') return true;
    if (TAG === 'INPUT') return el.type !== 'hidden';
    if (TAG === 'OPTION' || TAG === 'BODY' || TAG === 'HTML') return false;
    const role = el.getAttribute('role');
    if (role && ROLES.has(role)) return true;
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) return true;
    if (startsPointer) return true;
    if (dsels.length && matchesAny(el, dsels)) return true;
    if (el.hasAttribute('tabindex') && el.tabIndex >= 0 && TAG !== 'DIV' && TAG !== 'SPAN') return true;
    return hasHandler(el, win);
  };

  const children = (el, TAG) => {
    if (el.shadowRoot) { clearStamps(el.shadowRoot); return el.shadowRoot.childNodes; }
    if (TAG === 'SLOT') { const a = el.assignedNodes({flatten: true}); return a.length ? a : el.childNodes; }
    return el.childNodes;
  };

  // visit one element; push its output node (or, for a collapsed wrapper, its children) on `out`
  const visit = (el, ctx, parentPointer, out) => {
    const TAG = el.tagName.toUpperCase();
    if (SKIP.has(TAG)) return;
    if (el.id && exclude.has(el.id) && ctx.fp.length === 0) return;
    const r = el.getBoundingClientRect();
    const L = r.left + ctx.ox, T = r.top + ctx.oy, W = r.width, H = r.height;
    const c = ctx.clip;
    const sized = W > 0 && H > 0;
    const inView = sized && L < c.r && L + W > c.l && T < c.b && T + H > c.t;
    const root = TAG === 'HTML' || TAG === 'BODY';
    if (!inView && !root) {
      // outside the viewport, empty, or display:none: nothing of its own to show and no style lookup (the
      // expensive part on big pages); descendants may still be in view (overflow, positioned elements)
      if (TAG === 'IFRAME' || TAG === 'FRAME' || TAG === 'SELECT' || TAG === 'TEXTAREA' || !el.firstElementChild) return;
      // a box wholly beside the viewport in normal flow carries its descendants with it: prune it (what can
      // escape is a fixed/absolute descendant of it, which we accept to miss)
      if (sized && (T >= c.b || T + H <= c.t || L >= c.r || L + W <= c.l)) {
        const pos = ctx.win.getComputedStyle(el).position;
        if (pos === 'static' || pos === 'relative') return;
      } else if (!sized && ctx.win.getComputedStyle(el).display === 'none') {
        return;                                   // a hidden subtree (menus, templates): nothing to see
      }
      out.push(SEP);
      for (let ch = el.firstElementChild; ch; ch = ch.nextElementSibling) visit(ch, ctx, false, out);
      if (el.shadowRoot) for (const ch of el.shadowRoot.children) visit(ch, ctx, false, out);
      out.push(SEP);
      return;
    }
    const st = ctx.win.getComputedStyle(el);
    if (st.display === 'none') return;
    const hidden = st.visibility === 'hidden' || st.visibility === 'collapse';
    const shown = inView && !hidden;
    const pointer = st.cursor === 'pointer';
    let inter = shown && !root && isInteractive(el, TAG, pointer && !parentPointer, ctx.win, ctx.dsels);
    const node = {tag: TAG.toLowerCase(), TAG, el, inter, kids: [], own: false, text: false, attrs: [],
                  fp: ctx.fp, bbox: null};
    // children, clipped by this element when it clips its overflow
    let kctx = ctx;
    const dnew = delegated(el, ctx.win);
    if (dnew) kctx = Object.assign({}, ctx, {dsels: ctx.dsels.concat(dnew)});
    const clips = !root && (st.overflowX !== 'visible' || st.overflowY !== 'visible');
    if (clips && shown && (st.overflowY === 'auto' || st.overflowY === 'scroll')) {
      if (el.scrollTop > 1) moreAbove = true;
      if (el.scrollTop + el.clientHeight < el.scrollHeight - 1) moreBelow = true;
    }
    if (clips) {
      kctx = Object.assign({}, kctx, {clip: {l: Math.max(c.l, L), t: Math.max(c.t, T),
                                            r: Math.min(c.r, L + W), b: Math.min(c.b, T + H)}});
    }
    if (TAG === 'SELECT') {
      if (shown) {
        for (const o of el.options) {
          const s = clean(o.text);
          node.kids.push({tag: 'option', TAG: 'OPTION', el: o, inter: false, own: true, text: true,
                          kids: s ? [{txt: s}] : [], attrs: o.selected ? [['selected', 'true']] : [], fp: ctx.fp});
        }
      }
    } else if (TAG === 'TEXTAREA') {
      // its text is its value (an attribute below)
    } else if (TAG === 'IFRAME' || TAG === 'FRAME') {
      let doc = null;
      try { doc = el.contentDocument; } catch (e) { doc = null; }
      if (doc && doc.documentElement && shown) {
        const k = String(frameSeq++);
        el.setAttribute('data-webagent-frame', k);
        clearStamps(doc);
        const fctx = {win: doc.defaultView, fp: ctx.fp.concat([k]), dsels: [],
                      ox: L + el.clientLeft, oy: T + el.clientTop,
                      clip: {l: Math.max(c.l, L), t: Math.max(c.t, T), r: Math.min(c.r, L + W), b: Math.min(c.b, T + H)}};
        if (doc.body) visit(doc.body, fctx, false, node.kids);
      }
    } else if (!(clips && !inView)) {
      for (const ch of children(el, TAG)) {
        if (ch.nodeType === 3) {
          if (shown) {
            const s = clean(ch.data);
            // gl/gr: glued to the text before/after (no whitespace there in the page), e.g. "<b>x</b>"
            if (s) { node.kids.push({txt: s, gl: !/^\s/.test(ch.data), gr: !/\s$/.test(ch.data)}); node.own = true; }
          }
        } else if (ch.nodeType === 1) {
          visit(ch, kctx, pointer, node.kids);
        }
      }
    }
    for (const k of node.kids) { if (k.txt !== undefined || k.text) { node.text = true; break; } }
    // attributes
    if (shown) {
      for (const a of KEEP) {
        const v = el.getAttribute(a);
        if (v !== null && v !== '') node.attrs.push([a, v]);
      }
      if (!el.hasAttribute('title')) {
        const alt = el.getAttribute('aria-label') || (TAG === 'IMG' ? el.getAttribute('alt') : null);
        if (alt) node.attrs.unshift(['title', alt]);
      }
      if (TAG === 'TEXTAREA' || (TAG === 'INPUT' && !NOVALUE.has(el.type))) node.attrs.push(['value', el.value]);
      if (TAG === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio')) {
        node.attrs.push(['data-status', el.checked ? 'checked' : 'not-checked']);
      } else {
        const ac = el.getAttribute('aria-checked'), as = el.getAttribute('aria-selected');
        if (ac === 'true' || ac === 'false') node.attrs.push(['data-status', ac === 'true' ? 'checked' : 'not-checked']);
        else if (as === 'true') node.attrs.push(['data-status', 'selected']);
      }
    }
    // a label whose control is itself shown needs no id of its own
    if (inter && TAG === 'LABEL' && el.control && el.control.getClientRects().length) inter = false;
    // an interactive wrapper around exactly one interactive element and nothing else: keep the inner one
    const solid = node.kids.filter((k) => !k.sep);
    if (inter && !node.own && solid.length === 1 && solid[0].inter && node.attrs.length === 0) inter = false;
    node.inter = inter;
    if (inter) {
      node.bbox = Math.round(L) + ',' + Math.round(T) + ',' + Math.round(W) + ',' + Math.round(H);
      if (!node.text && !node.attrs.some((a) => a[0] === 'title' || a[0] === 'value' || a[0] === 'placeholder')) {
        const cls = (el.getAttribute('class') || '').trim().split(/\s+/).slice(0, 3).join(' ') || el.id;
        if (cls) node.attrs.push(['class', cls]);   // a text-less control (icon): its class (or id) is the hint
      }
    }
    const keep = TAG === 'HTML' || inter || node.attrs.length > 0 || (SEMANTIC.has(TAG) && node.text)
      || (node.own && st.display !== 'inline' && st.display !== 'contents');
    if (keep) out.push(node);
    else if (st.display.startsWith('inline') || st.display === 'contents') for (const k of node.kids) out.push(k);
    else { out.push(SEP); for (const k of node.kids) out.push(k); out.push(SEP); }   // a block: no gluing across it
  };

  clearStamps(document);
  const top = [];
  visit(document.documentElement, {win: window, fp: [], dsels: [], ox: 0, oy: 0, clip: {l: 0, t: 0, r: vw, b: vh}}, false, top);

  // serialize in document order, numbering the labelled elements from 0 and stamping them
  const parts = [];
  const frames = {};
  let n = 0;
  const esc = (v) => String(v).replace(/\s+/g, ' ').replace(/"/g, '&quot;');
  let glue = false;               // may the next text be glued to the last part (no space)?
  const ser = (node) => {
    if (node.sep) { glue = false; return; }
    if (node.txt !== undefined) {
      const last = parts.length ? parts[parts.length - 1] : '';
      // glue "x<b>y</b>" when a side is punctuation ("<b>Ce</b>" in quotes); keep words apart ("Ann</span><span>9h")
      if (glue && node.gl && !(WORD.test(last[last.length - 1]) && WORD.test(node.txt[0]))) parts[parts.length - 1] += node.txt;
      else parts.push(node.txt);
      glue = !!node.gr;
      return;
    }
    glue = false;
    let open = '<' + node.tag;
    if (node.inter) {
      const id = n++;
      node.el.setAttribute('data-webagent-id', String(id));
      if (node.fp.length) frames[id] = node.fp;
      open += ' id="' + id + '"';
    }
    for (const [k, v] of node.attrs) open += ' ' + k + '="' + esc(v) + '"';
    if (node.inter) open += ' data-bbox="' + node.bbox + '"';
    parts.push(open + '>');
    for (const k of node.kids) ser(k);
    glue = false;
    if (!(VOID.has(node.TAG) && node.kids.length === 0)) parts.push('</' + node.tag + '>');
  };
  for (const node of top) ser(node);

  const se = document.scrollingElement || document.documentElement;
  return {
    text: parts.join(' '), n, frames, title: document.title,
    above: moreAbove, below: moreBelow || se.scrollHeight - (window.scrollY + vh) > 2,
    ms: performance.now() - t0,
  };
}
"""


@functools.lru_cache(maxsize=None)
def _with_status_js(status_js: str) -> str:
    """EXTRACT_JS that also returns a family's ``status_js`` value as ``status``: one round trip per step."""
    return f"(opts) => {{ const r = ({EXTRACT_JS})(opts); r.status = ({status_js})(); return r; }}"


# ---- task families: how a kind of task loads, starts, observes and scores its episodes ----
# WebEnv runs every family the same way (in the spirit of BrowserGym's task classes): a context that reaches
# only family.hosts(task), plus the family's own routes (setup_context) -> the start_url tab(s) ->
# family.start -> after every action the observation and the family's status (status_js, read in the same
# evaluate, or its own status()) -> family.score_exit on exit().

class TaskFamily:
    """A kind of task (MiniWoB++ pages, WebArena sites, your own site). Subclass it, set ``name``, override
    what differs from these defaults, and ``register_family`` an instance: tasks whose ``Task.family`` is that
    name run with it, and ``load_tasks("NAME:BODY")`` calls its ``load(BODY)``.

    >>> class Quiz(TaskFamily):                                                  # doctest: +SKIP
    ...     name = "quiz"
    ...     def load(self, body):
    ...         return [Task(f"quiz/{q}", "quiz", f"What is {q}?", "http://127.0.0.1:8000/", family="quiz")
    ...                 for q in body.split(",")]
    ...     async def score_exit(self, env, page, task, message, info):
    ...         return float(message == "42")
    >>> register_family(Quiz())                                                  # doctest: +SKIP
    """
    name: str = ""
    #: May an env keep its context and first tab for the next episode of this family (cookies cleared, the
    #: start URL loaded again unless ``restart_in_place``)? Saves a new context and renderer per episode.
    reuse_context: bool = False
    #: Allowed hosts that the family's own router (``setup_context``) serves: the sandbox proxy never connects
    #: to them (nor resolves them), it refuses a speculative connection to one without counting it.
    routed_hosts: tuple[str, ...] = ()

    def load(self, body: str) -> list[Task]:
        """The tasks named by the BODY of a ``load_tasks("NAME:BODY")`` spec."""
        raise ValueError(f"the task family {self.name!r} does not load task specs")

    def hosts(self, task: Task) -> tuple[str, ...]:
        """Hosts a context of ``task`` may reach ("host", "host:port", or "file" for file:// URLs); every other
        request is blocked and counted. Default: Task.allowed_hosts, else the hosts of its start_url tabs."""
        if task.allowed_hosts:
            return tuple(task.allowed_hosts)
        hosts = (host_entry(url) for url in task.start_url.split(" |AND| "))
        return tuple(h for h in hosts if h)

    async def setup_context(self, env: WebEnv, context: Any, task: Task) -> None:
        """Prepare a new Playwright context before any tab opens, e.g. ``await context.route(...)`` to serve
        pages without a server. Default: nothing."""

    def observe_exclude(self, task: Task) -> Sequence[str]:
        """Element ids (of the top document) left out of the observation with their subtrees: page furniture
        that is not part of the task. Default: none."""
        return ()

    async def start(self, env: WebEnv, page: Any, task: Task) -> Task:
        """Start the episode on the loaded start page (seeded by ``task.seed`` where the family has seeds) and
        return the task as the agent gets it (e.g. with the intent the page generated). Default: unchanged."""
        return task

    def restart_in_place(self, prev: Task, task: Task, url: str) -> bool:
        """On a reused tab at ``url`` whose last episode was ``prev``: may ``start`` run without loading the
        start URL again? Default: no."""
        return False

    #: A page-side status: JS ``() => value`` that reads the page's own word on the episode; its value goes
    #: to ``read_status``. WebEnv runs it after every action inside the observation's evaluate (no extra
    #: round trip). None = no page-side status: episodes end on exit() or the step limits.
    status_js: str | None = None

    def read_status(self, value: Any) -> EpisodeStatus | None:
        """The episode's status from the value ``status_js`` returned (None: nothing to report, e.g. the
        agent left the task's page)."""
        return None

    async def status(self, env: WebEnv, page: Any) -> EpisodeStatus | None:
        """The episode's status now (done, reward, raw reward, reason), or None. Default: ``status_js`` read
        on its own and given to ``read_status``. After an action WebEnv calls this only when ``status_js`` is
        None (else it reads status_js with the observation): override it for a status that is not in the page."""
        if self.status_js is None:
            return None
        return self.read_status(await env.eval_js(page, self.status_js))

    async def score_exit(self, env: WebEnv, page: Any, task: Task, message: str | None,
                         info: dict[str, Any]) -> float:
        """The binary reward of ``exit(message)``; details may go into ``info``. Default: the page-side status
        decides (a page that is not done yet scores 0; no status scores 0)."""
        status = await self.status(env, page)
        if status is None:
            return 0.0
        if status.raw_reward is not None:
            info["raw_reward"] = status.raw_reward
        return status.reward if status.done else 0.0

    def column(self, task: Task) -> str:
        """The results-table column of ``task`` (eval.py groups success rates by it). Default: the task id."""
        return task.task_id


_FAMILIES: dict[str, TaskFamily] = {}


def register_family(family: TaskFamily) -> TaskFamily:
    """Make ``family`` the one that runs tasks with ``Task.family == family.name`` (replacing an earlier
    family of that name) and that ``load_tasks("NAME:...")`` asks; returns it."""
    if not family.name:
        raise ValueError(f"{type(family).__name__} has no name")
    _FAMILIES[family.name] = family
    return family


def family_of(task: Task) -> TaskFamily:
    """The registered family of ``task``, e.g. ``family_of(miniwob_task("click-button")).name == "miniwob"``."""
    try:
        return _FAMILIES[task.family]
    except KeyError:
        raise ValueError(f"task {task.task_id}: no task family {task.family!r} is registered "
                         f"(registered: {', '.join(_FAMILIES)})") from None


def load_tasks(spec: str) -> list[Task]:
    """Tasks of a spec: ``"NAME:BODY"`` goes to the registered family NAME (``"miniwob:click-button,login-user"``,
    ``"miniwob:all"`` = every solvable task, see MINIWOB_UNSOLVABLE), and the path of a WebArena /
    WebArena-Lite config JSON (a list or one task) to the webarena family."""
    name, sep, body = spec.partition(":")
    if sep and name in _FAMILIES:
        return _FAMILIES[name].load(body.strip())
    if os.path.exists(spec) or spec.endswith(".json"):
        return _FAMILIES["webarena"].load(spec)
    raise ValueError(f"unknown task spec {spec!r}: use '<family>:<tasks>' (families: {', '.join(_FAMILIES)}) "
                     f"or the path of a config .json")


# ---- MiniWoB++ tasks (from the installed `miniwob` package) ----
# Every page is served to the browser under http://miniwob.local/ by the context's request router straight
# from the package's html directory (no socket, no server thread); flight.* pages need http://, and cookies
# work, which file:// would not give. A context of a MiniWoB task reaches only that host.

MINIWOB_HOST = "miniwob.local"
MINIWOB_BASE_URL = f"http://{MINIWOB_HOST}/"
MINIWOB_EXCLUDE_IDS = ("reward-display", "sync-task-cover", "click-canvas")   # core.js overlays, not the task
MINIWOB_EPISODE_MS = 10 ** 9          # core.EPISODE_MAX_TIME: the page's own timer never ends an episode


def _miniwob_html_dir() -> Path:
    spec = importlib.util.find_spec("miniwob")       # locate without importing (importing registers gym envs)
    if spec is None or spec.origin is None:
        raise RuntimeError("the `miniwob` package is not installed; run `make setup`")
    return Path(spec.origin).parent / "html"


# Tasks of the package that the paper's action space (Table 6) with a text observation cannot solve.
# Each was checked against its page (html/miniwob/<name>.html).
_DRAG = "needs drag and drop (the action space has no drag)"
_COORD = "needs a click at computed pixel coordinates inside an SVG/canvas, not on an element"
_COLOUR = "the choice depends on colours or drawn shapes that the text observation does not carry"
MINIWOB_UNSOLVABLE: dict[str, str] = {
    "bisect-angle": _COORD, "circle-center": _COORD, "find-midpoint": _COORD, "right-angle": _COORD,
    "hot-cold": "needs probing pixel positions inside one large area",
    "chase-circle": "needs the mouse to follow a moving circle continuously",
    "moving-items": "moving SVG circles: clicking them needs timing and coordinates",
    "hover-shape": "needs the mouse kept over an SVG square that moves every second (scored over time)",
    "simon-says": "needs watching an animated sequence of flashing buttons",
    "drag-box": _DRAG, "drag-circle": _DRAG, "drag-cube": _DRAG, "drag-items": _DRAG, "drag-items-grid": _DRAG,
    "drag-shapes": _DRAG, "drag-shapes-2": _DRAG, "drag-single-shape": _DRAG, "drag-sort-numbers": _DRAG,
    "resize-textarea": "needs dragging the textarea's resize handle",
    "daily-calendar": "an event is created by dragging the mouse across half-hour slots",
    "draw-circle": "needs drawing with the mouse", "draw-line": "needs drawing with the mouse",
    "highlight-text": "needs selecting text with the mouse", "highlight-text-2": "needs selecting text with the mouse",
    "text-editor": "needs selecting text in the editor before applying a style",
    "use-slider": "a jQuery UI slider moves only by dragging or arrow keys",
    "use-slider-2": "a jQuery UI slider moves only by dragging or arrow keys",
    "form-sequence": "one step sets a jQuery UI slider (dragging or arrow keys)",
    "click-color": _COLOUR, "click-shades": _COLOUR, "click-shape": _COLOUR, "count-shape": _COLOUR,
    "count-sides": "the number of sides exists only as SVG polygon geometry",
    "identify-shape": "when the figure is a shape (not a letter/digit) it exists only as SVG geometry",
    "visual-addition": "the blocks to count are empty coloured boxes with no text",
    "number-checkboxes": "the pattern to draw is only shown as an image",
}


def miniwob_task_names() -> list[str]:
    """Every MiniWoB++ task of the installed package (solvable or not), sorted."""
    html = _miniwob_html_dir()
    names = [p.stem for p in (html / "miniwob").glob("*.html")]
    names += [f"flight.{p.name}" for p in (html / "flight").iterdir()
              if p.is_dir() and (p / "wrapper.html").exists()]
    return sorted(names)


def miniwob_task(name: str, seed: int = 0, max_steps: int = 15) -> Task:
    """The Task of one MiniWoB++ page, e.g. ``miniwob_task("click-button", seed=3)``."""
    name = name.removeprefix("miniwob/")
    html = _miniwob_html_dir()
    if name.startswith("flight."):
        rel = f"flight/{name.removeprefix('flight.')}/wrapper.html"
    else:
        rel = f"miniwob/{name}.html"
    if not (html / rel).exists():
        raise ValueError(f"unknown MiniWoB task {name!r} (no {rel} in the miniwob package)")
    return Task(task_id=f"miniwob/{name}", site="miniwob", intent="", start_url=MINIWOB_BASE_URL + rel,
                eval={"type": "miniwob"}, seed=seed, allowed_hosts=(MINIWOB_HOST,), max_steps=max_steps,
                family="miniwob")


class MiniWoBFamily(TaskFamily):
    """MiniWoB++ pages: served from the installed package under http://miniwob.local/ by the context's request
    router, started with ``Math.seedrandom(seed); core.startEpisodeReal()``, scored by the page itself (an
    exit() before the page is done scores 0). One env keeps its context and tab across MiniWoB episodes.

    ``success``: "positive" = raw reward > 0 (the usual criterion); "perfect" = raw reward >= 1, stricter on
    pages that give partial credit (click-checkboxes: > 0 when most boxes are right; use-colorwheel, flight.*).
    ``in_place``: the same task again restarts without a reload (core.startEpisodeReal, as the miniwob package
    does); faster, but some pages keep state across episodes (an open autocomplete menu, a date picker), so
    the same seed can then give a different page: off by default.
    Other options for one env: ``pool.new_env(families=[MiniWoBFamily(in_place=True)])``."""
    name = "miniwob"
    reuse_context = True
    routed_hosts = (MINIWOB_HOST,)

    def __init__(self, success: str = "positive", in_place: bool = False) -> None:
        if success not in ("positive", "perfect"):
            raise ValueError(f"MiniWoB success must be 'positive' or 'perfect', not {success!r}")
        self.success = success
        self.in_place = in_place
        self._files: dict[Path, bytes] = {}           # package files served from memory

    def load(self, body: str) -> list[Task]:
        """``"click-button,login-user"`` or ``"all"`` (every solvable task, see MINIWOB_UNSOLVABLE)."""
        if body == "all":
            names = [n for n in miniwob_task_names() if n not in MINIWOB_UNSOLVABLE]
        else:
            names = [n.strip() for n in body.split(",") if n.strip()]
            if not names:
                raise ValueError(f"no MiniWoB task named in 'miniwob:{body}'")
        return [miniwob_task(n) for n in names]

    async def setup_context(self, env: WebEnv, context: Any, task: Task) -> None:
        await context.route(re.compile(r"^http://" + re.escape(MINIWOB_HOST) + r"/"), self._serve)

    def _read(self, rel_path: str) -> bytes | None:
        """Bytes of a file under the package's html directory (cached), or None if absent or outside it."""
        root = _miniwob_html_dir().resolve()
        path = (root / rel_path.lstrip("/")).resolve()
        if root not in path.parents or not path.is_file():
            return None
        data = self._files.get(path)
        if data is None:
            data = self._files[path] = path.read_bytes()
        return data

    async def _serve(self, route: Any) -> None:
        """Answer a request for http://miniwob.local/<path> with the package's file (404 if there is none)."""
        path = urlsplit(route.request.url).path
        body = self._read(unquote(path))
        with contextlib.suppress(PlaywrightError):        # the context may close meanwhile
            if body is None:
                await route.fulfill(status=404, body=b"not found", content_type="text/plain")
            else:
                ctype = mimetypes.guess_type(path)[0] or "application/octet-stream"
                await route.fulfill(status=200, body=body, content_type=ctype)

    def observe_exclude(self, task: Task) -> Sequence[str]:
        return MINIWOB_EXCLUDE_IDS

    async def start(self, env: WebEnv, page: Any, task: Task) -> Task:
        """Seed the page's RNG, start the episode (core.startEpisodeReal), wait for WOB_TASK_READY, and fill in
        the intent: the page's utterance (some pages return {utterance, fields})."""
        ready = await env.eval_js(page, """(a) => {
            Math.seedrandom(a.seed); core.EPISODE_MAX_TIME = a.ms; core.startEpisodeReal();
            return WOB_TASK_READY === true; }""", {"seed": task.seed, "ms": MINIWOB_EPISODE_MS})
        if not ready:
            await page.wait_for_function("() => WOB_TASK_READY === true", timeout=env.nav_timeout_ms)
        utt = await env.eval_js(page, "() => core.getUtterance()")
        if isinstance(utt, dict):
            utt = utt.get("utterance", json.dumps(utt))
        return dataclasses.replace(task, intent=str(utt))

    def restart_in_place(self, prev: Task, task: Task, url: str) -> bool:
        return self.in_place and prev.start_url == task.start_url == url

    # the page's own status globals (core.js); null on a page without them (the agent navigated away)
    status_js = """() => typeof WOB_DONE_GLOBAL === 'undefined' ? null : {done: !!WOB_DONE_GLOBAL,
      raw: Number(WOB_RAW_REWARD_GLOBAL), reason: WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON)}"""

    def read_status(self, value: Any) -> EpisodeStatus | None:
        if value is None:
            return None
        raw = value["raw"]
        ok = raw >= 1.0 - 1e-9 if self.success == "perfect" else raw > 0
        return EpisodeStatus(done=value["done"], reward=1.0 if ok else 0.0, raw_reward=raw, reason=value["reason"])

    def column(self, task: Task) -> str:
        return task.task_id.removeprefix("miniwob/")


register_family(MiniWoBFamily())


class WebArenaFamily(TaskFamily):
    """WebArena / WebArena-Lite configs (``load`` = load_webarena_tasks of a config path): the agent's
    exit(message) is scored by the rubric ``evaluate`` with the env's judge and helpers (per-type scores and
    the reasons for a 0 in info["eval"]); results are grouped by site as in the paper's Table 2.
    ``rubric``: "vab" (the paper's evaluator, default) or "webarena"; one env's choice:
    ``pool.new_env(families=[WebArenaFamily(rubric="webarena")])``."""
    name = "webarena"
    #: Column names of the paper's Table 2; a task on several sites ("shopping+reddit") is "Multi-site".
    site_names = {"reddit": "Reddit", "gitlab": "GitLab", "shopping_admin": "CMS", "map": "Map",
                  "shopping": "Shopping", "wikipedia": "Wikipedia"}

    def __init__(self, rubric: str = "vab") -> None:
        if rubric not in ("vab", "webarena"):          # env.RUBRICS, defined further down
            raise ValueError(f"unknown rubric {rubric!r} (expected 'vab' or 'webarena')")
        self.rubric = rubric

    def load(self, body: str) -> list[Task]:
        return load_webarena_tasks(body)

    async def score_exit(self, env: WebEnv, page: Any, task: Task, message: str | None,
                         info: dict[str, Any]) -> float:
        return float(await evaluate(task, page, message, judge=env.judge, helpers=env.helpers,
                                    rubric=self.rubric, details=info.setdefault("eval", {})))

    def column(self, task: Task) -> str:
        return "Multi-site" if "+" in task.site else self.site_names.get(task.site, task.site)


register_family(WebArenaFamily())


_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def _host_port(url: str) -> tuple[str, int] | None:
    """(host, port) of an http(s)/ws(s) URL, the scheme's default port filled in; None for other URLs."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    return (host, port or _DEFAULT_PORTS[scheme]) if host else None


def host_entry(url: str) -> str:
    """The allow-list entry that admits ``url``: the origin "host:port" of an http(s)/ws(s) URL (the
    scheme's default port filled in), else its scheme ("file"; "" for a relative one), e.g.
    ``host_entry("http://127.0.0.1:7770/a") == "127.0.0.1:7770"``, ``host_entry("https://x.org/") ==
    "x.org:443"``."""
    hp = _host_port(url)
    if hp is None:
        scheme = urlsplit(url.strip()).scheme.lower()
        # "localhost:7770" (no scheme) parses as scheme "localhost": never let that become a bare host entry
        return scheme if scheme == "file" or "://" in url else ""
    host, port = hp
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@functools.lru_cache(maxsize=1024)
def _split_entry(entry: str) -> tuple[str, int | None]:
    """("host", port) of an allow-list entry "host:port" / "[v6]:port"; port None for a bare "host"."""
    e = entry.strip().lower()
    if e.startswith("["):
        host, _, rest = e[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif e.count(":") == 1:
        host, port = e.split(":")
    else:
        host, port = e, ""
    return host, (int(port) if port.isdigit() else None)


def origin_allowed(allowed: Sequence[str], host: str, port: int) -> bool:
    """Is ``host:port`` admitted by an entry of ``allowed`` ("host:port", or a bare "host" = any port)?"""
    host = host.lower().strip("[]")
    for entry in allowed:
        h, p = _split_entry(entry)
        if h == host and (p is None or p == port):
            return True
    return False


def url_allowed(allowed: Sequence[str], url: str) -> bool:
    """May a context with allow-list ``allowed`` request ``url``? data:, blob:, about: always; file: when
    "file" is listed; http(s)/ws(s) when its host:port is (``origin_allowed``); nothing else."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("data", "blob", "about", "chrome-error"):
        return True
    if scheme == "file":
        return "file" in allowed
    hp = _host_port(url)
    return hp is not None and origin_allowed(allowed, *hp)


@functools.lru_cache(maxsize=256)
def outside_hosts_re(allowed: tuple[str, ...]) -> re.Pattern:
    """A regex matching every URL outside `allowed` (entries "host:port", a bare "host" = any port, or
    "file"); a URL without a port has its scheme's default (http/ws 80, https/wss 443). data:, blob: and
    about: URLs are never matched. Matched in Playwright's driver, so allowed requests cost nothing there
    (the sandbox proxy still checks every connection, redirect hops included)."""
    ui = r"(?:[^/?#@]*@)?"
    alts = []
    for entry in allowed:
        if entry == "file":
            continue
        host, port = _split_entry(entry)
        h = ui + (rf"\[{re.escape(host)}\]" if ":" in host else re.escape(host))
        if port is None:
            alts.append(rf"(?:https?|wss?)://{h}(?::\d+)?")
        elif port in (80, 443):
            plain, tls = ("http|ws", "https|wss") if port == 80 else ("https|wss", "http|ws")
            alts.append(rf"(?:{plain})://{h}(?::{port})?|(?:{tls})://{h}:{port}")
        else:
            alts.append(rf"(?:https?|wss?)://{h}:{port}")
    hosts = "|".join(alts) or r"(?!)"
    ok = r"data:|blob:|about:" + (r"|file:" if "file" in allowed else "")
    return re.compile(rf"^(?!(?:{ok})|(?:{hosts})(?:[/?#]|$))", re.I)


# ---- the sandbox proxy: every connection a context opens is checked against its allow-list ----

class SandboxProxy:
    """A SOCKS5 proxy on 127.0.0.1 that every browser context of this process connects through (one listening
    port per context, Playwright's per-context ``proxy``), running in its own thread and event loop so a busy
    trainer loop does not stall page loads.

    Why: Playwright's request router sees only the first request of a redirect chain, so an allowed page's
    own ``/redirect?to=http://127.0.0.1:<port>/`` reached any local service. Through a proxy Chromium opens
    no connection itself: each one, every redirect hop, worker fetch, WebSocket, EventSource, preconnect
    and beacon included, is a SOCKS CONNECT to ``host:port`` that ``check(host, port)`` allows (the bytes are
    then piped both ways untouched: cookies, POST bodies, TLS and streaming responses as they are) or refuses
    before any name is resolved or any connection opened. SOCKS5 hands the host name to the proxy, so
    Chromium does not resolve names either (``--host-resolver-rules`` makes sure of that).
    ``check`` returns True (connect), False (refuse: a blocked attempt) or None (refuse silently: a host the
    context's own router serves, such as miniwob.local, which a speculative preconnect may name)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._servers: dict[int, Any] = {}
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandbox-proxy", daemon=True)
        self._thread.start()

    async def listen(self, check: Any) -> int:
        """Start a listener whose connections are checked by ``check(host, port)``; returns its port."""
        async def start() -> Any:
            return await asyncio.start_server(lambda r, w: self._client(r, w, check), "127.0.0.1", 0)
        fut = asyncio.run_coroutine_threadsafe(start(), self._loop)
        srv = await asyncio.wait_for(asyncio.wrap_future(fut), 30)
        port = srv.sockets[0].getsockname()[1]
        self._servers[port] = srv
        return port

    def close(self, port: int | None) -> None:
        """Stop listener ``port`` (its open tunnels end with their context)."""
        srv = self._servers.pop(port, None) if port is not None else None
        if srv is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(srv.close)

    async def _client(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, check: Any) -> None:
        up_w = None
        refuse = b"\x05\x02\x00\x01" + bytes(6)          # reply 2: connection not allowed by ruleset
        try:
            hello = await asyncio.wait_for(r.readexactly(2), 10)
            if hello[0] != 5:
                return
            await asyncio.wait_for(r.readexactly(hello[1]), 10)
            w.write(b"\x05\x00")                          # no authentication
            ver, cmd, _, atyp = await asyncio.wait_for(r.readexactly(4), 10)
            if atyp == 1:
                host = socket.inet_ntop(socket.AF_INET, await r.readexactly(4))
            elif atyp == 4:
                host = socket.inet_ntop(socket.AF_INET6, await r.readexactly(16))
            elif atyp == 3:
                host = (await r.readexactly((await r.readexactly(1))[0])).decode("ascii", "replace")
            else:
                w.write(b"\x05\x08\x00\x01" + bytes(6))
                return
            port = int.from_bytes(await r.readexactly(2), "big")
            if ver != 5 or cmd != 1:                      # CONNECT only (no BIND, no UDP ASSOCIATE)
                w.write(b"\x05\x07\x00\x01" + bytes(6))
                return
            try:
                ok = check(host.lower(), port)
            except Exception:                             # a broken check never opens the sandbox
                log.exception("sandbox proxy check failed for %s:%d", host, port)
                ok = False
            if not ok:
                w.write(refuse)
                return
            try:
                up_r, up_w = await asyncio.wait_for(asyncio.open_connection(host, port), 15)
            except (OSError, asyncio.TimeoutError):
                w.write(b"\x05\x05\x00\x01" + bytes(6))   # connection refused
                return
            w.write(b"\x05\x00\x00\x01" + bytes(6))
            pipes = [asyncio.ensure_future(self._pipe(r, up_w)), asyncio.ensure_future(self._pipe(up_r, w))]
            # either side closing ends the tunnel (a browser never half-closes an HTTP connection)
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            for p in pipes:
                p.cancel()
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            for writer in (w, up_w):
                if writer is not None:
                    with contextlib.suppress(Exception):
                        writer.close()

    @staticmethod
    async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await r.read(1 << 16):
                w.write(data)
                await w.drain()


_sandbox_proxy: SandboxProxy | None = None
_sandbox_proxy_lock = threading.Lock()


def sandbox_proxy() -> SandboxProxy:
    """This process's SandboxProxy, started on first use (again in a forked child, whose threads are gone)."""
    global _sandbox_proxy
    with _sandbox_proxy_lock:
        if _sandbox_proxy is None or _sandbox_proxy.pid != os.getpid():
            _sandbox_proxy = SandboxProxy()
        return _sandbox_proxy


def proxy_settings(port: int) -> dict[str, str]:
    """Playwright's ``new_context(proxy=...)`` for a SandboxProxy listener. Playwright adds "<-loopback>" to the
    bypass list (Chromium otherwise sends localhost/127.0.0.1 direct); it is given here too, explicitly."""
    return {"server": f"socks5://127.0.0.1:{port}", "bypass": "<-loopback>"}


async def new_proxied_context(browser: Any, allowed: Sequence[str] | set[str], *, timeout: float | None = None,
                              **kwargs: Any) -> Any:
    """``browser.new_context(**kwargs)`` whose every connection goes through a SandboxProxy listener that
    admits only ``allowed`` (origins, read at each connection: the caller may add to a set), the listener
    closed with the context. For contexts besides the envs' own (the program_html probe, logins)."""
    proxy = sandbox_proxy()
    port = await proxy.listen(lambda host, p: origin_allowed(tuple(allowed), host, p))
    try:
        ctx = await asyncio.wait_for(browser.new_context(proxy=proxy_settings(port), **kwargs), timeout)
    except BaseException:
        proxy.close(port)
        raise
    ctx.on("close", lambda _c: proxy.close(port))
    return ctx


# ---- browser pool: one Chromium, many isolated contexts ----

# Flags for a closed network: nothing phones home, nothing waits on a network that is not there.
LAUNCH_ARGS = (
    "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--disable-breakpad", "--disable-domain-reliability",
    "--disable-client-side-phishing-detection", "--dns-prefetch-disable", "--metrics-recording-only",
    "--disable-dev-shm-usage", "--mute-audio", "--password-store=basic", "--use-mock-keychain",
    "--disable-features=Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions,"
    "CertificateTransparencyComponentUpdater,AutofillServerCommunication",
    # No name is resolved by Chromium itself: every context connects through the sandbox proxy (SOCKS5 hands
    # it the host name), which resolves allowed names only. 127.0.0.1 is excluded so that the proxy itself
    # (an IP literal, which the rule would otherwise also map) stays reachable.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
)


def find_chromium(bundled_path: str | None = None) -> str | None:
    """The Chromium to launch: $WEBAGENT_CHROMIUM, else Playwright's bundled browser when its executable
    exists (returns None = Playwright's default), else a system Chromium on PATH or /usr/bin/chromium."""
    env_path = os.environ.get("WEBAGENT_CHROMIUM")
    if env_path:
        if not os.path.exists(env_path):
            raise FileNotFoundError(f"WEBAGENT_CHROMIUM={env_path} does not exist")
        return env_path
    if bundled_path and os.path.exists(bundled_path):
        return None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.path.exists("/usr/bin/chromium"):
        return "/usr/bin/chromium"
    raise FileNotFoundError("no Chromium found: run `.venv/bin/python -m playwright install chromium`, "
                            "install Debian's `chromium`, or set WEBAGENT_CHROMIUM")


class BrowserPool:
    """One Chromium process (async Playwright) shared by many environments, each with its own browser
    context (own cookies, storage, cache). The browser is relaunched when it died.

    >>> async with BrowserPool() as pool:                                    # doctest: +SKIP
    ...     env = await pool.new_env(max_repeats=5)
    ...     obs = await env.reset(load_tasks("miniwob:click-button")[0])
    """

    def __init__(self, executable_path: str | None = None, headless: bool = True, *,
                 args: tuple[str, ...] = (), launch_timeout_s: float = 60.0,
                 max_concurrent_resets: int | None = None) -> None:
        self.executable_path = executable_path
        self.headless = headless
        self.extra_args = tuple(args)
        self.launch_timeout_s = launch_timeout_s
        self.tag = f"--webagent-pool={uuid.uuid4().hex[:12]}"   # marks our browser's command line (browser_pid)
        self.browser: Any = None
        self.launches = 0
        self._pw: Any = None
        self._lock = asyncio.Lock()
        self._envs: set[WebEnv] = set()
        # Page loads at once: of 64 simultaneous resets on a 2-core box 63 missed their navigation timeout
        # (and so did their retries); queued 8 at a time, none did.
        self.reset_slots = asyncio.Semaphore(max_concurrent_resets or 4 * (os.cpu_count() or 1))

    async def __aenter__(self) -> "BrowserPool":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def start(self) -> None:
        from playwright.async_api import async_playwright
        if self._pw is None:
            self._pw = await asyncio.wait_for(async_playwright().start(), self.launch_timeout_s)
        await self.get_browser()

    def launch_args(self) -> list[str]:
        args = list(LAUNCH_ARGS) + list(self.extra_args) + [self.tag]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")                # Chromium refuses to run its sandbox as root
        return args

    async def get_browser(self, stale: Any = None) -> Any:
        """The connected browser, launched (again) when there is none or it died. ``stale``: a browser the
        caller found unusable; if it is still the current one it is replaced (several envs may report the
        same dead browser: the first relaunches, the others get the new one)."""
        async with self._lock:
            if self.browser is not None and self.browser.is_connected() and self.browser is not stale:
                return self.browser
            if self.browser is not None:
                with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
                    await asyncio.wait_for(self.browser.close(), 5)
                # the browser died: Playwright's driver process may have died with it (or killed it), and a
                # dead driver refuses every later launch ("Connection closed"): start a fresh driver too
                await self._stop_playwright()
            if self._pw is None:
                from playwright.async_api import async_playwright
                self._pw = await asyncio.wait_for(async_playwright().start(), self.launch_timeout_s)
            exe = self.executable_path or find_chromium(self._pw.chromium.executable_path)
            self.browser = await self._pw.chromium.launch(
                executable_path=exe, headless=self.headless, args=self.launch_args(),
                timeout=self.launch_timeout_s * 1000, handle_sigint=False, handle_sigterm=False,
                handle_sighup=False)
            self.launches += 1
            log.info("launched Chromium %s (%s), launch #%d", self.browser.version, exe or "bundled", self.launches)
            return self.browser

    async def _stop_playwright(self) -> None:
        if self._pw is not None:
            with contextlib.suppress(Exception):   # a dead driver fails here in its own ways; it is gone anyway
                await asyncio.wait_for(self._pw.stop(), 10)
            self._pw = None

    async def new_env(self, **kwargs: Any) -> "WebEnv":
        """A new environment on this pool; kwargs go to WebEnv (max_obs_chars, max_repeats, ...)."""
        env = WebEnv(self, **kwargs)
        self._envs.add(env)
        return env

    def browser_pid(self) -> int | None:
        """Process id of this pool's Chromium browser process (found by its command-line tag), or None."""
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if self.tag.encode() in cmd and not any(c.startswith(b"--type=") for c in cmd):
                return int(proc.name)
        return None

    async def close(self) -> None:
        for env in list(self._envs):
            await env.close()
        if self.browser is not None:
            with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
                await asyncio.wait_for(self.browser.close(), 10)
            self.browser = None
        await self._stop_playwright()


# ---- web environment: reset / step ----

class EpisodeCrash(RuntimeError):
    """The page, its context or the browser died. Raised by reset() when starting the episode failed twice
    (or the start URL does not load); inside step() it becomes done=True, info["done_reason"] == "crash"."""


class WebEnv:
    """One agent's browser context. ``reset(task)`` opens the task's tabs in a fresh context (nothing carries
    over from an earlier episode); ``step(response)`` parses one action from the model's response, executes
    it, and returns the next observation. The env counts steps and ends the episode at ``task.max_steps``.

    >>> obs = await env.reset(task)                                               # doctest: +SKIP
    >>> res = await env.step('<answer>do(action="Click", element="0")</answer>')  # doctest: +SKIP
    >>> res.reward, res.done, res.info["done_reason"]                             # doctest: +SKIP
    (1.0, True, 'page_done')
    """

    def __init__(self, pool: BrowserPool, *, max_obs_chars: int | None = MAX_OBS_CHARS, max_repeats: int = 5,
                 max_parse_failures: int = 5, viewport: tuple[int, int] = (1280, 720),
                 action_timeout_ms: int = 2_000, nav_timeout_ms: int = 15_000, load_timeout_ms: int = 5_000,
                 idle_cap_ms: int = 1_000, eval_timeout_s: float = 10.0, wait_s: float = 1.0,
                 tab_header: str = "auto", reuse_context: bool = True, max_context_episodes: int = 50,
                 families: Sequence[TaskFamily] = (), judge: Any = None, helpers: Any = None) -> None:
        self.pool = pool
        self.max_obs_chars = max_obs_chars      # observation cap in characters (never cuts the intent)
        self.max_repeats = max_repeats          # K: stop after K identical actions in a row
        self.max_parse_failures = max_parse_failures  # K: stop after K unparseable responses in a row
        self.viewport = viewport
        self.action_timeout_ms = action_timeout_ms
        self.nav_timeout_ms = nav_timeout_ms
        self.load_timeout_ms = load_timeout_ms
        self.idle_cap_ms = idle_cap_ms          # cap of the network-idle wait after an action
        self.eval_timeout_s = eval_timeout_s
        self.wait_s = wait_s                    # duration of the "Wait" action
        self.tab_header = tab_header            # "auto": tab list in the text only when >1 tab; "always"; "never"
        self.reuse_context = reuse_context      # keep context+tab between episodes where the family allows it
        # ... but at most this many episodes on one context: Playwright keeps every Request, Response and
        # Route of a context alive until it closes (15 objects, ~65 KB, per MiniWoB episode measured), and so
        # does Chromium's renderer; a fresh context every 50 episodes bounds both and costs ~0.3%.
        self.max_context_episodes = max_context_episodes
        self._context_episodes = 0
        # this env's own families by name, used instead of the registered ones, e.g.
        # families=[MiniWoBFamily(success="perfect")] (see MiniWoBFamily for its options)
        self.families = {f.name: f for f in families}
        self.judge = judge                      # passed to evaluate() (WebArena fuzzy_match / N/A answers)
        self.helpers = helpers                  # passed to evaluate() (program_html helper functions)
        self.task: Task | None = None
        self._family: TaskFamily | None = None  # the family of self.task
        self.context: Any = None
        self._page: Any = None
        self._done = True
        self._done_reason: str | None = None
        self._gen = 0                           # generation of the current context
        self._proxy_port: int | None = None     # this context's SandboxProxy listener
        self._block_lock = threading.Lock()     # the proxy thread counts blocked connections too
        self._last_obs: Observation | None = None
        self._reset_episode_state()

    def _reset_episode_state(self) -> None:
        self.steps = 0
        self.blocked_requests = 0
        self.blocked_urls: list[str] = []
        self.blocked_kinds: dict[str, int] = {}  # per kind: a resource type, "websocket" or "connection"
        # host:port -> (when, layer) of its last blocked attempt not yet matched by the other layer's
        self._recent_blocks: dict[str, tuple[float, str]] = {}
        self.n_parse_errors = 0
        self.n_action_errors = 0
        self.dialogs: list[str] = []            # dialogs accepted during the current step
        self._parse_streak = 0
        self._repeat_streak = 0
        self._last_action: str | None = None
        self._n_labels = 0
        self._label_frames: dict[str, list[str]] = {}
        self._inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._navs = 0
        self._opened = 0                        # pages opened in this context (popups, tabs)
        self._page_opened = asyncio.Event()
        self._crash: str | None = None
        self._worker_started = False            # a service worker ran in this context: never reuse it
        self._allowed: tuple[str, ...] = ()

    @property
    def page(self) -> Any:
        """The active Playwright page (the tab the agent acts in)."""
        return self._page

    def family_for(self, task: Task) -> TaskFamily:
        """The family that runs ``task`` in this env: this env's own of that name, else the registered one."""
        return self.families.get(task.family) or family_of(task)

    # -- context lifecycle --

    async def _close_context(self) -> None:
        self._gen += 1                          # events of the old context are ignored from now on
        ctx, self.context, self._page = self.context, None, None
        if ctx is not None:
            with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
                await asyncio.wait_for(ctx.close(), 10)
        port, self._proxy_port = self._proxy_port, None
        sandbox_proxy().close(port)

    async def close(self) -> None:
        """Close this env's context; the pool stays open."""
        await self._close_context()
        self._done = True
        self.pool._envs.discard(self)

    async def _new_context(self, task: Task, fam: TaskFamily) -> Any:
        browser = await self.pool.get_browser()
        # every connection of the context goes through this process's sandbox proxy, checked against the
        # task's allow-list (redirect hops included, which the request router below never sees)
        sandbox_proxy().close(self._proxy_port)
        self._proxy_port = await sandbox_proxy().listen(self._proxy_check(self._allowed, fam.routed_hosts))
        kwargs: dict[str, Any] = dict(
            viewport={"width": self.viewport[0], "height": self.viewport[1]}, accept_downloads=False,
            service_workers="block", locale="en-US", proxy=proxy_settings(self._proxy_port))
        if task.storage_state:
            check_storage_state(task)          # a clear message instead of Playwright's on a missing login
            await check_login_alive(browser, task)         # and on one the site no longer accepts
            kwargs["storage_state"] = task.storage_state
        try:
            ctx = await self._w(browser.new_context(**kwargs))
        except PlaywrightError as e:
            if "closed" not in str(e).lower():
                raise
            # the browser is gone although it reads as connected: Playwright's driver process died (it does
            # not report that to the browser object). Relaunch both, once, and carry on.
            log.warning("browser unreachable (%s); relaunching Playwright and Chromium", _first_line(e))
            browser = await self.pool.get_browser(stale=browser)
            ctx = await self._w(browser.new_context(**kwargs))
        ctx.set_default_timeout(self.action_timeout_ms)
        ctx.set_default_navigation_timeout(self.nav_timeout_ms)
        # only requests outside the allowed hosts reach Python (a regex matched in the driver), and those the
        # family routes itself (MiniWoB's files); allowed traffic flows without a round trip
        await self._w(ctx.route(outside_hosts_re(self._allowed), self._route_block))
        await self._w(fam.setup_context(self, ctx, task))
        await self._w(ctx.route_web_socket("**/*", self._route_ws))
        await self._w(ctx.add_init_script(NO_WEBRTC_JS))
        await self._w(ctx.add_init_script(NO_SERVICE_WORKER_JS))
        await self._w(ctx.add_init_script(POPUP_PROBE_JS))
        # handlers ignore events of an earlier episode's context (gen = this context's generation)
        self._gen += 1
        gen = self._gen
        self._worker_started = False
        ctx.on("serviceworker", lambda w: self._on_service_worker(w, gen))
        ctx.on("page", lambda p: self._on_page(p, gen))
        ctx.on("request", lambda _r: self._on_request(gen))
        ctx.on("requestfinished", lambda _r: self._on_request_done(gen))
        ctx.on("requestfailed", lambda _r: self._on_request_done(gen))
        ctx.on("close", lambda _c: self._set_crash("the browser context was closed", gen))
        return ctx

    # -- security: a context reaches only the origins of its task --
    # Two layers: the request router aborts (in the driver, no round trip for allowed traffic) and counts the
    # requests a page makes outside the allow-list, with their resource type; the sandbox proxy, which every
    # connection of the context goes through, refuses any other host:port, which catches what the router
    # never sees (redirect hops) before a name is resolved or a connection opened.

    def _block(self, url: str, kind: str, origin: str = "") -> None:
        """Count one blocked attempt. A navigation outside the allow-list reaches both layers (Chromium's
        speculative connection at navigation start is refused by the proxy, the request by the router), in
        either order: the second sighting of an origin within 2 s by the other layer is the same attempt,
        counted once under the router's kind (a resource type) rather than as a "connection"."""
        layer = "proxy" if kind == "connection" else "router"
        with self._block_lock:
            now = time.monotonic()
            if origin:
                seen = self._recent_blocks.pop(origin, None)
                if seen is not None and now - seen[0] < 2.0 and seen[1] != layer:
                    if layer == "proxy":
                        return
                    self.blocked_requests -= 1                  # the proxy's count becomes the router's
                    self.blocked_kinds["connection"] -= 1
                    if not self.blocked_kinds["connection"]:
                        del self.blocked_kinds["connection"]
                    with contextlib.suppress(ValueError):
                        self.blocked_urls.remove(origin)
                else:
                    self._recent_blocks[origin] = (now, layer)
            self.blocked_requests += 1
            self.blocked_kinds[kind] = self.blocked_kinds.get(kind, 0) + 1
            if len(self.blocked_urls) < 20:
                self.blocked_urls.append(url[:200])

    def _proxy_check(self, allowed: tuple[str, ...], routed: tuple[str, ...]) -> Any:
        """The sandbox proxy's check for one context (called in the proxy's thread): True = connect, False =
        refuse and count, None = refuse silently (a host the context's router serves, never connected)."""
        def check(host: str, port: int) -> bool | None:
            if origin_allowed(routed, host, port):
                return None
            if origin_allowed(allowed, host, port):
                return True
            origin = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self._block(origin, "connection", origin)
            return False
        return check

    async def _route_block(self, route: Any) -> None:
        req = route.request
        self._block(req.url, req.resource_type or "other", host_entry(req.url))
        with contextlib.suppress(PlaywrightError):        # the context may close meanwhile
            await route.abort("blockedbyclient")

    async def _route_ws(self, ws: Any) -> None:
        if url_allowed(self._allowed, ws.url):
            ws.connect_to_server()
        else:
            self._block(ws.url, "websocket")
            with contextlib.suppress(PlaywrightError):
                await ws.close()

    # -- page events --

    def _on_page(self, page: Any, gen: int) -> None:
        """A newly opened tab (a popup, target=_blank) becomes the active one."""
        if gen != self._gen:
            return
        page.on("crash", lambda _p: self._set_crash("the page crashed", gen))
        page.on("dialog", lambda d: self._on_dialog(d, gen))
        page.on("framenavigated", lambda f: self._on_nav(page, f, gen))
        self._opened += 1
        self._page_opened.set()
        if self._page is not None:
            self._page = page

    def _on_service_worker(self, worker: Any, gen: int) -> None:
        """A service worker started although pages cannot register one (a way around the refusal that we do
        not know of): counted as blocked, and its context is never reused, so the worker, which could answer
        a later episode's requests on its origin, ends with the context."""
        if gen == self._gen:
            self._worker_started = True
            self._block(worker.url, "service_worker")
            log.warning("a service worker started (%s); its context will not be reused", worker.url[:200])

    async def _on_dialog(self, dialog: Any, gen: int) -> None:
        """alert/confirm/prompt/beforeunload: accepted (a confirm() guards the agent's own action, e.g. a
        delete button); the message is reported in info["dialogs"] of the step."""
        if gen == self._gen:
            self.dialogs.append(f"{dialog.type}: {dialog.message}"[:300])
        with contextlib.suppress(PlaywrightError):
            await dialog.accept()

    def _on_nav(self, page: Any, frame: Any, gen: int) -> None:
        if gen == self._gen and frame is page.main_frame:
            self._navs += 1

    def _on_request(self, gen: int) -> None:
        if gen == self._gen:
            self._inflight += 1
            self._idle.clear()

    def _on_request_done(self, gen: int) -> None:
        if gen == self._gen:
            self._inflight = max(0, self._inflight - 1)
            if self._inflight == 0:
                self._idle.set()

    def _set_crash(self, reason: str, gen: int) -> None:
        if gen == self._gen and self._crash is None and not self._done:
            self._crash = reason

    def _dead_reason(self) -> str | None:
        """Why the episode cannot go on (browser, context or page gone), or None."""
        if self._crash:
            return self._crash
        browser = self.pool.browser
        if browser is None or not browser.is_connected():
            return "the browser is not running"
        if self.context is None:
            return "no browser context"
        if self._page is None or self._page.is_closed():
            pages = [p for p in self.context.pages if not p.is_closed()]
            if not pages:
                return "every tab was closed"
            self._page = pages[-1]
        return None

    # -- waiting on page events (no fixed sleeps) --

    async def _w(self, coro: Any, timeout_s: float | None = None) -> Any:
        """Await a Playwright call that has no timeout of its own, with one."""
        return await asyncio.wait_for(coro, timeout_s or self.eval_timeout_s)

    async def eval_js(self, target: Any, js: str, arg: Any = None) -> Any:
        """page/frame/locator .evaluate with the env's timeout (a hung page must not hang the env); for
        families too."""
        return await asyncio.wait_for(target.evaluate(js, arg), self.eval_timeout_s)

    async def _settle(self, page: Any, navs_before: int, opened_before: int | None = None) -> None:
        """After an action: one round trip (flushes pending events and reads whether the page asked for a
        new tab), wait (capped) for that tab, for in-flight requests, and for the load event when the main
        frame navigated."""
        popups = 0
        with contextlib.suppress(PlaywrightError):
            popups = await self.eval_js(page, "() => { const n = window.__webagentPopups || 0; "
                                            "window.__webagentPopups = 0; return n; }")
        loop = asyncio.get_running_loop()
        if popups and opened_before is not None and self._opened == opened_before:
            with contextlib.suppress(asyncio.TimeoutError):      # the new tab's page event is on its way
                await asyncio.wait_for(self._page_opened.wait(), self.load_timeout_ms / 1000)
        deadline = loop.time() + self.idle_cap_ms / 1000
        while self._inflight > 0 and (left := deadline - loop.time()) > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._idle.wait(), left)
        if self._navs != navs_before and not page.is_closed():
            with contextlib.suppress(PlaywrightTimeoutError):
                await page.wait_for_load_state("load", timeout=self.load_timeout_ms)

    # -- observation --

    async def _observe(self, error: str | None = None) -> tuple[Observation, Any]:
        """Extract the observation of the active tab and, in the same evaluate, the value of the family's
        status_js (None without one); returns both."""
        page = self._page
        fam = self._family
        assert self.task is not None and fam is not None
        opts = {"keep": list(KEPT_ATTRS), "exclude": list(fam.observe_exclude(self.task))}
        js = EXTRACT_JS if fam.status_js is None else _with_status_js(fam.status_js)
        for attempt in range(3):
            try:
                res = await self.eval_js(page, js, opts)
                break
            except PlaywrightError as e:
                # "Execution context was destroyed": a navigation raced the extraction; wait for it and retry
                if attempt == 2 or self._dead_reason():
                    raise
                log.debug("observation retry after %s", e)
                with contextlib.suppress(PlaywrightError):
                    await page.wait_for_load_state("domcontentloaded", timeout=self.load_timeout_ms)
        self._n_labels = res["n"]
        self._label_frames = res["frames"]
        text = res["text"]
        if res["above"] or res["below"]:
            where = " and ".join(w for w, f in (("above", res["above"]), ("below", res["below"])) if f)
            text += f" [more content {where}: scroll to see it]"
        tabs, active = await self._tabs(res["title"])
        if self.tab_header == "always" or (self.tab_header == "auto" and len(tabs) > 1):
            listing = " ".join(f"[{i}]{'*' if i == active else ''} {t}" for i, t in enumerate(tabs))
            text = f"Tabs (* = current): {listing}\n{text}"
        truncated = False
        if self.max_obs_chars is not None and len(text) > self.max_obs_chars:
            omitted = len(text) - self.max_obs_chars
            text = text[:self.max_obs_chars] + f"\n[observation truncated: {omitted} characters omitted]"
            truncated = True
        intent = self.task.intent
        obs = Observation(text=text, url=page.url, intent=intent, tabs=tabs, active_tab=active, error=error,
                          truncated=truncated)
        self._last_obs = obs
        return obs, res.get("status")

    async def _tabs(self, active_title: str) -> tuple[list[str], int]:
        pages = [p for p in self.context.pages if not p.is_closed()]
        titles = []
        for p in pages:
            if p is self._page:
                titles.append(active_title)
            else:
                try:
                    titles.append(await asyncio.wait_for(p.title(), self.eval_timeout_s))
                except (PlaywrightError, asyncio.TimeoutError):
                    titles.append(p.url)
        active = pages.index(self._page) if self._page in pages else 0
        return titles, active

    # -- reset --

    def _can_reuse(self, task: Task, fam: TaskFamily) -> bool:
        """The same family again, one that allows it (MiniWoB), on a live context: keep the context and its
        first tab (a new tab costs a renderer process); reset() loads the start URL in it again."""
        if not (self.reuse_context and fam.reuse_context and self.context is not None and self.task is not None):
            return False
        if self._family is not fam or task.storage_state or self._crash or self._worker_started:
            return False
        if self._context_episodes >= self.max_context_episodes:
            return False
        if fam.hosts(task) != self._allowed:               # the request router was built for those hosts
            return False
        browser = self.pool.browser
        pages = self.context.pages
        return browser is not None and browser.is_connected() and bool(pages) and not pages[0].is_closed()

    async def reset(self, task: Task) -> Observation:
        """Start an episode of `task`: open its tab(s) in a fresh context (or, where the family allows it, the
        env's kept context and tab, cookies cleared, the page loaded again), let the family start the episode
        (MiniWoB: seeded by task.seed), and return the first observation (intent filled in). A failure is
        retried once in a fresh context (the pool relaunches a dead browser); a second failure raises
        EpisodeCrash."""
        fam = self.family_for(task)
        reuse = self._can_reuse(task, fam)
        for attempt in range(2):
            try:
                async with self.pool.reset_slots:
                    return await self._reset_once(task, fam, reuse)
            except (PlaywrightError, asyncio.TimeoutError) as e:
                reason = self._dead_reason() or _first_line(e)
                self._done, self._done_reason = True, "crash"
                if attempt == 1:
                    raise EpisodeCrash(f"reset of {task.task_id} failed: {reason}") from e
                log.warning("reset of %s failed (%s); retrying in a fresh context", task.task_id, reason)
                reuse = False
        raise AssertionError("unreachable")

    async def _reset_once(self, task: Task, fam: TaskFamily, reuse: bool) -> Observation:
        if not reuse:
            await self._close_context()
        self._reset_episode_state()
        self._done, self._done_reason = False, None
        prev, self.task, self._family = self.task, task, fam
        self._allowed = fam.hosts(task)
        if reuse:
            page = await self._reuse_tab(prev, task, fam)
            self._context_episodes += 1
        else:
            self.context = await self._new_context(task, fam)
            self._context_episodes = 1
            urls = [u.strip() for u in task.start_url.split(" |AND| ") if u.strip()]
            page = None
            for url in urls:                        # WebArena: several start tabs; the first is active
                tab = await self._w(self.context.new_page())
                page = page or tab
                self._page = tab
                await tab.goto(url, wait_until="domcontentloaded", timeout=self.nav_timeout_ms)
                await self._settle(tab, -1)
            self._page = page
            await self._w(page.bring_to_front())
        self.task = await fam.start(self, page, task)
        obs, _ = await self._observe()
        return obs

    async def _reuse_tab(self, prev: Task, task: Task, fam: TaskFamily) -> Any:
        """The kept context's first tab, ready for the next episode: other tabs closed, cookies cleared, the
        start URL loaded again (unless the family restarts the same page in place)."""
        pages = self.context.pages
        for extra in pages[1:]:
            with contextlib.suppress(PlaywrightError):
                await self._w(extra.close())
        await self._w(self.context.clear_cookies())
        page = self._page = pages[0]
        if not fam.restart_in_place(prev, task, page.url):
            await page.goto(task.start_url, wait_until="domcontentloaded", timeout=self.nav_timeout_ms)
            await self._settle(page, -1)
        return page

    # -- step --

    async def step(self, response: str) -> StepResult:
        """Parse one action from the model's response, execute it, observe. Errors (unparseable response,
        element not on the page, ...) do not end the episode: their text is in info["error"] and in the
        next Observation.error; the episode ends on exit(), the MiniWoB page finishing, task.max_steps,
        K unparseable responses or K identical actions in a row, or a crash."""
        info: dict[str, Any] = {"action": None, "parse_error": False, "error": None, "done_reason": None,
                                "blocked_requests": self.blocked_requests}
        if self._done or self.task is None:
            info["error"] = "the episode is over; call reset()"
            obs = self._last_obs or Observation(text="", url="", intent="")
            return StepResult(obs=obs, reward=0.0, done=True, info=self._finish_info(info, self._done_reason))
        self.steps += 1
        self.dialogs = []
        task = self.task
        reward, done_reason = 0.0, None
        try:
            action: Action | None = None
            try:
                action = parse_action(response)
            except ActionParseError as e:
                self.n_parse_errors += 1
                self._parse_streak += 1
                info["parse_error"] = True
                info["error"] = f"Invalid action: {e}"
            if action is not None:
                self._parse_streak = 0
                canon = format_action(action)
                info["action"] = canon
                self._repeat_streak = self._repeat_streak + 1 if canon == self._last_action else 1
                self._last_action = canon
                if action.name == "exit":
                    reward = await self._family.score_exit(self, self._page, task, action.message, info)
                    done_reason = "exit"
                else:
                    err = await self._execute(action)
                    if err:
                        self.n_action_errors += 1
                        info["error"] = err
            if dead := self._dead_reason():
                raise EpisodeCrash(dead)
            obs, probe = await self._observe(error=info["error"])
            status = None
            if done_reason is None:                 # the family's status_js was read with the observation
                fam = self._family
                status = fam.read_status(probe) if fam.status_js else await fam.status(self, self._page)
            if status is not None:
                if status.raw_reward is not None:
                    info["raw_reward"] = status.raw_reward
                if status.done:
                    done_reason, reward = "page_done", status.reward
                    info["reason"] = status.reason
            if done_reason is None:
                if self._parse_streak >= self.max_parse_failures:
                    done_reason = "parse_failures"
                elif self._repeat_streak >= self.max_repeats:
                    done_reason = "repeated_action"
                elif self.steps >= task.max_steps:
                    done_reason = "max_steps"
        except (EpisodeCrash, PlaywrightError, asyncio.TimeoutError) as e:
            reason = self._dead_reason() or _first_line(e) or type(e).__name__
            log.warning("episode of %s crashed at step %d: %s", task.task_id, self.steps, reason)
            info["error"] = f"the browser failed: {reason}"
            info["reason"] = reason
            reward, done_reason = 0.0, "crash"
            obs = Observation(text="", url=self._safe_url(), intent=task.intent, error=info["error"])
            self._last_obs = obs
        return StepResult(obs=obs, reward=reward, done=done_reason is not None,
                          info=self._finish_info(info, done_reason))

    def _finish_info(self, info: dict[str, Any], done_reason: str | None) -> dict[str, Any]:
        info["done_reason"] = done_reason
        info["blocked_requests"] = self.blocked_requests
        if self.blocked_kinds:
            info["blocked_kinds"] = dict(self.blocked_kinds)
        info["steps"] = self.steps
        info["n_parse_errors"] = self.n_parse_errors
        info["n_action_errors"] = self.n_action_errors
        if self.dialogs:
            info["dialogs"] = list(self.dialogs)
        if done_reason is not None:
            self._done = True
            self._done_reason = done_reason
        return info

    def _safe_url(self) -> str:
        try:
            return self._page.url if self._page is not None else ""
        except PlaywrightError:
            return ""

    # -- executing one action --

    def _locator(self, element: int) -> Any:
        root = self._page
        for k in self._label_frames.get(str(element), []):
            root = root.frame_locator(f'[data-webagent-frame="{k}"]')
        return root.locator(f'[data-webagent-id="{element}"]')

    async def _execute(self, action: Action) -> str | None:
        """Execute a parsed action on the active tab; returns an error text for the agent, or None.
        Playwright errors that are about the action (timeouts, wrong element kind) become that text;
        a dead page/context/browser is raised as EpisodeCrash by the caller's check."""
        page = self._page
        name, el = action.name, action.element
        if el is not None and not 0 <= el < self._n_labels:
            ids = f"0..{self._n_labels - 1}" if self._n_labels else "none"
            return f"element {el} is not on the current page (element ids: {ids})"
        navs, opened = self._navs, self._opened
        self._page_opened.clear()
        loc = self._locator(el) if el is not None else None
        t = self.action_timeout_ms
        try:
            if name == "go_backward" or name == "go_forward":
                go = page.go_back if name == "go_backward" else page.go_forward
                resp = await go(timeout=self.nav_timeout_ms, wait_until="domcontentloaded")
                if resp is None and self._navs == navs:
                    return f"{name}(): there is no {'previous' if name == 'go_backward' else 'next'} page"
            elif name in ("Click", "Right Click"):
                await self._click(loc, "right" if name == "Right Click" else "left")
            elif name == "Hover":
                await loc.hover(timeout=t)
            elif name in ("Type", "Search"):
                await self._type(loc, action.argument or "")
                if name == "Search":
                    await loc.press("Enter", timeout=t)
            elif name == "Press Enter":
                if loc is not None:
                    await loc.press("Enter", timeout=t)
                else:
                    await self._w(page.keyboard.press("Enter"))
            elif name in ("Scroll Up", "Scroll Down"):
                sign = -1 if name == "Scroll Up" else 1
                if loc is not None:
                    moved = await asyncio.wait_for(loc.evaluate("(el, s) => (" + SCROLL_JS + ")([el, s])", sign),
                                                   self.eval_timeout_s)
                else:
                    moved = await self.eval_js(page, SCROLL_JS, [None, sign])
                if not moved:
                    return f"{name}: already at the {'top' if sign < 0 else 'bottom'}"
            elif name == "Select Dropdown Option":
                err = await self._select(loc, action.argument or "")
                if err:
                    return err
            elif name == "Switch Tab":
                pages = [p for p in self.context.pages if not p.is_closed()]
                idx = int(action.argument or "0")
                if not 0 <= idx < len(pages):
                    return f"tab {idx} does not exist (open tabs: 0..{len(pages) - 1})"
                self._page = pages[idx]
                await self._w(self._page.bring_to_front())
                page = self._page
            elif name == "Wait":
                await asyncio.sleep(self.wait_s)
            else:                                          # parse_action only returns the names above
                return f"unsupported action {name}"
        except PlaywrightTimeoutError as e:
            if self._dead_reason():
                raise
            return f"{name} on element {el} failed: timed out ({_first_line(e)})"
        except PlaywrightError as e:
            if self._dead_reason():
                raise
            return f"{name} on element {el} failed: {_first_line(e)}"
        await self._settle(self._page if self._page is not None else page, navs, opened)
        return None

    async def _click(self, loc: Any, button: str) -> None:
        """Click the element's centre. When another element covers that point (e.g. the label drawn on an
        SVG button), Playwright refuses; the click then goes where a person's would: to the covering one."""
        try:
            await loc.click(button=button, timeout=self.action_timeout_ms)
        except PlaywrightTimeoutError as e:
            if "intercepts pointer events" not in str(e):
                raise
            await loc.click(button=button, force=True, timeout=self.action_timeout_ms)

    async def _type(self, loc: Any, text: str) -> None:
        """Type clears the field first. Short texts are typed key by key (pages listen to key events,
        e.g. autocomplete and search-as-you-type); long ones are filled, the last character typed."""
        t = self.action_timeout_ms
        kind = await asyncio.wait_for(loc.evaluate("el => el.tagName === 'INPUT' ? el.type : ''", timeout=t),
                                      self.eval_timeout_s)
        iso = _html_input_value(kind, text) if kind in _DATE_INPUTS else None
        if iso is not None:                      # date/time widgets: keys depend on the locale; fill the value
            await loc.fill(iso, timeout=t)
            return
        try:
            if len(text) <= 64:
                await loc.fill("", timeout=t)
                await loc.press_sequentially(text, timeout=t + 20 * len(text))
            else:
                await loc.fill(text[:-1], timeout=t)
                await loc.press_sequentially(text[-1], timeout=t)
        except PlaywrightError as e:
            if "not an <input>" not in str(e):
                raise
            # not a text field: a control (button, link, select) is an error; another element (e.g. a div
            # terminal listening to keys) is focused by a click, then select-all + type
            kind = await asyncio.wait_for(loc.evaluate(
                "el => ['BUTTON', 'A', 'SELECT', 'INPUT', 'OPTION'].includes(el.tagName) ? el.tagName.toLowerCase() : ''"),
                self.eval_timeout_s)
            if kind:
                raise PlaywrightError(f"a <{kind}> is not a text field; Type needs an input, textarea or editable element")
            await loc.click(timeout=t)
            await self._w(self._page.keyboard.press("ControlOrMeta+A"))
            await self._w(self._page.keyboard.type(text), self.eval_timeout_s + 0.05 * len(text))

    async def _select(self, loc: Any, want: str) -> str | None:
        """Select Dropdown Option: match the option text case-insensitively (exact, else a unique
        substring); on a <select multiple> the option is added to the selection."""
        info = await asyncio.wait_for(loc.evaluate("""(el) => el.tagName !== 'SELECT' ? null :
            {multiple: el.multiple, options: Array.from(el.options).map((o) => [o.text, o.label, o.value, o.selected])}"""),
            self.eval_timeout_s)
        if info is None:
            return "Select Dropdown Option needs a <select> element; click the element to open it instead"
        norm = lambda s: " ".join(str(s).split()).lower()  # noqa: E731
        w = norm(want)
        opts = info["options"]
        hits = [i for i, o in enumerate(opts) if w in (norm(o[0]), norm(o[1]))]
        if not hits:
            hits = [i for i, o in enumerate(opts) if norm(o[2]) == w]
        if not hits:
            hits = [i for i, o in enumerate(opts) if w and w in norm(o[0])]
            if len(hits) > 1:
                return (f"option {want!r} is ambiguous; options: "
                        + ", ".join(repr(" ".join(opts[i][0].split())) for i in hits))
        if not hits:
            return f"no option {want!r}; options: " + ", ".join(repr(" ".join(o[0].split())) for o in opts)
        index = [hits[0]]
        if info["multiple"]:
            index = sorted({i for i, o in enumerate(opts) if o[3]} | {hits[0]})
        await loc.select_option(index=index, timeout=self.action_timeout_ms)
        return None


# Counts in-page requests for a new tab (window.open, an unprevented click on a link/form with a target),
# so that the step waits for the new tab's page event instead of racing it.
# WebRTC opens UDP/TCP connections (STUN/TURN) that request routing never sees: a page could reach any host and
# port with it. The agent needs none of it: the constructors are removed in every frame before page scripts run.
NO_WEBRTC_JS = r"""(() => {
  for (const k of ['RTCPeerConnection', 'webkitRTCPeerConnection', 'RTCDataChannel', 'RTCIceCandidate',
                   'RTCSessionDescription', 'RTCRtpSender', 'RTCRtpReceiver', 'RTCRtpTransceiver']) {
    try { delete window[k]; } catch (e) { /* not configurable: leave it */ }
  }
})();"""

# Service workers: Playwright's service_workers="block" replaces register() with a stub that resolves to
# undefined, which a page reads as success; this one refuses, as a browser with workers disabled does.
# Non-configurable, so a page script cannot put the original back from the prototype.
NO_SERVICE_WORKER_JS = r"""(() => {
  const proto = self.ServiceWorkerContainer && ServiceWorkerContainer.prototype;
  if (!proto) return;                                   // not a secure context: no service worker API at all
  const refuse = () => Promise.reject(new DOMException('service workers are disabled in this browser',
                                                       'SecurityError'));
  try { Object.defineProperty(proto, 'register', {value: refuse, writable: false, configurable: false}); }
  catch (e) { /* already locked */ }
})();"""

POPUP_PROBE_JS = r"""(() => {
  const mark = () => { window.__webagentPopups = (window.__webagentPopups || 0) + 1; };
  const open = window.open;
  window.open = function (...args) { mark(); return open.apply(this, args); };
  window.addEventListener('click', (e) => {
    const t = e.target && e.target.closest ? e.target.closest('a[target], area[target]') : null;
    if (t && !e.defaultPrevented && !['', '_self', '_parent', '_top'].includes(t.target)) mark();
  });
  window.addEventListener('submit', (e) => {
    const f = e.target;
    if (f && !e.defaultPrevented && f.target && !['_self', '_parent', '_top'].includes(f.target)) mark();
  });
})();"""

# Scroll Up/Down: 2/3 of the viewport (or of the element's height). Without an element, the document
# scrolls; when it cannot move that way, the largest visible scrollable container does (MiniWoB lists).
SCROLL_JS = r"""([el, sign]) => {
  const can = (t) => sign > 0 ? t.scrollTop + t.clientHeight < t.scrollHeight - 1 : t.scrollTop > 0;
  let t = el, h = el ? el.clientHeight : window.innerHeight;
  if (!t) {
    const doc = document.scrollingElement || document.documentElement;
    if (can(doc)) { t = doc; }
    else {
      let best = null, area = 0;
      for (const e of document.querySelectorAll('*')) {
        if (e.scrollHeight <= e.clientHeight + 1 || !can(e)) continue;
        const oy = getComputedStyle(e).overflowY;
        if (oy !== 'auto' && oy !== 'scroll') continue;
        const r = e.getBoundingClientRect();
        const a = Math.max(0, Math.min(r.right, innerWidth) - Math.max(r.left, 0)) *
                  Math.max(0, Math.min(r.bottom, innerHeight) - Math.max(r.top, 0));
        if (a > area) { area = a; best = e; }
      }
      t = best || doc;
      if (best) h = best.clientHeight;
    }
  }
  const before = t.scrollTop;
  t.scrollBy({top: sign * Math.max(1, Math.round(h * 2 / 3)), behavior: 'instant'});
  return t.scrollTop !== before;
}"""


_DATE_INPUTS = {"date": ("%Y-%m-%d", ("%m/%d/%Y", "%Y-%m-%d", "%m-%d-%Y", "%d.%m.%Y", "%B %d, %Y", "%b %d, %Y")),
                "time": ("%H:%M", ("%I:%M %p", "%I:%M%p", "%H:%M", "%I %p", "%H:%M:%S")),
                "month": ("%Y-%m", ("%m/%Y", "%Y-%m", "%B %Y", "%b %Y")),
                "datetime-local": ("%Y-%m-%dT%H:%M", ("%m/%d/%Y %I:%M %p", "%m/%d/%Y %H:%M", "%Y-%m-%dT%H:%M",
                                                       "%Y-%m-%d %H:%M"))}


def _html_input_value(kind: str, text: str) -> str | None:
    """The value of an <input type=date|time|month|datetime-local> for a human-written text
    ("10/11/2011" -> "2011-10-11", "8:04 PM" -> "20:04"), or None if it is not recognised."""
    import datetime
    out, formats = _DATE_INPUTS[kind]
    for fmt in formats:
        try:
            return datetime.datetime.strptime(text.strip().upper() if "%p" in fmt else text.strip(), fmt).strftime(out)
        except ValueError:
            continue
    return None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


# ---- manual check ----

async def _manual_check(spec: str, seed: int = 0, headless: bool = True) -> None:
    """Open the first task of `spec`, print the observation, then read actions from stdin until done."""
    import sys
    task = dataclasses.replace(load_tasks(spec)[0], seed=seed)
    async with BrowserPool(headless=headless) as pool:
        env = await pool.new_env()
        obs = await env.reset(task)
        print(f"intent: {obs.intent}\nurl: {obs.url}\n{obs.text}\n")
        loop = asyncio.get_running_loop()
        while True:
            print("action> ", end="", flush=True)
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            res = await env.step(line)
            print(f"{res.info}\n{res.obs.text}\n")
            if res.done:
                print(f"done: reward={res.reward} reason={res.info['done_reason']}")
                break


# ---- WebArena tasks and rubrics ----
# Owned by the WebArena helper (config loading + rubric functions). The rest of env.py calls only:
#   load_webarena_tasks(path) -> list[Task]        (used by load_tasks for a JSON path)
#   async evaluate(task, page, answer, *, judge=None, helpers=None, rubric="vab") -> float in {0.0, 1.0}
#                                                   (called by WebArenaFamily.score_exit on exit())
#
# Loading (both rubrics read the same Task):
# - Site placeholders (__SHOPPING__, __SHOPPING_ADMIN__, __REDDIT__, __GITLAB__, __MAP__, __WIKIPEDIA__,
#   __HOMEPAGE__) come from the environment: WA_<NAME> if set, else WebArena's own <NAME> (SHOPPING, ...).
#   They are substituted at load in start_url and in the whole eval dict; a missing variable is a load error.
# - Task.allowed_hosts = the origins ("host:port", the scheme's default port filled in) of the start tabs, of
#   reference_url / program_html URLs, of every site in `sites` whose URL variable (WA_SHOPPING, ...) is set
#   (cross-site tasks start on one site and finish on another), and of $WA_EXTRA_ORIGINS (comma-separated URLs or host:port). Ports, not whole hosts: with the sites on
#   127.0.0.1, a host-wide entry let a page reach every local service (a vLLM server, DeepSpeed's port).
#   The map site's page (OpenStreetMap website, :3000) calls backends on other ports, in WebArena's setup
#   (webarena-map-backend-boot-init.yaml) tiles :8080, Nominatim geocoding :8085 and OSRM routing :5000
#   (car) / :5001 (bike) / :5002 (foot), often on a separate host: list them in WA_EXTRA_ORIGINS, e.g.
#   WA_EXTRA_ORIGINS=http://mapbackend:8080,http://mapbackend:8085,http://mapbackend:5000,... (or give a Task
#   its own allowed_hosts).
# - storage_state "" or null = none (97 map tasks of WebAgent-R1's training file have ""). Shapes that an
#   evaluator raises on (a lone must_include string, url_note null) load and score 0 when evaluated;
#   unknown keys, eval types, url_note rules and locators are load errors.
# Scoring: ``rubric`` picks VisualAgentBench's WebArena-Lite evaluators ("vab", the paper's) or WebArena's
# original ones ("webarena"), each reproduced with its quirks; the rules and their differences are in the
# comments below and in README.md ("Rubrics"). Common to both:
# - program_html: url "last" = the page now; another URL (or `func:helper(...)` returning one) is opened in a
#   probe page of a fresh context that holds a copy of the agent's cookies and local storage, so the agent's
#   tabs are untouched (the originals navigate the agent's page; a new tab of the agent's own context would
#   become the env's active tab); later "last" targets read the probe page, as they read the navigated page
#   there. Locators: "" = page.content(), a `document.` / `[...document.` JS expression, or
#   `func:name(args)` calling helpers[name](page, *args) (sync or async). The call is parsed, never
#   eval()ed: args are quoted strings, numbers, True/False/None, `__page__` (dropped: the page is always the
#   first argument) and `__last_url__` (the page's URL, also replaced inside strings).
# - A judge or helper that is needed but missing scores 0 and logs a warning; every failed check leaves a
#   reason in `details["reasons"]` when the caller passes a `details` dict. Scores of eval types multiply.
# - `func:` helpers: the five that the public configs name are built in (WEBARENA_HELPERS, "helper functions"
#   below); ``helpers=`` adds others or replaces them by name.
# - Logins come from storage_state files, which ``webarena_login`` (``python env.py login``) writes as
#   WebArena's auto_login.py does. A reset with a storage_state that cannot log in (no such file, no valid
#   cookie) raises ValueError saying how to make it (check_storage_state); require_login with no storage_state
#   runs without one (WebArena-Lite's map tasks: the map has no login). require_reset is recorded, not acted
#   on: resetting a WebArena site between tasks is the user's job.

import asyncio  # noqa: E402  (this section's imports are kept with it)
import contextlib  # noqa: E402
import html as _html  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.parse  # noqa: E402
import urllib.request  # noqa: E402

_wa_log = logging.getLogger("env.webarena")

WEBARENA_SITES = ("SHOPPING_ADMIN", "SHOPPING", "REDDIT", "GITLAB", "MAP", "WIKIPEDIA", "HOMEPAGE")
_PLACEHOLDER = re.compile(r"__(SHOPPING_ADMIN|SHOPPING|REDDIT|GITLAB|MAP|WIKIPEDIA|HOMEPAGE)__")
EVAL_TYPES = ("string_match", "url_match", "program_html")
_ANSWER_KEYS = ("exact_match", "must_include", "must_exclude", "one_of", "required_values", "fuzzy_match")
_CONTENT_KEYS = ("exact_match", "must_include", "must_exclude", "required_values", "fuzzy_match")
_URL_RULES = ("GOLD in PRED", "EXACT")
_INEQUALITY = re.compile(r"^\s*(<=|>=|==|<|>)\s*(-?\d+(?:\.\d+)?)\s*$")
_OR, _AND = " |OR| ", " |AND| "
NAV_TIMEOUT_MS = 15_000        # opening a program_html URL
SETTLE_TIMEOUT_MS = 2_000      # capped network-idle wait after it loads
CHECK_TIMEOUT_S = 15.0         # one JS locator or helper call
JUDGE_TIMEOUT_S = 300.0        # one judge call (an LLM request)


def webarena_site_url(name: str) -> str | None:
    """URL of WebArena site ``name`` ("SHOPPING", ...) from $WA_<NAME>, else $<NAME>; no trailing slash."""
    for var in (f"WA_{name}", name):
        value = os.environ.get(var, "").strip()
        if value:
            return value.rstrip("/")
    return None


def substitute_placeholders(text: str) -> str:
    """Replace __SHOPPING__-style placeholders by site URLs; ValueError naming the variable if one is unset."""
    def repl(m: re.Match) -> str:
        url = webarena_site_url(m.group(1))
        if url is None:
            raise ValueError(f"placeholder {m.group(0)} needs the environment variable "
                             f"WA_{m.group(1)} (or {m.group(1)}) set to the site's URL")
        return url
    return _PLACEHOLDER.sub(repl, text)


# ---- WebArena tasks and rubrics: config loading ----

class _ConfigError(ValueError):
    """A malformed field; the loader adds the task id and the file."""
    def __init__(self, field_name: str, msg: str):
        super().__init__(f"{field_name}: {msg}")


def _substitute_tree(obj: Any, where: str) -> Any:
    if isinstance(obj, str):
        try:
            return substitute_placeholders(obj)
        except ValueError as e:
            raise _ConfigError(where, str(e)) from None
    if isinstance(obj, list):
        return [_substitute_tree(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        return {k: _substitute_tree(v, f"{where}.{k}") for k, v in obj.items()}
    return obj


def _str_list(value: Any, where: str) -> list[str]:
    """A non-empty list of strings (numbers are turned into strings; a lone string, as in WebArena-Lite's
    task 81, is checked as a one-item list)."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise _ConfigError(where, f"expected a non-empty list of strings, got {value!r}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _ConfigError(f"{where}[{i}]", f"expected a string, got {v!r}")
        out.append(str(v))
    return out


def _check_reference(key: str, value: Any, where: str) -> Any:
    """Validate one reference_answers / required_contents entry; returns it normalised."""
    if key == "exact_match":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise _ConfigError(where, f"expected a string, got {value!r}")
        return str(value)
    if key == "fuzzy_match" and value == "N/A":
        return value
    items = _str_list(value, where)
    if key == "required_values":
        for i, item in enumerate(items):
            for alt in item.split(_OR):
                if not _INEQUALITY.match(alt):
                    raise _ConfigError(f"{where}[{i}]", f"{alt!r} is not an inequality like '< 700' or '== 3'")
    # a lone string stays one: both evaluators assert a list there and score such a task 0
    return value if isinstance(value, str) else items


def _check_url(url: str, where: str, *, allow_file: bool = False) -> str:
    url = url.strip()
    parts = urllib.parse.urlsplit(url)
    schemes = ("http", "https", "file") if allow_file else ("http", "https")
    if parts.scheme not in schemes or (parts.scheme != "file" and not parts.hostname):
        raise _ConfigError(where, f"{url!r} is not an absolute {'/'.join(schemes)} URL")
    try:
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError:
        raise _ConfigError(where, f"{url!r} has a malformed port") from None
    return url


_FUNC_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*$", re.S)
_FUNC_ARG = re.compile(r"""\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|(-?\d+\.\d+)|(-?\d+)"""
                       r"""|(True|False|None)|(__page__|__last_url__))\s*(,|\Z)""", re.S)
_PAGE_ARG, _LAST_URL_ARG = "__page__", "__last_url__"


class _Bare(str):
    """A bare (unquoted) __page__ / __last_url__ argument, told apart from the same text in quotes."""


def parse_helper_call(text: str) -> tuple[str, list[Any]]:
    """Parse ``name(args)`` from a ``func:`` url/locator without eval(), e.g.
    ``parse_helper_call("get_name(__page__, 'alice', 2)") == ("get_name", ["__page__", "alice", 2])``."""
    m = _FUNC_CALL.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a helper call like name('arg', 3)")
    name, body = m.group(1), m.group(2).strip()
    args: list[Any] = []
    pos = 0
    while pos < len(body):
        t = _FUNC_ARG.match(body, pos)
        if not t:
            raise ValueError(f"{text!r}: cannot parse the argument at {body[pos:]!r} (allowed: quoted strings, "
                             f"numbers, True/False/None, __page__, __last_url__)")
        sq, dq, num_f, num_i, const, bare = t.group(1, 2, 3, 4, 5, 6)
        if sq is not None or dq is not None:
            args.append(re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)),
                               sq if sq is not None else dq))
        elif num_f is not None:
            args.append(float(num_f))
        elif num_i is not None:
            args.append(int(num_i))
        elif const is not None:
            args.append({"True": True, "False": False, "None": None}[const])
        else:
            args.append(_Bare(bare))
        pos = t.end()
    return name, args


def _check_locator(locator: Any, where: str) -> str:
    if not isinstance(locator, str):
        raise _ConfigError(where, f"expected a string, got {locator!r}")
    stripped = locator.strip()
    if stripped.startswith("func:"):
        try:
            parse_helper_call(stripped[5:])
        except ValueError as e:
            raise _ConfigError(where, str(e)) from None
    elif stripped and not stripped.startswith(("document.", "[...document.", "lambda:")):
        raise _ConfigError(where, f"unknown locator {locator!r} (expected '', 'document.…', "
                                  f"'[...document.…', 'lambda:<JS function>' or 'func:name(args)')")
    return locator


def _check_program_html(targets: Any, where: str) -> list[dict]:
    if not isinstance(targets, list) or not targets:
        raise _ConfigError(where, f"expected a non-empty list of {{url, locator, required_contents}}, got {targets!r}")
    out = []
    for i, target in enumerate(targets):
        w = f"{where}[{i}]"
        if not isinstance(target, dict):
            raise _ConfigError(w, f"expected an object, got {target!r}")
        url = target.get("url")
        if not isinstance(url, str) or not url.strip():
            raise _ConfigError(f"{w}.url", f"expected 'last', a URL or 'func:name(args)', got {url!r}")
        if url.strip().startswith("func:"):
            try:
                parse_helper_call(url.strip()[5:])
            except ValueError as e:
                raise _ConfigError(f"{w}.url", str(e)) from None
        elif url.strip() != "last":
            _check_url(url, f"{w}.url", allow_file=True)
        _check_locator(target.get("locator", ""), f"{w}.locator")
        contents = target.get("required_contents")
        if not isinstance(contents, dict) or len(contents) != 1:
            raise _ConfigError(f"{w}.required_contents", f"expected one of {list(_CONTENT_KEYS)}, got {contents!r}")
        (key, value), = contents.items()
        if key not in _CONTENT_KEYS:
            raise _ConfigError(f"{w}.required_contents", f"unknown key {key!r} (expected one of {list(_CONTENT_KEYS)})")
        prep = target.get("prep_actions", [])
        if not isinstance(prep, list) or not all(isinstance(p, str) for p in prep):
            raise _ConfigError(f"{w}.prep_actions", f"expected a list of JS expressions, got {prep!r}")
        out.append({**target, "url": url.strip(), "locator": target.get("locator", ""),
                    "required_contents": {key: _check_reference(key, value, f"{w}.required_contents.{key}")}})
    return out


def _check_eval(ev: Any) -> dict:
    if not isinstance(ev, dict):
        raise _ConfigError("eval", f"expected an object, got {ev!r}")
    types = ev.get("eval_types")
    if not isinstance(types, list) or not types:
        raise _ConfigError("eval.eval_types", f"expected a non-empty list from {list(EVAL_TYPES)}, got {types!r}")
    for t in types:
        if t not in EVAL_TYPES:
            raise _ConfigError("eval.eval_types", f"unknown type {t!r} (expected one of {list(EVAL_TYPES)})")
    if len(set(types)) != len(types):
        raise _ConfigError("eval.eval_types", f"duplicate type in {types!r}")
    out = dict(ev)
    if "string_match" in types:
        refs = ev.get("reference_answers")
        if not isinstance(refs, dict) or not refs:
            raise _ConfigError("eval.reference_answers", f"string_match needs an object with one or more of "
                                                         f"{list(_ANSWER_KEYS)}, got {refs!r}")
        for key in refs:
            if key not in _ANSWER_KEYS:
                raise _ConfigError("eval.reference_answers", f"unknown key {key!r} (expected {list(_ANSWER_KEYS)})")
        out["reference_answers"] = {k: _check_reference(k, v, f"eval.reference_answers.{k}") for k, v in refs.items()}
        note = ev.get("string_note")
        if note is not None and not isinstance(note, str):
            raise _ConfigError("eval.string_note", f"expected a string, got {note!r}")
    if "url_match" in types:
        ref = ev.get("reference_url")
        if not isinstance(ref, str) or not ref.strip():
            raise _ConfigError("eval.reference_url", f"url_match needs a URL (alternatives joined by '{_OR}'), got {ref!r}")
        for alt in ref.split(_OR):
            _check_url(alt, "eval.reference_url", allow_file=True)
        rule = ev.get("url_note")
        if rule not in (None, "", *_URL_RULES):     # null and "" load: both evaluators raise on them (score 0)
            raise _ConfigError("eval.url_note", f"unknown rule {rule!r} (expected one of {list(_URL_RULES)})")
    if "program_html" in types:
        out["program_html"] = _check_program_html(ev.get("program_html"), "eval.program_html")
    return out


def webarena_task(raw: dict) -> Task:
    """One config object -> Task; a malformed field raises _ConfigError (the caller adds the task id)."""
    sites = raw.get("sites")
    if isinstance(sites, str):
        sites = [sites]
    if not isinstance(sites, list) or not sites or not all(isinstance(s, str) and s.strip() for s in sites):
        raise _ConfigError("sites", f"expected a non-empty list of site names, got {sites!r}")
    intent = raw.get("intent")
    if not isinstance(intent, str) or not intent.strip():
        raise _ConfigError("intent", f"expected a non-empty string, got {intent!r}")
    start = raw.get("start_url")
    if not isinstance(start, str) or not start.strip():
        raise _ConfigError("start_url", f"expected a URL (tabs joined by '{_AND}'), got {start!r}")
    start = _substitute_tree(start, "start_url")
    tabs = [_check_url(tab, f"start_url (tab {i})", allow_file=True) for i, tab in enumerate(start.split(_AND))]
    for key in ("require_login", "require_reset"):
        if not isinstance(raw.get(key, False), bool):
            raise _ConfigError(key, f"expected true or false, got {raw[key]!r}")
    storage = raw.get("storage_state")
    if storage is not None and not isinstance(storage, str):
        raise _ConfigError("storage_state", f"expected a file path, \"\" or null, got {storage!r}")
    storage = (storage or "").strip()      # "" = no storage state, as the paper's code reads it
    old = raw.get("old_task_id")
    if old is not None and (isinstance(old, bool) or not isinstance(old, (int, str))):
        raise _ConfigError("old_task_id", f"expected an int or a string, got {old!r}")
    ev = _check_eval(_substitute_tree(raw.get("eval"), "eval"))

    urls = list(tabs)
    if "url_match" in ev["eval_types"]:
        urls += ev["reference_url"].split(_OR)
    urls += [t["url"] for t in ev.get("program_html") or [] if t["url"] != "last" and not t["url"].startswith("func:")]
    urls += [u for u in (webarena_site_url(s.strip().upper()) for s in sites
                         if s.strip().upper() in WEBARENA_SITES) if u]
    hosts = {host_entry(u) for u in urls} | set(extra_origins())     # "file" for a file:// start tab
    return Task(task_id=str(raw["task_id"]), site="+".join(s.strip() for s in sites), intent=intent.strip(),
                start_url=_AND.join(tabs), eval=ev,
                # relative paths resolve against the working directory, as in WebArena ("./.auth/...")
                storage_state=os.path.abspath(storage) if storage else None,
                require_login=bool(raw.get("require_login", False)),
                allowed_hosts=tuple(sorted(h for h in hosts if h)))


def extra_origins() -> list[str]:
    """Origins from $WA_EXTRA_ORIGINS (comma-separated "http://host:port" URLs or "host:port") that every
    WebArena task may reach besides its sites, e.g. the map's tile, geocoding and routing servers."""
    out = []
    for item in os.environ.get("WA_EXTRA_ORIGINS", "").split(","):
        item = item.strip()
        if not item:
            continue
        entry = host_entry(item if "://" in item else "http://" + item)
        if not entry or entry == "file" or (":" not in entry.rsplit("]", 1)[-1]):
            raise ValueError(f"WA_EXTRA_ORIGINS: {item!r} is not a URL or host:port")
        out.append(entry)
    return out


def load_webarena_tasks(path: str) -> list[Task]:
    """Read a WebArena / WebArena-Lite config JSON (a list or one task) into Tasks, e.g.
    ``load_webarena_tasks("config_files/wa_lite.json")[0].task_id == "0"``. Site placeholders are
    substituted from WA_<SITE> / <SITE>; any malformed field raises ``ValueError("task 17: eval.eval_types:
    unknown type 'foo' (in config.json)")``."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); save the config as UTF-8") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it ({e.strerror})") from None
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise ValueError(f"{path}: no tasks in the config")
    tasks: list[Task] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"task #{i}: expected a JSON object, got {type(item).__name__} (in {path})")
        tid = item.get("task_id")
        if isinstance(tid, bool) or not isinstance(tid, (int, str)) or not str(tid).strip():
            raise ValueError(f"task #{i}: task_id: expected an int or a non-empty string, got {tid!r} (in {path})")
        try:
            task = webarena_task(item)
        except _ConfigError as e:
            raise ValueError(f"task {tid}: {e} (in {path})") from None
        if task.task_id in seen:
            raise ValueError(f"task {tid}: task_id: duplicate id (in {path})")
        seen.add(task.task_id)
        tasks.append(task)
    return tasks


# ---- WebArena tasks and rubrics: the evaluators' string rules ----
# Two rubrics, each a re-implementation of one published evaluator, verdict for verdict:
#   "vab": VisualAgentBench's WebArena-Lite evaluators (VAB-WebArena-Lite/new/evaluators.py), the paper's;
#   "webarena": WebArena's original evaluation_harness/evaluators.py.
# Where the original raises (an assert, a type check, an unknown rule), its run loop records no score and
# the task counts as failed: here it scores 0 with the reason in details["reasons"] (_Crash).

RUBRICS = ("vab", "webarena")
_URL_DEFAULT = {"vab": "EXACT", "webarena": "GOLD in PRED"}     # url_match without a url_note


class _Crash(ValueError):
    """The original evaluator raises here; the task scores 0."""


def _clean(text: str, rubric: str) -> str:
    """clean_answer: WebArena strips whitespace first, VAB does not; then one pair of enclosing quotes goes
    and the text is lower-cased, e.g. ``_clean(' "Bob" ', "webarena") == "bob"``, ``_clean(' "Bob" ', "vab")
    == ' "bob" '``, ``_clean("'", "vab") == ""``."""
    if rubric == "webarena":
        text = text.strip()
    if text[:1] in ("'", '"') and text.endswith(text[:1]):
        text = text[1:-1]
    return text.lower()


# NLTK's word_tokenize (both evaluators tokenize with it), re-implemented without NLTK and its data: the
# Treebank rules of NLTKWordTokenizer, applied per sentence. Punkt's sentence split is approximated: a period
# followed by white space ends a sentence, except after a number or a single letter when the next word starts
# with a lower-case letter or with , ; : . ! ?, and after a single letter before any letter (punkt's
# ordinal/initial heuristic). Punkt's abbreviation list and word statistics are not reproduced ("dr. who":
# NLTK keeps "dr.", here "dr" "."). The evaluators tokenize lower-cased text only.
_TB_FIRST = [(re.compile(p, re.I), r) for p, r in [
    (r"([«“‘„]|`+)", r" \1 "), (r'^"', "``"), (r"(``)", r" \1 "), (r"([ (\[{<])(\"|'')", r"\1 `` "),
    (r"(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)", r"\1 "),
    (r"([^.])(\.)([\])}>\"'»”’ ]*)\s*$", r"\1 \2 \3 "),                  # the sentence's final period
    (r"([:,])([^\d])", r" \1 \2"), (r"([:,])$", r" \1 "), (r"\.{2,}", r" \g<0> "), (r"[;@#$%&]", r" \g<0> "),
    (r"[\u2012-\u2015]", r" \g<0> "), (r"[?!]", r" \g<0> "), (r"([^'])' ", r"\1 ' "), (r"[*]", r" \g<0> "),
    (r"[\][(){}<>]", r" \g<0> "), (r"--", r" -- ")]]
_TB_LAST = [(re.compile(p, re.I), r) for p, r in [
    (r"([»”’])", r" \1 "), (r"''", " '' "), (r'"', " '' "), (r"\s+", " "),
    (r"([^' ])('s|'m|'d|') ", r"\1 \2 "), (r"([^' ])('ll|'re|'ve|n't) ", r"\1 \2 "),
    (r"\b(can)(not)\b", r" \1 \2 "), (r"\b(d)('ye)\b", r" \1 \2 "), (r"\b(gim)(me)\b", r" \1 \2 "),
    (r"\b(gon)(na)\b", r" \1 \2 "), (r"\b(got)(ta)\b", r" \1 \2 "), (r"\b(lem)(me)\b", r" \1 \2 "),
    (r"\b(more)('n)\b", r" \1 \2 "), (r"\b(wan)(na)(?=\s)", r" \1 \2 "), (r" ('t)(is)\b", r" \1 \2 "),
    (r" ('t)(was)\b", r" \1 \2 ")]]
_SENTENCE_END = re.compile(r"(?<=[^\s.])\.\s+(?=(\S?))")
_NUMBER = re.compile(r"-?[.,]?\d[\d,.-]*")


def word_tokenize(text: str) -> list[str]:
    """NLTK's word_tokenize as the evaluators use it, e.g. ``word_tokenize("it costs $25.99, not 10.")
    == ["it", "costs", "$", "25.99", ",", "not", "10", "."]``."""
    sentences, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        words = text[start:m.start()].split()
        word, nxt = words[-1], m.group(1)
        initial = len(word) == 1 and word.isalpha()
        lower_or_punct = nxt.islower() or (nxt != "" and nxt in ",;:.!?")
        if not ((initial and nxt.isalpha()) or ((initial or _NUMBER.fullmatch(word)) and lower_or_punct)):
            sentences.append(text[start:m.end()])
            start = m.end()
    sentences.append(text[start:])
    tokens = []
    for s in sentences:
        for pattern, repl in _TB_FIRST:
            s = pattern.sub(repl, s)
        s = f" {s} "
        for pattern, repl in _TB_LAST:
            s = pattern.sub(repl, s)
        tokens += s.split()
    return tokens


def _contains(ref: str, pred: str, rubric: str, *, tokenize: bool = True, slashes: bool = True) -> bool:
    """must_include of one reference: a substring test, except for a reference that is one word token, which
    must be a whole token of the answer (VAB: any such reference, and the parts of a token with '/' count as
    tokens; WebArena: only a one-character reference, and only when ``tokenize``, i.e. the config lists one
    reference). E.g. VAB ``"0"`` is not in ``"10 items"``; WebArena ``"cat"`` is in ``"concatenate"``."""
    ref, pred = _clean(ref, rubric), _clean(pred, rubric)
    if rubric == "vab":
        one_token = len(word_tokenize(ref)) == 1
    else:
        one_token = tokenize and len(ref) == 1 and len(word_tokenize(ref)) == 1
    if not one_token:
        return ref in pred
    tokens = word_tokenize(pred)
    if rubric == "vab" and slashes:
        tokens += [part for t in tokens if "/" in t for part in t.split("/")]
    return ref in tokens


def _to_int(value: Any) -> int | None:
    """NumericEvaluator.str_2_int (VAB): strip, drop commas, int(); None if that fails ("3.5", "five")."""
    try:
        return int(value.strip().replace(",", ""))
    except ValueError:
        return None


_VAB_OPS = (("<=", lambda x, y: x <= y + 1e-8), (">=", lambda x, y: x >= y - 1e-8),
            ("==", lambda x, y: abs(x - y) <= 1e-8),
            ("<", lambda x, y: x < y + 1e-8), (">", lambda x, y: x > y - 1e-8))   # strict ones include y


def _inequality(value: int | float, inequality: str) -> bool:
    """NumericEvaluator.compare_inequality (VAB), e.g. ``_inequality(700, "< 700") is True`` (the tolerance
    makes "<" and ">" inclusive)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Crash(f"required_values compares numbers, got {value!r}")
    for op, holds in _VAB_OPS:
        if op in inequality:
            return holds(value, float(inequality.split(op)[1].strip()))
    raise _Crash(f"invalid inequality {inequality!r}")


def _required_values(value: Any, refs: Any, where: str, reasons: list[str]) -> float:
    if not isinstance(refs, list):
        raise _Crash(f"{where}: VAB asserts a list, got {refs!r}")
    if isinstance(value, str):
        value = _to_int(value)
    if value is None:
        reasons.append(f"{where}: not an integer")
        return 0.0
    failed = [r for r in refs if not any(_inequality(value, alt) for alt in r.split(_OR))]
    if failed:
        reasons.append(f"{where}: {value!r} does not satisfy {failed!r}")
    return 0.0 if failed else 1.0


def _need_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _Crash(f"{where}: the evaluator needs a string here, got {value!r}")
    return value


def _need_list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise _Crash(f"{where}: the evaluator asserts a list, got {value!r}")
    return value


def _short(text: Any, n: int = 200) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n] + f"... [{len(text)} chars]"


async def _ask_judge(judge: Any, question: str, reference: str, answer: str, where: str,
                     reasons: list[str]) -> float:
    """judge(question, reference, answer) -> score (sync or async); 1.0 at >= 0.5, else 0.0."""
    if judge is None:
        msg = f"{where}: needs a judge (fuzzy_match / N/A) but none was given; scored 0"
        _wa_log.warning(msg)
        reasons.append(msg)
        return 0.0
    result = judge(question, reference, answer)
    if inspect.isawaitable(result):
        result = await asyncio.wait_for(result, JUDGE_TIMEOUT_S)
    if float(result) < 0.5:
        reasons.append(f"{where}: the judge scored {float(result):g} for answer {answer!r} vs {reference!r}")
        return 0.0
    return 1.0


async def _string_match(task: Task, answer: str, rubric: str, judge: Any, reasons: list[str]) -> float:
    """StringEvaluator: every reference kind in config order, scores multiplied. The answer is cleaned once
    here and again by each check (as in both originals). VAB: required_values turns the answer into an int
    for the kinds after it; one_of, must_exclude and required_values exist only there (WebArena ignores
    them); fuzzy_match joins its references with ", " for one judge call (WebArena: a call per reference)."""
    pred: Any = _clean(answer, rubric)
    score = 1.0
    for key, value in task.eval["reference_answers"].items():
        where = f"string_match.{key}"
        if key == "exact_match":
            if pred is None:
                raise _Crash(f"{where}: the answer is not an integer (None after required_values)")
            ok = _clean(str(pred), rubric) == _clean(value, rubric)
            score *= ok
            if not ok:
                reasons.append(f"{where}: {_short(answer)!r} != {value!r}")
        elif key == "must_include":
            for item in _need_list(value, where):
                alts = item.split(_OR) if rubric == "vab" else [item]     # WebArena: |OR| is literal text
                ok = any(_contains(alt, _need_str(pred, where), rubric, tokenize=len(value) == 1) for alt in alts)
                score *= ok
                if not ok:
                    reasons.append(f"{where}: missing {item!r} in {_short(answer)!r}")
        elif key == "fuzzy_match" and value == "N/A":
            score *= _clean(_need_str(pred, where), rubric) == "n/a"
            if score != 1:      # the reason is judged; a score of earlier kinds is replaced, as in both originals
                note = task.eval.get("string_note")
                score = await _ask_judge(judge, task.intent, _need_str(note, "eval.string_note"), pred,
                                         f"{where} (N/A)", reasons)
        elif key == "fuzzy_match":
            refs = _need_list(value, where)
            for ref in ([", ".join(refs)] if rubric == "vab" else refs):
                score *= await _ask_judge(judge, task.intent, ref, _need_str(pred, where), where, reasons)
        elif rubric == "webarena":
            continue            # no such case in WebArena's StringEvaluator: the key is ignored
        elif key == "required_values":
            score *= _required_values(_need_str(pred, where), value, where, reasons)
            pred = _to_int(pred)
        elif key == "must_exclude":
            present = [item for item in _need_list(value, where)
                       if _contains(item, _need_str(pred, where), rubric, slashes=False)]
            score *= not present
            if present:
                reasons.append(f"{where}: must not contain {present!r}: {_short(answer)!r}")
        elif key == "one_of":
            ok = any(_clean(v, rubric) in _need_str(pred, where) for v in _need_list(value, where))
            score *= ok
            if not ok:
                reasons.append(f"{where}: none of {value!r} in {_short(answer)!r}")
    return float(score)


# ---- WebArena tasks and rubrics: url_match ----

def url_matches(page_url: str, reference_url: str, rule: str | None = None, rubric: str = "vab") -> bool:
    """url_match of the agent's page URL; ``reference_url`` may hold alternatives joined by `` |OR| ``;
    ``rule`` is the config's url_note, None when it has none (VAB then uses EXACT, WebArena GOLD in PRED).

    VAB: "localhost" becomes "127.0.0.1" and one trailing "/" goes; EXACT = equal to an alternative,
    GOLD in PRED = an alternative is a substring of the whole URL, query included:
    ``url_matches("http://h/a/b?q=1&x=2", "http://h/a/b?q=1", "GOLD in PRED")`` is True, with the query
    parameters swapped it is False. WebArena: every trailing "/" goes; only GOLD in PRED exists: an
    alternative's host+path is a substring of the page's host+path, and each query parameter of ANY
    alternative (pooled) has one of its values in the page's query. A rule the evaluator lacks raises
    ``_Crash`` (a ValueError)."""
    refs = reference_url.split(_OR)
    if rubric == "vab":
        def clean(u: str) -> str:
            u = u.replace("localhost", "127.0.0.1")
            return u[:-1] if u.endswith("/") else u
        pred, refs = clean(page_url), [clean(r) for r in refs]
        rule = _URL_DEFAULT["vab"] if rule is None else rule
        if rule == "EXACT":
            return pred in refs
        if rule == "GOLD in PRED":
            return any(r in pred for r in refs)
        raise _Crash(f"url_match: VAB has no url_note {rule!r}")
    rule = _URL_DEFAULT["webarena"] if rule is None else rule
    if rule != "GOLD in PRED":
        raise _Crash(f"url_match: WebArena has no url_note {rule!r} (only 'GOLD in PRED')")
    pred = urllib.parse.urlparse(page_url.rstrip("/"))
    pred_query = urllib.parse.parse_qs(pred.query)
    wanted: dict[str, set[str]] = {}
    bases = []
    for r in refs:
        parts = urllib.parse.urlparse(r.rstrip("/"))
        bases.append(parts.netloc + parts.path)
        for k, vals in urllib.parse.parse_qs(parts.query).items():
            wanted.setdefault(k, set()).update(vals)
    return (any(b in pred.netloc + pred.path for b in bases)
            and all(any(v in pred_query.get(k, []) for v in vals) for k, vals in wanted.items()))


# ---- WebArena tasks and rubrics: helper functions ----
# The `func:` helpers that WebArena / WebArena-Lite configs name, re-implemented from WebArena's
# evaluation_harness/helper_functions.py (VAB's helper_functions_eval.py has the same five): same names, same
# arguments after the page, same site APIs and page reads. evaluate() uses them unless ``helpers=`` supplies
# its own under the same name. Like every helper here they take the page first; the originals' site URLs
# come from WA_<SITE> / <SITE> and the shopping admin's account from WEBARENA_ACCOUNTS. Where an original
# raises (an HTTP status other than 200, no order at all) these raise too, and the task scores 0.

#: WebArena's default accounts (browser_env/env_config.py ACCOUNTS): ``webarena_login`` signs in with them and
#: the shopping helpers get a Magento admin token with "shopping_site_admin"; change an entry to use others.
WEBARENA_ACCOUNTS = {
    "reddit": {"username": "MarvelsGrantMan136", "password": "test1234"},
    "gitlab": {"username": "byteblaze", "password": "hello1234"},
    "shopping": {"username": "emma.lopez@gmail.com", "password": "Password.123"},
    "shopping_admin": {"username": "admin", "password": "admin1234"},
    "shopping_site_admin": {"username": "admin", "password": "admin1234"},
}


def _site(name: str) -> str:
    url = webarena_site_url(name)
    if url is None:
        raise ValueError(f"WebArena site {name} is unknown here: this needs WA_{name} (or {name}) set to its URL")
    return url


def _http_json(url: str, *, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    """(status, parsed JSON) of a GET (or a POST of ``body`` as JSON), without cookies, as the originals'
    ``requests`` calls; a non-JSON body parses to None."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=CHECK_TIMEOUT_S) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


def _shopping_get(path: str, params: dict[str, str] | None = None) -> Any:
    """GET ``$SHOPPING/rest/V1/{path}`` as the shopping site's admin (a fresh token per call, as the originals
    do); the JSON, or RuntimeError unless the status is 200."""
    account = WEBARENA_ACCOUNTS["shopping_site_admin"]
    status, token = _http_json(f"{_site('SHOPPING')}/rest/default/V1/integration/admin/token",
                               body={"username": account["username"], "password": account["password"]})
    if status != 200 or not isinstance(token, str):
        raise RuntimeError(f"no Magento admin token for {account['username']!r} (HTTP {status}: {token!r})")
    url = f"{_site('SHOPPING')}/rest/V1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    status, obj = _http_json(url, token=token)
    if status != 200:
        raise RuntimeError(f"GET {url}: HTTP {status}: {_short(obj)}")
    return obj


async def shopping_get_latest_order_url(page: Any) -> str:
    """The customer page of the shop's most recently created order (REST, as the shopping admin), e.g.
    ``"http://shop:7770/sales/order/view/order_id/190/"`` for increment id "000000190"."""
    params = {"searchCriteria[sortOrders][0][field]": "created_at",
              "searchCriteria[sortOrders][0][direction]": "DESC", "searchCriteria[pageSize]": "1"}
    orders = await asyncio.to_thread(_shopping_get, "orders", params)
    return f"{_site('SHOPPING')}/sales/order/view/order_id/{int(orders['items'][0]['increment_id'])}/"


async def _latest_reviews(sku: str) -> list:
    return await asyncio.to_thread(_shopping_get, f"products/{urllib.parse.quote(sku, safe='')}/reviews")


async def shopping_get_sku_latest_review_author(page: Any, sku: str) -> str:
    """The nickname on product ``sku``'s latest review (the last one the reviews API lists); "" if none."""
    reviews = await _latest_reviews(sku)
    return reviews[-1]["nickname"] if reviews else ""


async def shopping_get_sku_latest_review_rating(page: Any, sku: str) -> str:
    """The percent of the latest review's first rating, as a string ("80" = 4 stars); "" if none. Like the
    original it asserts that the first review's first rating is the one named "Rating"."""
    reviews = await _latest_reviews(sku)
    if not reviews:
        return ""
    if reviews[0]["ratings"][0]["rating_name"] != "Rating":
        raise RuntimeError(f"{sku}: the first rating is {reviews[0]['ratings'][0]['rating_name']!r}, not 'Rating'")
    return str(reviews[-1]["ratings"][0]["percent"])


async def reddit_get_post_url(page: Any, url: str) -> str:
    """The post page of a forum URL below it (a comment, a sorted view), other URLs as they are, e.g.
    ``"http://r:9999/f/books/7/-/comment/3"`` -> ``"http://r:9999/f/books/7/"``."""
    parts = urllib.parse.urlparse(url)
    segments = parts.path.split("/")
    if len(segments) < 4 or segments[1] != "f":
        return url
    return f"{parts.scheme}://{parts.netloc}/f/{segments[2]}/{segments[3]}/"


_GITLAB_ROLE_JS = """(account) => {
    const names = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
    const i = names.findIndex((e) => e.outerText === '@' + account);
    return document.querySelectorAll("td.col-max-role span")[i].outerText;
}"""


async def gitlab_get_project_memeber_role(page: Any, account_name: str) -> str:
    """The role ("Developer", ...) shown for ``@account_name`` on a GitLab project_members page; "" when the
    page has no such member or no members table. (The misspelling is WebArena's: configs name it so.)"""
    try:
        return await page.evaluate(_GITLAB_ROLE_JS, account_name)
    except PlaywrightError:
        return ""


#: The helpers evaluate() knows by name; ``evaluate(..., helpers={name: fn})`` adds or replaces entries.
WEBARENA_HELPERS = {fn.__name__: fn for fn in (
    shopping_get_latest_order_url, shopping_get_sku_latest_review_author, shopping_get_sku_latest_review_rating,
    reddit_get_post_url, gitlab_get_project_memeber_role)}


# ---- WebArena tasks and rubrics: program_html ----

async def _call_helper(spec: str, page: Any, helpers: dict, where: str, reasons: list[str]) -> Any:
    """Run ``func:name(args)`` as helpers[name](page, *args) with __last_url__ = ``page.url``; None (with a
    reason) if it is not supplied. A helper that raises crashes the original evaluator: _Crash."""
    name, args = parse_helper_call(spec)
    fn = helpers.get(name)
    if fn is None:
        msg = f"{where}: helper {name!r} was not supplied (pass helpers={{{name!r}: fn}}); scored 0"
        _wa_log.warning(msg)
        reasons.append(msg)
        return None
    call_args = []
    for a in args:
        if isinstance(a, _Bare):
            if a == _LAST_URL_ARG:
                call_args.append(page.url)
            # a bare __page__ is dropped: the page is always the first argument
        elif isinstance(a, str):
            call_args.append(a.replace(_LAST_URL_ARG, page.url))
        else:
            call_args.append(a)
    try:
        result = fn(page, *call_args)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, CHECK_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001  (any error of a helper is the original's crash)
        raise _Crash(f"{where}: helper {name!r} raised {type(e).__name__}: {_first_line(e)}") from None
    return result


async def _select(page: Any, target: dict, rubric: str, helpers: dict, where: str, reasons: list[str]) -> Any:
    """What a locator selects: "" = page.content(); a ``document.`` JS expression = str() of its value after
    the prep_actions (the first failing one ends them; a throwing locator selects ""; null selects "None");
    ``lambda:`` (VAB only) = the JS function's value as it is, so a number stays a number for
    required_values (a falsy value or a throw selects None: "the page is wrong"); ``func:`` = the helper's
    value as it is. WebArena then HTML-unescapes the selection; VAB does not."""
    locator = target.get("locator", "")
    if not locator.strip():
        selected: Any = await page.content()
    elif locator.startswith("func:"):
        selected = await _call_helper(locator[5:], page, helpers, f"{where}.locator", reasons)
    elif locator.startswith("lambda:"):
        if rubric == "webarena":
            raise _Crash(f"{where}: WebArena's program_html has no 'lambda:' locator")
        try:       # VAB strips the prefix with lstrip("lambda:"), which takes those letters, not the word
            selected = await asyncio.wait_for(page.evaluate(locator.lstrip("lambda:")), CHECK_TIMEOUT_S)
        except (PlaywrightError, asyncio.TimeoutError) as e:
            reasons.append(f"{where}.locator: {locator!r} failed on {page.url}: {_first_line(e) or 'timeout'}")
            selected = None
        selected = selected or None
    else:
        try:
            for prep in target.get("prep_actions", []):
                await asyncio.wait_for(page.evaluate(f"() => {prep}"), CHECK_TIMEOUT_S)
        except (PlaywrightError, asyncio.TimeoutError) as e:
            reasons.append(f"{where}.prep_actions failed: {_first_line(e)}")
        try:
            selected = str(await asyncio.wait_for(page.evaluate(f"() => {locator}"), CHECK_TIMEOUT_S))
        except (PlaywrightError, asyncio.TimeoutError) as e:    # the original's rule: the page is wrong -> ""
            reasons.append(f"{where}.locator: {locator!r} failed on {page.url}: {_first_line(e) or 'timeout'}")
            selected = ""
    if rubric == "webarena":
        if not isinstance(selected, str):
            raise _Crash(f"{where}: WebArena HTML-unescapes the selection, which is {selected!r}")
        selected = _html.unescape(selected)
    return selected


async def _required_contents(task: Task, target: dict, selected: Any, rubric: str, judge: Any, where: str,
                             reasons: list[str]) -> float:
    """One target's required_contents, the first kind present of exact_match, must_include, must_exclude,
    required_values, fuzzy_match (WebArena: only the first two; the others raise). The selection is not
    cleaned first (exact_match and must_include clean it, WebArena's strip included)."""
    contents = target["required_contents"]
    key = next(k for k in _CONTENT_KEYS if k in contents)
    ref, where = contents[key], f"{where}.required_contents.{key}"
    if rubric == "webarena" and key not in ("exact_match", "must_include"):
        raise _Crash(f"{where}: WebArena's program_html has no {key!r}")
    if key == "exact_match":
        if isinstance(selected, bool) or not isinstance(selected, (str, int)):
            raise _Crash(f"{where}: exact_match takes a string or an int, got {selected!r}")
        ok = _clean(str(selected), rubric) == _clean(ref, rubric)
        if not ok:
            reasons.append(f"{where}: {_short(selected)!r} != {ref!r}")
        return float(ok)
    if key == "required_values":
        return _required_values(selected, ref, where, reasons)
    if key == "fuzzy_match":
        return await _ask_judge(judge, task.intent, ", ".join(_need_list(ref, where)), _need_str(selected, where),
                                where, reasons)
    selected = _need_str(selected, where)
    if key == "must_include":
        missing = [item for item in _need_list(ref, where)
                   if not any(_contains(alt, selected, rubric, tokenize=False) for alt in item.split(_OR))]
        if missing:
            reasons.append(f"{where}: missing {missing!r} in {_short(selected)!r}")
        return 0.0 if missing else 1.0
    present = []                                            # must_exclude
    for item in _need_list(ref, where):
        if _OR in item:
            raise _Crash(f"{where}: VAB asserts no '|OR|' in {item!r}")
        if _contains(item, selected, rubric, slashes=False):
            present.append(item)
    if present:
        reasons.append(f"{where}: must not contain {present!r}: {_short(selected)!r}")
    return 0.0 if present else 1.0


async def _open_probe(page: Any, allowed: set[str]) -> tuple[Any, Any]:
    """(context, page) for checking a program_html URL: a fresh context holding the agent's cookies and
    local storage (its storage_state), so the agent's tabs and history are untouched and the env, which
    makes any new tab of the agent's context the active one, sees nothing. It reaches only the hosts in
    ``allowed`` (read at each request: the caller adds each target's host), like the agent's own context.
    (None, page) for a persistent context, which cannot have a sibling: then it is a new tab of the agent's
    context, under that context's allow-list."""
    browser = page.context.browser
    if browser is None:
        return None, await asyncio.wait_for(page.context.new_page(), CHECK_TIMEOUT_S)
    state = await asyncio.wait_for(page.context.storage_state(), CHECK_TIMEOUT_S)
    # its connections go through the sandbox proxy too (redirect hops included), checked against ``allowed``
    ctx = await new_proxied_context(browser, allowed, timeout=CHECK_TIMEOUT_S, storage_state=state,
                                    accept_downloads=False, service_workers="block")

    async def only_allowed(route: Any) -> None:
        with contextlib.suppress(PlaywrightError):        # the probe may close meanwhile
            if outside_hosts_re(tuple(sorted(allowed))).match(route.request.url):
                await route.abort("blockedbyclient")
            else:
                await route.continue_()
    try:
        await asyncio.wait_for(ctx.route("**/*", only_allowed), CHECK_TIMEOUT_S)
        ctx.set_default_timeout(NAV_TIMEOUT_MS)
        return ctx, await asyncio.wait_for(ctx.new_page(), CHECK_TIMEOUT_S)
    except BaseException:
        await ctx.close()
        raise


async def _program_html(task: Task, page: Any, rubric: str, judge: Any, helpers: dict,
                        reasons: list[str]) -> float:
    """HTMLContent(Exact)Evaluator: the targets in order, scores multiplied. The originals navigate the agent's
    page to a target's URL, so a later "last" target (and __last_url__) sees that page: here the navigation
    happens in one probe page holding the agent's cookies, which then stands for "last"."""
    current, probe_ctx, probe = page, None, None
    allowed = set(family_of(task).hosts(task))   # the probe reaches the task's hosts and the targets' own
    try:
        for i, target in enumerate(task.eval["program_html"]):
            where = f"program_html[{i}]"
            url = substitute_placeholders(target["url"].strip())
            if url.startswith("func:"):
                url = await _call_helper(url[5:], current, helpers, f"{where}.url", reasons)
                if url is None:
                    return 0.0
                url = str(url)
            if url != "last":
                allowed.add(host_entry(url))
                if probe is None:
                    probe_ctx, probe = await _open_probe(page, allowed)
                try:
                    await probe.goto(url, wait_until="load", timeout=NAV_TIMEOUT_MS)
                except PlaywrightError as e:  # includes Playwright's TimeoutError
                    raise _Crash(f"{where}.url: cannot open {url}: {_first_line(e)}") from None
                with contextlib.suppress(PlaywrightTimeoutError):   # a page that keeps polling is read as it is
                    await probe.wait_for_load_state("networkidle", timeout=SETTLE_TIMEOUT_MS)
                current = probe
            selected = await _select(current, target, rubric, helpers, where, reasons)
            if selected is None:        # VAB: "the page is wrong"; WebArena crashed on it in _select
                reasons.append(f"{where}: the locator selected nothing (None)")
                return 0.0
            if not await _required_contents(task, target, selected, rubric, judge, where, reasons):
                return 0.0
        return 1.0
    finally:
        if probe is not None:
            with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
                await asyncio.wait_for((probe_ctx or probe).close(), CHECK_TIMEOUT_S)


# ---- WebArena tasks and rubrics: evaluate ----

async def evaluate(task: Task, page: Any, answer: str | None, *, judge: Any = None, helpers: Any = None,
                   rubric: str = "vab", details: dict | None = None) -> float:
    """A WebArena task's binary score: its eval types (string_match / url_match / program_html) in config
    order, scores multiplied; 0.0 or 1.0. ``rubric``: "vab" (default; VisualAgentBench's WebArena-Lite
    evaluators, which scored the paper) or "webarena" (WebArena's original ones); README: "Rubrics".

    ``answer`` is the exit() message as the agent wrote it (None = ""). ``judge(question, reference, answer)
    -> float`` (sync or async) scores fuzzy_match and N/A; ``helpers`` maps ``func:`` names to
    ``fn(page, *args)`` (sync or async), on top of the built-in WEBARENA_HELPERS. Where the original evaluator
    raises on the config or a value, the task scores 0 and the reason says so. Pass ``details={}`` to get
    ``{"rubric": ..., "scores": {eval_type: 0/1, or None when skipped after a 0}, "reasons": [...]}``, e.g. ``await evaluate(task, env.page, "Alice", details=d)`` -> 0.0
    with d["reasons"] == ["string_match.exact_match: 'Alice' != 'Bob'"]."""
    if rubric not in RUBRICS:
        raise ValueError(f"unknown rubric {rubric!r} (expected one of {list(RUBRICS)})")
    details = {} if details is None else details
    details["rubric"] = rubric
    reasons: list[str] = details.setdefault("reasons", [])
    scores: dict[str, float | None] = details.setdefault("scores", {})
    types = (task.eval or {}).get("eval_types") or []
    if not types:
        raise ValueError(f"task {task.task_id}: eval.eval_types: no rubric to evaluate")
    total = 1.0
    for kind in types:
        if total == 0.0:  # scores multiply: skip the rest (judge calls and page loads cost)
            scores[kind] = None
            continue
        try:
            if kind == "string_match":
                score = await _string_match(task, answer or "", rubric, judge, reasons)
            elif kind == "url_match":
                ev = task.eval
                if "url_note" in ev and ev["url_note"] is None:
                    raise _Crash("url_match: url_note is null (both originals raise; WebAgent-R1's own copy of "
                                 "the VAB evaluator reads it as EXACT)")
                ref = substitute_placeholders(ev["reference_url"])
                score = float(url_matches(page.url, ref, ev.get("url_note"), rubric))
                if not score:
                    reasons.append(f"url_match ({ev.get('url_note', _URL_DEFAULT[rubric])}): {page.url} vs {ref}")
            elif kind == "program_html":
                score = await _program_html(task, page, rubric, judge, {**WEBARENA_HELPERS, **(helpers or {})},
                                             reasons)
            else:
                raise ValueError(f"task {task.task_id}: eval.eval_types: unknown type {kind!r}")
        except _Crash as e:
            reasons.append(f"{e} -- the {rubric} evaluator raises here; scored 0")
            score = 0.0
        scores[kind] = score
        total *= score
    if total == 0.0 and reasons:
        _wa_log.info("task %s scored 0 (%s): %s", task.task_id, rubric, "; ".join(reasons))
    return 1.0 if total > 0 else 0.0


# ---- WebArena logins ----
# After WebArena's browser_env/auto_login.py: the same sign-in pages and fields, the same check that a login
# holds (a page only a signed-in user gets), the same storage-state files (one per site, one per pair of sites
# signed into together, "<a>.<b>_state.json" with the names sorted; reddit is never paired with a shopping
# site, whose cookies share its host). Configs name those files (storage_state "./.auth/gitlab_state.json").

LOGIN_SITES = ("gitlab", "shopping", "shopping_admin", "reddit")


def login_files(sites: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The storage-state files WebArena's auto_login writes for ``sites``: file name -> the sites it is signed
    into, e.g. ``login_files(["reddit", "gitlab"]) == {"gitlab_state.json": ("gitlab",), "reddit_state.json":
    ("reddit",), "gitlab.reddit_state.json": ("gitlab", "reddit")}``."""
    unknown = [s for s in sites if s not in LOGIN_SITES]
    if unknown:
        raise ValueError(f"no login for site(s) {unknown} (sites with a login: {', '.join(LOGIN_SITES)})")
    names = sorted(set(sites))
    combos = [(s,) for s in names] + [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
                                      if not ("reddit" in (a, b) and {a, b} & {"shopping", "shopping_admin"})]
    return {f"{'.'.join(c)}_state.json": c for c in combos}


async def _sign_in(page: Any, site: str, account: dict[str, str]) -> None:
    user, password = account["username"], account["password"]
    if site == "shopping":
        await page.goto(f"{_site('SHOPPING')}/customer/account/login/")
        await page.get_by_label("Email", exact=True).fill(user)
        await page.get_by_label("Password", exact=True).fill(password)
        await page.get_by_role("button", name="Sign In").click()
    elif site == "reddit":
        await page.goto(f"{_site('REDDIT')}/login")
        await page.get_by_label("Username").fill(user)
        await page.get_by_label("Password").fill(password)
        await page.get_by_role("button", name="Log in").click()
    elif site == "shopping_admin":
        await page.goto(_site("SHOPPING_ADMIN"))
        await page.get_by_placeholder("user name").fill(user)
        await page.get_by_placeholder("password").fill(password)
        await page.get_by_role("button", name="Sign in").click()
    else:  # gitlab
        await page.goto(f"{_site('GITLAB')}/users/sign_in")
        await page.get_by_test_id("username-field").fill(user)
        await page.get_by_test_id("password-field").fill(password)
        await page.get_by_test_id("sign-in-button").click()
    await page.wait_for_load_state("load")


async def _signed_in(page: Any, site: str, account: dict[str, str]) -> str | None:
    """None if ``page``'s context is signed into ``site`` (auto_login's is_expired check: a page that stays at
    its URL, or shows a word, only for a signed-in user), else what went wrong."""
    path, word = {"gitlab": ("/-/profile", None), "shopping": ("/wishlist/", None),
                  "shopping_admin": ("/dashboard", "Dashboard"),
                  "reddit": (f"/user/{account['username']}/account", "Delete")}[site]
    url = _site(site.upper()) + path
    await page.goto(url)
    if word is not None:
        return None if word in await page.content() else f"{url} does not show {word!r}"
    return None if page.url == url else f"{url} went to {page.url}"


async def webarena_login(sites: Sequence[str] = LOGIN_SITES, out_dir: str = ".auth", *,
                         accounts: dict[str, dict[str, str]] | None = None, pool: Any = None) -> list[str]:
    """Sign into WebArena ``sites`` (URLs from WA_<SITE> / <SITE>) and write the storage-state files of
    ``login_files(sites)`` into ``out_dir``; returns their paths. ``accounts`` replaces entries of
    WEBARENA_ACCOUNTS (WebArena's default accounts); ``pool`` is a BrowserPool to use (default: a new one).
    A sign-in page without its fields, or a login that does not hold, raises RuntimeError naming the site, e.g.
    ``await webarena_login(["shopping", "reddit"], ".auth")`` -> [".auth/reddit_state.json",
    ".auth/shopping_state.json"] (the two are not paired: they share a host)."""
    files = login_files(sites)
    accounts = {**WEBARENA_ACCOUNTS, **(accounts or {})}
    if pool is None:
        async with BrowserPool() as own:
            return await webarena_login(sites, out_dir, accounts=accounts, pool=own)
    os.makedirs(out_dir, exist_ok=True)
    browser = await pool.get_browser()
    written = []
    for name, combo in files.items():
        # Chromium resolves no names itself (LAUNCH_ARGS): connect through the sandbox proxy, to the sites only
        ctx = await new_proxied_context(browser, tuple(host_entry(_site(site.upper())) for site in combo),
                                        service_workers="block")
        try:
            ctx.set_default_timeout(NAV_TIMEOUT_MS)
            page = await ctx.new_page()
            for site in combo:
                try:
                    await _sign_in(page, site, accounts[site])
                except PlaywrightError as e:        # includes a sign-in field that never shows up
                    waiting = re.search(r"waiting for .*", str(e))
                    raise RuntimeError(f"{site}: cannot sign in at {page.url}: {_first_line(e)}"
                                       + (f" ({waiting.group(0)})" if waiting else "")) from None
            for site in combo:
                problem = await _signed_in(page, site, accounts[site])
                if problem:
                    raise RuntimeError(f"{site}: signing in as {accounts[site]['username']!r} did not hold "
                                       f"({problem}); check the account and WA_{site.upper()}")
            path = os.path.join(out_dir, name)
            state = await ctx.storage_state()
            # which account each site signed in as, for the check at reset (Playwright ignores the extra key)
            state["webagent"] = {"accounts": {site: accounts[site]["username"] for site in combo}}
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(state, f)
            os.replace(tmp, path)
            written.append(path)
        finally:
            await ctx.close()
    return written


def check_storage_state(task: Task) -> None:
    """Raise ValueError when ``task.storage_state`` cannot log the task in: no such file, not a Playwright
    storage state, or (for a ``require_login`` task) no cookie that is still valid. The message says how to make
    it, e.g. "task 436 (shopping): storage_state /w/.auth/shopping_state.json: no such file; make it with
    python env.py login --sites shopping --out /w/.auth"."""
    path = task.storage_state
    if not path:
        return
    fix = f"make it with {_login_command(task)}"
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        problem = "no such file"
    except (OSError, ValueError) as e:
        problem = f"unreadable ({_first_line(e)})"
    else:
        cookies = state.get("cookies") if isinstance(state, dict) else None
        if not isinstance(cookies, list):
            problem = "not a Playwright storage state (no 'cookies' list)"
        elif task.require_login and not any(c.get("expires", -1) in (-1, None) or c["expires"] > time.time()
                                            for c in cookies if isinstance(c, dict)):
            problem = "holds no valid cookie (never logged in, or the login expired)"
        else:
            return
    raise ValueError(f"task {task.task_id} ({task.site}): storage_state {path}: {problem}; {fix}")


def _named_sites(path: str) -> list[str]:
    """The sites of a storage-state file named as login_files names them ("gitlab.reddit_state.json"), else []."""
    name = os.path.basename(path)
    stem = name[:-len("_state.json")].split(".") if name.endswith("_state.json") else []
    return stem if stem and set(stem) <= set(LOGIN_SITES) else []


def _state_sites(task: Task) -> list[str]:
    """The WebArena sites a storage-state file signs into: from its name, else the task's sites with a login."""
    return _named_sites(task.storage_state or "") or [s for s in task.site.split("+") if s in LOGIN_SITES]


def _login_command(task: Task) -> str:
    sites = ",".join(_state_sites(task)) or "SITES"
    return f"python env.py login --sites {sites} --out {os.path.dirname(task.storage_state or '') or '.'}"


# storage-state checks of this process: (path, mtime) -> the check's task (its result: a problem or None)
_LOGIN_CHECKS: dict[tuple[str, int], asyncio.Task] = {}


async def check_login_alive(browser: Any, task: Task) -> None:
    """Raise ValueError when ``task.storage_state`` no longer signs in, e.g. the site was reset since
    ``python env.py login`` ran, with the command that renews it. As WebArena's auto_login re-checks a stored
    session (``is_expired``): a fresh context holding only the file's state opens one signed-in-only page per
    site (``_signed_in``). Once per file per process (again when the file changes), for files named as
    ``python env.py login`` names them (the names WebArena's configs use; another file's sites and accounts are
    unknown); sites whose URL is not configured here are not checked. A check that cannot load a page raises
    PlaywrightError (retried by reset)."""
    path = task.storage_state
    if not path or not task.require_login or not _named_sites(path):
        return
    key = (path, os.stat(path).st_mtime_ns)
    check = _LOGIN_CHECKS.get(key)
    if check is None or (check.done() and check.exception() is not None):
        check = _LOGIN_CHECKS[key] = asyncio.ensure_future(_login_problem(browser, path, _named_sites(path)))
    problem = await asyncio.shield(check)
    if problem:
        raise ValueError(f"task {task.task_id} ({task.site}): storage_state {path}: the login no longer holds "
                         f"({problem}); renew it with {_login_command(task)}")


async def _login_problem(browser: Any, path: str, sites: list[str]) -> str | None:
    with open(path, encoding="utf-8") as f:
        recorded = (json.load(f).get("webagent") or {}).get("accounts") or {}
    sites = [s for s in sites if webarena_site_url(s.upper()) is not None]
    if not sites:
        return None
    ctx = await new_proxied_context(browser, tuple(host_entry(_site(s.upper())) for s in sites), timeout=30,
                                    storage_state=path, service_workers="block", accept_downloads=False)
    try:
        ctx.set_default_timeout(NAV_TIMEOUT_MS)
        page = await ctx.new_page()
        for site in sites:
            account = {**WEBARENA_ACCOUNTS[site], "username": recorded.get(site, WEBARENA_ACCOUNTS[site]["username"])}
            problem = await _signed_in(page, site, account)
            if problem:
                return f"{site}: {problem}"
        return None
    finally:
        await ctx.close()


def _login_cli(argv: list[str]) -> None:
    import argparse
    ap = argparse.ArgumentParser(prog="python env.py login", description="Sign into WebArena sites and write the "
                                 "storage-state files their task configs name.")
    ap.add_argument("--sites", default=",".join(LOGIN_SITES), help="comma-separated, from: " + ", ".join(LOGIN_SITES))
    ap.add_argument("--out", default=".auth", help="folder of the *_state.json files (configs say ./.auth)")
    ap.add_argument("--account", action="append", default=[], metavar="SITE=USER:PASSWORD",
                    help="another account than WebArena's default for SITE (repeatable)")
    args = ap.parse_args(argv)
    accounts = {}
    for spec in args.account:
        site, _, cred = spec.partition("=")
        user, sep, password = cred.partition(":")
        if not (site and user and sep):
            ap.error(f"--account {spec!r}: expected SITE=USER:PASSWORD")
        accounts[site] = {"username": user, "password": password}
    sites = [s.strip() for s in args.sites.split(",") if s.strip()]
    try:
        paths = asyncio.run(webarena_login(sites, args.out, accounts=accounts))
    except (ValueError, RuntimeError) as e:
        raise SystemExit(f"login failed: {e}") from None
    print("\n".join(paths))


if __name__ == "__main__":   # python env.py login --sites S,... --out DIR | python env.py miniwob:click-button [seed]
    import sys as _sys
    if _sys.argv[1:2] == ["login"]:
        _login_cli(_sys.argv[2:])
    else:
        asyncio.run(_manual_check(_sys.argv[1] if len(_sys.argv) > 1 else "miniwob:click-button",
                                  int(_sys.argv[2]) if len(_sys.argv) > 2 else 0))
