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
- Task families (``TaskFamily``; ``MiniWoBFamily`` here, ``WebArenaFamily`` in webarena.py, which this
  module loads at its end and whose public names it forwards, ``register_family`` for more): how a kind of
  task loads, sets up its context, starts an episode, reports its status and scores exit(); WebEnv asks
  ``Task.family``'s family and never branches on the site.
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
  WebRTC is removed; downloads are off; service-worker registration is refused (a worker that starts
  anyway ends its context). The program_html scoring context obeys the same.
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
from typing import Any, AsyncIterator, Sequence
from urllib.parse import unquote, urlsplit

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from compress import parse_response   # the response format (<think> / <answer>) lives in compress.py

log = logging.getLogger("webagent.env")


#: MiniWoB episode seeds (one seed = one page), in four disjoint ranges so that no two uses share a page:
#: demonstrations (experts.py), RL rollouts (train_mgrpo.py, which wraps around inside its range whatever
#: --seed and the run's length say), validation pages for choosing settings (eval.py --seed-start 500000)
#: and the held-out test pages (eval.py's default). TRAIN_SEEDS is everything that is not a test page.
DEMO_SEEDS = range(0, 100_000)
RL_SEEDS = range(100_000, 500_000)
VALID_SEEDS = range(500_000, 1_000_000)
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
    require_reset: bool = False     # the config says the episode changes its site (WebArena's require_reset)


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

#: The in-page extractor (observation.js next to this file): one page.evaluate returns the observation
#: text, the labels it stamped and the family status value.
EXTRACT_JS = "\n" + Path(__file__).with_name("observation.js").read_text(encoding="utf-8")


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

    @contextlib.asynccontextmanager
    async def lease(self, task: Task) -> AsyncIterator[Task]:
        """Hold what one episode of ``task`` needs to itself, from before its reset until it is scored, and give
        the task as it runs there. Default: nothing to hold, the task unchanged. WebArena's family leases a
        replica of each site a state-changing task uses (``webarena.SitePool``) and gives the task with its
        URLs moved there; the runner (rollout.Runner) enters this around every episode."""
        yield task

    def hosts(self, task: Task) -> tuple[str, ...]:
        """Hosts a context of ``task`` may reach ("host", "host:port", or "file" for file:// URLs); every other
        request is blocked and counted. Default: Task.allowed_hosts, else the hosts of its start_url tabs."""
        if task.allowed_hosts:
            return tuple(task.allowed_hosts)
        hosts = (host_entry(url) for url in task.start_url.split(" |AND| "))
        return tuple(h for h in hosts if h)

    async def context_options(self, env: WebEnv, browser: Any, task: Task) -> dict[str, Any]:
        """Extra ``browser.new_context`` options for ``task``'s context. Default: its ``storage_state``
        (Playwright's cookies and local storage file), if any; WebArena's family checks the login first."""
        return {"storage_state": task.storage_state} if task.storage_state else {}

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
        """Start a listener whose connections are checked by ``check(host, port)``; returns its port. It listens
        on 127.0.0.1, or on every interface once browsers on other machines use it (``proxy_host()`` is then
        the address they reach it at, which behind NAT this machine cannot bind itself)."""
        bind = "127.0.0.1" if proxy_host() == "127.0.0.1" else "0.0.0.0"

        async def start() -> Any:
            return await asyncio.start_server(lambda r, w: self._client(r, w, check), bind, 0)
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


_proxy_host_toward: dict[str, str] = {}     # set by a BrowserPool with endpoints: this machine's address toward them


def proxy_host() -> str:
    """Where the sandbox proxy listens and browsers connect to it: $WEBAGENT_PROXY_HOST when set; else, once a
    BrowserPool has browser servers (``--browser-endpoint``), the address this machine uses toward the first
    of them (``address_toward``; 127.0.0.1 for a server on this machine); else 127.0.0.1."""
    return (os.environ.get("WEBAGENT_PROXY_HOST", "").strip() or _proxy_host_toward.get("host") or "127.0.0.1")


def address_toward(url: str) -> str:
    """This machine's address on the route to ``url``'s host (a UDP socket's local address after connect():
    no packet is sent), e.g. "10.0.0.2" toward ws://10.0.0.7:3000/, "127.0.0.1" toward a local server."""
    parts = urlsplit(url)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(parts.hostname or "127.0.0.1"), parts.port or 80))
        host = s.getsockname()[0]
    return "127.0.0.1" if host.startswith("127.") else host


def proxy_settings(port: int) -> dict[str, str]:
    """Playwright's ``new_context(proxy=...)`` for a SandboxProxy listener. Playwright adds "<-loopback>" to the
    bypass list (Chromium otherwise sends localhost/127.0.0.1 direct); it is given here too, explicitly."""
    return {"server": f"socks5://{proxy_host()}:{port}", "bypass": "<-loopback>"}


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


def start_browser_server(port: int | None = None) -> tuple[Any, str]:
    """A Playwright browser server on this machine (``python -m playwright run-server --unsafe``, as
    docs/environment.md starts one on a browser machine), for tests and benchmarks of ``--browser-endpoint``:
    (its process, its ws:// endpoint). ``--unsafe`` lets a pool send its launch flags and
    $WEBAGENT_REMOTE_CHROMIUM. Stop it with ``stop_browser_server``."""
    import subprocess
    import sys
    import tempfile
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w+", prefix="run-server-", suffix=".log", delete=False)   # never a full pipe
    proc = subprocess.Popen([sys.executable, "-m", "playwright", "run-server", "--port", str(port), "--unsafe"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if "Listening on" in open(log.name).read():
            return proc, f"ws://127.0.0.1:{port}/"
        time.sleep(0.1)
    stop_browser_server(proc)
    raise RuntimeError("playwright run-server did not start: " + open(log.name).read()[-2000:])


def stop_browser_server(proc: Any) -> None:
    """Kill a ``start_browser_server`` process and the browsers it launched."""
    import signal
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


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


def browser_endpoints(value: str | Sequence[str] | None = None) -> list[str]:
    """Playwright browser servers to connect to: ``value`` (comma- or space-separated ws:// URLs, or a list),
    else $WEBAGENT_BROWSER_ENDPOINT; [] = launch Chromium here."""
    if value is None:
        value = os.environ.get("WEBAGENT_BROWSER_ENDPOINT", "")
    items = re.split(r"[\s,]+", value.strip()) if isinstance(value, str) else list(value)
    out = [e for e in items if e]
    for e in out:
        if not re.match(r"wss?://", e):
            raise ValueError(f"browser endpoint {e!r}: expected a ws:// URL of `playwright run-server`")
    return out


class BrowserPool:
    """One Chromium process (async Playwright) shared by many environments, each with its own browser
    context (own cookies, storage, cache). The browser is relaunched when it died.

    ``endpoints`` (default: $WEBAGENT_BROWSER_ENDPOINT): browsers on other machines instead, Playwright
    browser servers (``python -m playwright run-server --port 3000 --host 0.0.0.0``); the pool connects to
    each (one browser per server) and opens new contexts on them in turn, and a lost
    connection is made again as a dead browser is relaunched. The sandbox holds there too: each context
    connects through this process's sandbox proxy, at the address those machines reach it at
    (``proxy_host``). The launch flags travel to the server, which applies them only when started
    with ``--unsafe`` (its default browser then is $WEBAGENT_REMOTE_CHROMIUM when set); docs/environment.md.

    >>> async with BrowserPool() as pool:                                    # doctest: +SKIP
    ...     env = await pool.new_env(max_repeats=5)
    ...     obs = await env.reset(load_tasks("miniwob:click-button")[0])
    """

    def __init__(self, executable_path: str | None = None, headless: bool = True, *,
                 args: tuple[str, ...] = (), launch_timeout_s: float = 60.0,
                 max_concurrent_resets: int | None = None, endpoints: str | Sequence[str] | None = None,
                 server_retry_s: float = 30.0) -> None:
        self.executable_path = executable_path
        self.headless = headless
        self.extra_args = tuple(args)
        self.launch_timeout_s = launch_timeout_s
        self.endpoints = browser_endpoints(endpoints)
        if self.endpoints and "host" not in _proxy_host_toward:
            try:
                _proxy_host_toward["host"] = address_toward(self.endpoints[0])
            except OSError as e:             # no route to it now: the connection will say so
                log.warning("no route to browser server %s (%s)", self.endpoints[0], e)
        self.tag = f"--webagent-pool={uuid.uuid4().hex[:12]}"   # marks our browser's command line (browser_pid)
        self.browser: Any = None
        self.remote: dict[str, Any] = {}                         # endpoint -> its connected browser
        self._down: dict[str, float] = {}                        # endpoint -> not tried again before (monotonic)
        self.server_retry_s = server_retry_s
        self._turn = 0                                           # round robin over the connected servers
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
        if proxy_host() != "127.0.0.1":                # the proxy's own address must stay reachable
            args = [a.replace("EXCLUDE 127.0.0.1", f"EXCLUDE 127.0.0.1 , EXCLUDE {proxy_host()}") for a in args]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")                # Chromium refuses to run its sandbox as root
        return args

    async def get_browser(self, stale: Any = None) -> Any:
        """The connected browser, launched (again) when there is none or it died. ``stale``: a browser the
        caller found unusable; if it is still the current one it is replaced (several envs may report the
        same dead browser: the first relaunches, the others get the new one)."""
        async with self._lock:
            if self.endpoints:
                return await self._remote_browser(stale)
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

    async def _remote_browser(self, stale: Any) -> Any:
        """The next connected server's browser in turn (resets that start together go to different servers),
        (re)connecting those whose connection is gone or that the caller found unusable; a server that cannot
        be reached is left alone for ``server_retry_s`` while another answers. When none answers, Playwright's
        driver is restarted too (a dead driver refuses every connection)."""
        if self._pw is None:
            from playwright.async_api import async_playwright
            self._pw = await asyncio.wait_for(async_playwright().start(), self.launch_timeout_s)
        for endpoint, browser in list(self.remote.items()):
            if browser is stale or not browser.is_connected():
                with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
                    await asyncio.wait_for(browser.close(), 5)
                del self.remote[endpoint]
        errors = []
        for endpoint in self.endpoints:
            if endpoint in self.remote or (self.remote and self._down.get(endpoint, 0) > time.monotonic()):
                continue
            options = {"headless": self.headless, "args": self.launch_args(), "timeout": self.launch_timeout_s * 1000,
                       **({"executablePath": os.environ["WEBAGENT_REMOTE_CHROMIUM"]}
                          if os.environ.get("WEBAGENT_REMOTE_CHROMIUM") else {})}
            try:
                self.remote[endpoint] = await self._pw.chromium.connect(
                    endpoint, timeout=self.launch_timeout_s * 1000,
                    headers={"x-playwright-launch-options": json.dumps(options)})
            except PlaywrightError as e:
                errors.append(f"{endpoint}: {_first_line(e)}")
                self._down[endpoint] = time.monotonic() + self.server_retry_s
                continue
            self._down.pop(endpoint, None)
            self.launches += 1
            log.info("connected to Chromium %s at %s, connection #%d", self.remote[endpoint].version, endpoint,
                     self.launches)
        if not self.remote:
            await self._stop_playwright()
            raise PlaywrightError("no browser server answered: " + "; ".join(errors))
        live = [self.remote[e] for e in self.endpoints if e in self.remote]
        self._turn += 1
        self.browser = live[self._turn % len(live)]
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
        for browser in self.remote.values():           # a connection only: the server's browser closes with it
            with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
                await asyncio.wait_for(browser.close(), 10)
        self.remote.clear()
        if self.browser is not None and not self.endpoints:
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
        self._browser: Any = None               # the browser this env's context lives in
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
        kwargs.update(await fam.context_options(self, browser, task))     # e.g. a WebArena login
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
        self._browser = browser
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
        browser = self._browser                 # the browser its context lives in (one of several remote ones)
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
        browser = self._browser                 # the browser its context lives in (one of several remote ones)
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


# ---- WebArena: a task family in its own module, loaded with env ----
# webarena.py registers WebArenaFamily, so load_tasks("<config>.json") works wherever env is imported, and
# the env.<name> spellings of its public names (env.evaluate, env.load_webarena_tasks, env.webarena_login,
# ...) keep working through the module __getattr__ below.

import webarena as _webarena  # noqa: E402  (after every name webarena.py imports from here)


def __getattr__(name: str) -> Any:
    if not name.startswith("_") and hasattr(_webarena, name):
        return getattr(_webarena, name)
    raise AttributeError(f"module 'env' has no attribute {name!r}")


if __name__ == "__main__":   # python env.py login --sites S,... --out DIR | python env.py miniwob:click-button [seed]
    import sys as _sys
    if _sys.argv[1:2] == ["login"]:
        _webarena._login_cli(_sys.argv[2:])
    else:   # through the importable env module, the one webarena.py registered its family with
        import env as _env
        asyncio.run(_env._manual_check(_sys.argv[1] if len(_sys.argv) > 1 else "miniwob:click-button",
                                  int(_sys.argv[2]) if len(_sys.argv) > 2 else 0))
