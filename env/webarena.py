"""WebArena / WebArena-Lite for WebAgent-R1, a task family of the env package: config loading, VisualAgentBench's and
WebArena's rubrics (string_match, url_match, program_html) reproduced with their quirks, the built-in helper
functions, and the sites' logins (``python -m env login``).

The family registers itself when this module is imported (it imports tasks.py, sandbox.py and browser.py, never
env); env/__init__.py imports it, so ``env.load_tasks("<config>.json")`` and the ``env.<name>`` spellings of its public
names (``env.evaluate``, ``env.load_webarena_tasks``, ``env.webarena_login``, ...) work wherever env is imported.

The environment knows this module only as a task family (WebArenaFamily) and by:
  load_webarena_tasks(path) -> list[Task]        (used by load_tasks for a JSON path)
  async evaluate(task, page, answer, *, judge=None, helpers=None, rubric="vab") -> float in {0.0, 1.0}
                                                  (called by WebArenaFamily.score_exit on exit())

Loading (both rubrics read the same Task):
- Site placeholders (__SHOPPING__, __SHOPPING_ADMIN__, __REDDIT__, __GITLAB__, __MAP__, __WIKIPEDIA__,
  __HOMEPAGE__) come from the environment: WA_<NAME> if set, else WebArena's own <NAME> (SHOPPING, ...).
  They are substituted at load in start_url and in the whole eval dict; a missing variable is a load error.
- Task.allowed_hosts = the origins ("host:port", the scheme's default port filled in) of the start tabs, of
  reference_url / program_html URLs, of every site in `sites` whose URL variable (WA_SHOPPING, ...) is set
  (cross-site tasks start on one site and finish on another), and of $WA_EXTRA_ORIGINS (comma-separated
  URLs or host:port). Ports, not whole hosts: with the sites on 127.0.0.1, a host-wide entry let a page
  reach every local service (a vLLM server, DeepSpeed's port).
  The map site's page (OpenStreetMap website, :3000) calls backends on other ports, in WebArena's setup
  (webarena-map-backend-boot-init.yaml) tiles :8080, Nominatim geocoding :8085 and OSRM routing :5000
  (car) / :5001 (bike) / :5002 (foot), often on a separate host: list them in WA_EXTRA_ORIGINS, e.g.
  WA_EXTRA_ORIGINS=http://mapbackend:8080,http://mapbackend:8085,http://mapbackend:5000,... (or give a Task
  its own allowed_hosts).
- storage_state "" or null = none (97 map tasks of WebAgent-R1's training file have ""). Shapes that an
  evaluator raises on (a lone must_include string, url_note null) load and score 0 when evaluated;
  unknown keys, eval types, url_note rules and locators are load errors.
Scoring: ``rubric`` picks VisualAgentBench's WebArena-Lite evaluators ("vab", the paper's) or WebArena's
original ones ("webarena"), each reproduced with its quirks; the rules and their differences are in the
comments below and in docs/webarena.md ("Rubrics"). Common to both:
- program_html: url "last" = the page now; another URL (or `func:helper(...)` returning one) is opened in a
  probe page of a fresh context that holds a copy of the agent's cookies and local storage, so the agent's
  tabs are untouched (the originals navigate the agent's page; a new tab of the agent's own context would
  become the env's active tab); later "last" targets read the probe page, as they read the navigated page
  there. Locators: "" = page.content(), a `document.` / `[...document.` JS expression, a `lambda:` JS
  function (VAB only), or `func:name(args)` calling helpers[name](page, *args) (sync or async). The call
  is parsed, never handed to Python's eval: args are quoted strings, numbers, True/False/None, `__page__`
  (dropped: the page is always the first argument) and `__last_url__` (the page's URL, also replaced inside strings).
- A judge or helper that is needed but missing scores 0 and logs a warning; every failed check leaves a
  reason in `details["reasons"]` when the caller passes a `details` dict. Scores of eval types multiply.
- `func:` helpers: the five that the public configs name are built in (WEBARENA_HELPERS, "helper functions"
  below); ``helpers=`` adds others or replaces them by name.
- Logins come from storage_state files, which ``webarena_login`` (``python -m env login``) writes as
  WebArena's auto_login.py does. A reset with a storage_state that cannot log in (no such file, no valid
  cookie) raises ValueError saying how to make it (check_storage_state); require_login with no storage_state
  runs without one (WebArena-Lite's map tasks: the map has no login).
Concurrency: a site given as replicas with a reset (WA_GITLAB="url1 url2 ...", WA_GITLAB_RESET=...) is
leased per trajectory (SitePool): a task that may change it (program_html, require_reset) holds a replica
alone from its reset to its score, readers share clean ones, and a replica is reset after each writer
(docs/webarena.md, "Concurrent trajectories").
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import html as _html
import inspect
import json
import logging
import os
import re
import shlex
import shutil
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, AsyncIterator, Sequence

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from .browser import BrowserPool, WebEnv
from .sandbox import host_entry, new_proxied_context, outside_hosts_re
from .tasks import EpisodeCrash, Task, TaskFamily, family_of, register_family
from .tasks import first_line as _first_line

_wa_log = logging.getLogger("env.webarena")
# inside a leased episode (SitePool.lease): site name -> the URL of the replica it holds
_leased_urls: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("leased_urls", default={})

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
    """URL of WebArena site ``name`` ("SHOPPING", ...) from $WA_<NAME>, else $<NAME>; no trailing slash. A
    variable listing several replicas ("http://h:8023 http://h:8024", ``SitePool``) gives the first; inside
    a leased episode, the replica it leased."""
    leased = _leased_urls.get().get(name.lower())
    if leased:
        return leased
    for var in (f"WA_{name}", name):
        urls = site_urls(os.environ.get(var, ""))
        if urls:
            return urls[0]
    return None


def site_urls(value: str) -> list[str]:
    """The replica URLs a site variable lists (space- or comma-separated), without trailing slashes."""
    return [u.rstrip("/") for u in re.split(r"[\s,]+", value.strip()) if u]


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
    """Parse ``name(args)`` from a ``func:`` url/locator (a small parser, no Python eval), e.g.
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
                require_reset=bool(raw.get("require_reset", False)),
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
    evaluators, which scored the paper) or "webarena" (WebArena's original ones); docs/webarena.md: "Rubrics".

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
    python -m env login --sites shopping --out /w/.auth"."""
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
    return f"python -m env login --sites {sites} --out {os.path.dirname(task.storage_state or '') or '.'}"


# storage-state checks of this process: (path, mtime) -> the check's task (its result: a problem or None)
_LOGIN_CHECKS: dict[tuple[str, int], asyncio.Task] = {}


async def check_login_alive(browser: Any, task: Task) -> None:
    """Raise ValueError when ``task.storage_state`` no longer signs in, e.g. the site was reset since
    ``python -m env login`` ran, with the command that renews it. As WebArena's auto_login re-checks a stored
    session (``is_expired``): a fresh context holding only the file's state opens one signed-in-only page per
    site (``_signed_in``). Once per file per process (again when the file changes), for files named as
    ``python -m env login`` names them (the names WebArena's configs use; another file's sites and accounts are
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
    ap = argparse.ArgumentParser(prog="python -m env login", description="Sign into WebArena sites and write the "
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


# ---- the family, registered when this module is imported ----

# ---- site replicas: trajectories that change a site never share it ----
# M-GRPO runs the G trajectories of a task at once. On one shared site, trajectory 1 creates the repository and
# the program_html check of trajectory 2, which did nothing, then reads it and scores 1: the group's advantages
# are computed from corrupted rewards. A site given as replicas with a reset (WA_GITLAB="http://h:8023
# http://h:8024", WA_GITLAB_RESET="docker restart gitlab-{index}") is leased per trajectory instead: an episode
# that can change the site holds one replica to itself from its reset until it is scored, the replica is reset
# before anyone uses it again, and episodes that only read share the clean replicas nobody is changing.

@dataclasses.dataclass(eq=False)
class Replica:
    """One copy of a site: its URL and who holds it now."""
    site: str
    index: int
    url: str
    readers: int = 0
    writer: bool = False
    clean: bool = False        # reset since its last writer; none is at start (a run that died may have left state)
    resetting: bool = False
    broken: bool = False       # its reset failed every try: never leased again
    resets: int = 0


def rehost(task: Task, moves: dict[str, str]) -> Task:
    """``task`` with every URL at origin ``old`` moved to ``new`` (``moves = {old: new}``, origins such as
    "http://h:8023"): its start tabs, the URLs of its eval (reference_url, program_html) and its allowed hosts."""
    moves = {old: new for old, new in moves.items() if old != new}
    if not moves:
        return task
    pattern = re.compile("|".join(re.escape(o) for o in sorted(moves, key=len, reverse=True)) + r"(?=[/?#\s|'\"),]|$)")

    def sub(obj: Any) -> Any:
        if isinstance(obj, str):
            return pattern.sub(lambda m: moves[m.group(0)], obj)
        if isinstance(obj, list):
            return [sub(v) for v in obj]
        if isinstance(obj, dict):
            return {k: sub(v) for k, v in obj.items()}
        return obj

    hosts = {host_entry(old): host_entry(new) for old, new in moves.items()}
    return dataclasses.replace(task, start_url=sub(task.start_url), eval=sub(task.eval),
                               allowed_hosts=tuple(sorted({hosts.get(h, h) for h in task.allowed_hosts})))


async def run_reset(spec: str, replica: Replica) -> None:
    """Reset ``replica`` as ``spec`` says: an http(s) URL is POSTed to (any 2xx is done), anything else is a
    command run without a shell (``shlex.split``; exit status 0 is done). ``{url}``, ``{index}`` and ``{site}``
    are filled in, e.g. "docker restart gitlab-{index}" or "{url}/__reset". Raises RuntimeError saying why."""
    for key, value in (("{url}", replica.url), ("{index}", str(replica.index)), ("{site}", replica.site)):
        spec = spec.replace(key, value)
    if re.match(r"https?://", spec):
        def post() -> int:
            req = urllib.request.Request(spec, data=b"", method="POST")
            with urllib.request.urlopen(req, timeout=600) as resp:      # noqa: S310 (the user's own URL)
                return resp.status
        try:
            status = await asyncio.to_thread(post)
        except (urllib.error.URLError, OSError) as e:
            raise RuntimeError(f"POST {spec}: {e}") from None
        if not 200 <= status < 300:
            raise RuntimeError(f"POST {spec}: HTTP {status}")
        return
    argv = shlex.split(spec)
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        raise RuntimeError(f"{spec}: {e}") from None
    try:
        out = (await proc.communicate())[0]
    except asyncio.CancelledError:            # a timeout: the command and what it started (docker run ...)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    if proc.returncode != 0:
        tail = out.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"{spec}: exit status {proc.returncode} {tail[0]}".rstrip())


class SitePool:
    """The replicas of the sites a run uses and their leases (see the section's comment), e.g.

    >>> pool = SitePool({"gitlab": ["http://h:8023", "http://h:8024"]},             # doctest: +SKIP
    ...                 {"gitlab": "docker restart gitlab-{index}"})
    >>> async with pool.lease(task, writes=True) as mine:   # mine: the task with its URLs on one replica
    ...     ...                                              # reset, act, score; the replica is reset after

    ``writes``: the episode may change the site (``WebArenaFamily.changes_state``): it waits for a clean
    replica nobody holds and holds it alone; a reader waits for a clean replica no writer holds and shares it
    (readers gather on the replicas already being read, leaving the others to writers). The wait is counted
    (``stats``); a replica is reset in the background as soon as its writer lets go (the lease ends however
    the episode ends: exit, crash, timeout, cancellation), and every replica once before its first lease.
    A reset that fails ``reset_tries`` times takes its replica out of the pool; with none left, a lease raises
    ``EpisodeCrash`` (the episode ends with a recorded reason, the run goes on). Tasks whose sites have no
    replicas here run as they are. One pool per process and event loop (``site_pool``)."""

    def __init__(self, urls: dict[str, list[str]], resets: dict[str, str], *, home: dict[str, str] | None = None,
                 first_index: int = 0, index_step: int = 1, exclusive: bool = False, reset_tries: int = 3,
                 retry_delay_s: float = 5.0, reset_timeout_s: float = 900.0) -> None:
        missing = sorted(site for site in urls if not resets.get(site))
        if missing:
            raise ValueError(f"site replicas need a reset: set WA_{missing[0].upper()}_RESET to a command or a URL "
                             "to POST ({url}, {index} filled in)")
        for site, spec in resets.items():
            try:
                shlex.split(spec)
            except ValueError as e:
                raise ValueError(f"WA_{site.upper()}_RESET: {e}: {spec!r}") from None
        # a replica's index is its place in WA_<SITE>'s full list, the same on every rank ({index} in resets)
        self.replicas = {site: [Replica(site, first_index + k * index_step, url) for k, url in enumerate(us)]
                         for site, us in urls.items() if us}
        self.resets = dict(resets)
        self.exclusive = exclusive
        # where the tasks were loaded (the first URL of WA_<SITE>, on every rank): what a lease moves them from
        self.home = {site: (home or {}).get(site) or reps[0].url for site, reps in self.replicas.items()}
        self.reset_tries, self.retry_delay_s, self.reset_timeout_s = reset_tries, retry_delay_s, reset_timeout_s
        self.stats = {"leases": 0, "wait_s": 0.0, "resets": 0, "reset_failures": 0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future] = []
        self._tasks: set[asyncio.Task] = set()
        self._logins: dict[tuple, asyncio.Future] = {}    # (file, replicas and their resets) -> its login
        self._login_dirs: dict[tuple, str] = {}           # (file, replicas) -> the newest login's folder

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "SitePool | None":
        """The pool the environment describes, or None: a site takes part when ``WA_<SITE>_RESET`` is set, its
        replicas listed in ``WA_<SITE>`` (space- or comma-separated). Ranks of a launcher (RANK, WORLD_SIZE)
        take every WORLD_SIZE-th replica from their rank on, so no two processes lease the same one (a replica's
        ``{index}`` is its place in the full list). ``WA_LEASE=exclusive``: every episode leases its replicas
        alone and has them reset after it, readers too (an exploring agent may change a site on any task)."""
        environ = dict(os.environ if environ is None else environ)
        rank, world = int(environ.get("RANK", "0") or 0), int(environ.get("WORLD_SIZE", "1") or 1)
        urls, resets, home = {}, {}, {}
        for var, value in sorted(environ.items()):
            if not (var.startswith("WA_") and var.endswith("_RESET") and value.strip()):
                continue
            site = var[3:-6].lower()
            listed = site_urls(environ.get(f"WA_{site.upper()}", ""))
            if len(listed) < world:
                raise ValueError(f"{var} is set but WA_{site.upper()} lists {len(listed)} replica(s) for "
                                 f"{world} rank(s): every rank needs one of its own")
            urls[site], resets[site], home[site] = listed[rank::world], value.strip(), listed[0]
        for var, value in sorted(environ.items()):
            n = len(site_urls(value))
            if (var.startswith("WA_") and var != "WA_EXTRA_ORIGINS" and not var.endswith("_RESET") and n > 1
                    and var[3:].lower() not in resets):
                raise ValueError(f"{var} lists {n} replicas but {var}_RESET is not set: a replica is reset after "
                                 "each episode that may have changed it (a command, or a URL to POST)")
        exclusive = environ.get("WA_LEASE", "by-task").strip() == "exclusive"
        return (cls(urls, resets, home=home, first_index=rank, index_step=world, exclusive=exclusive)
                if urls else None)

    def sites_of(self, task: Task) -> list[str]:
        return [site for site in task.site.split("+") if site in self.replicas]

    def take_stats(self) -> dict[str, float]:
        """The counts since the last call (leases, seconds waited for them, resets, failed resets), zeroed."""
        out, self.stats = self.stats, {k: 0 if k != "wait_s" else 0.0 for k in self.stats}
        return out

    @contextlib.asynccontextmanager
    async def lease(self, task: Task, writes: bool) -> AsyncIterator[Task]:
        writes = writes or self.exclusive
        sites = self.sites_of(task)
        if not sites:
            yield task
            return
        self._bind()
        start = time.monotonic()
        while (picked := self._pick(sites, writes)) is None:      # check and take with no await between
            for site in sites:
                if all(r.broken for r in self.replicas[site]):
                    raise EpisodeCrash(f"site {site}: every replica failed its reset ({self.resets[site]})")
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        for r in picked:
            r.writer, r.readers = r.writer or writes, r.readers + (not writes)
        self.stats["leases"] += 1
        self.stats["wait_s"] += time.monotonic() - start
        token = _leased_urls.set({**_leased_urls.get(), **{r.site: r.url for r in picked}})
        try:
            leased = rehost(task, {self.home[r.site]: r.url for r in picked})
            if task.storage_state and _named_sites(task.storage_state):
                leased = dataclasses.replace(leased, storage_state=await self._login(task.storage_state, picked))
            yield leased
        finally:
            _leased_urls.reset(token)
            for r in picked:
                if writes:
                    r.writer, r.clean = False, False
                else:
                    r.readers -= 1
            self._start_resets()
            self._notify()

    async def _login(self, path: str, picked: list[Replica]) -> str:
        """A storage-state file like ``path`` (named as ``python -m env login`` names them) signed into the
        leased replicas since their last reset (a reset drops a site's sessions; WebArena's harness signs in
        again before each task too): ``<its folder>/replicas/<site><index>-<resets>/<its name>``, written once
        by ``webarena_login`` with WebArena's default accounts and shared by the leases of those replicas."""
        sites = _named_sites(path)
        mine = [r for r in picked if r.site in sites]
        if not mine:
            return path
        name, where = os.path.basename(path), tuple((r.site, r.index) for r in mine)
        key = (name, where, tuple(r.resets for r in mine))
        out = os.path.join(os.path.dirname(path), "replicas", "_".join(f"{r.site}{r.index}-{r.resets}" for r in mine))
        login = self._logins.get(key)
        if login is None or (login.done() and (login.cancelled() or login.exception() is not None)):
            login = self._logins[key] = asyncio.ensure_future(webarena_login(sites, out))   # in this lease's URLs
            old = self._login_dirs.get((name, where))
            self._login_dirs[(name, where)] = out
            if old and old != out:      # the same replicas before their reset: nobody holds them now
                self._logins = {k: v for k, v in self._logins.items() if k[:2] != (name, where) or k == key}
                shutil.rmtree(old, ignore_errors=True)
        try:
            await asyncio.shield(login)
        except Exception as e:            # a site still starting, no browser, a failed sign-in: this episode only
            raise EpisodeCrash(f"signing into {', '.join(f'{r.site} replica {r.index}' for r in mine)}: {e}") from None
        return os.path.join(out, name)

    def _pick(self, sites: list[str], writes: bool) -> list[Replica] | None:
        picked = []
        for site in sites:
            free = [r for r in self.replicas[site] if r.clean and not r.broken and not r.writer
                    and not (writes and r.readers)]
            if not free:
                return None
            picked.append(min(free, key=lambda r: (-r.readers, r.index)))
        return picked

    def _bind(self) -> None:
        """Follow the running event loop (a script may run several): what the last one left in flight is gone."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._waiters, self._tasks, self._logins = loop, [], set(), {}
            for r in (r for reps in self.replicas.values() for r in reps):
                r.resetting = False
        self._start_resets()

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _start_resets(self) -> None:
        for r in (r for reps in self.replicas.values() for r in reps):
            if not (r.clean or r.broken or r.resetting or r.writer or r.readers):
                r.resetting = True
                task = asyncio.get_running_loop().create_task(self._reset(r))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _reset(self, r: Replica) -> None:
        try:
            for attempt in range(1, self.reset_tries + 1):
                try:
                    await asyncio.wait_for(run_reset(self.resets[r.site], r), self.reset_timeout_s)
                except Exception as e:        # a failed command or POST, a timeout, a malformed URL: try again
                    self.stats["reset_failures"] += 1
                    _wa_log.warning("reset of %s replica %d (%s) failed, try %d of %d: %s", r.site, r.index, r.url,
                                    attempt, self.reset_tries, str(e) or "timed out")
                    if attempt < self.reset_tries:
                        await asyncio.sleep(self.retry_delay_s)
                    continue
                r.clean, r.resets = True, r.resets + 1
                self.stats["resets"] += 1
                return
            r.broken = True
            _wa_log.error("%s replica %d (%s) is left out of the pool: its reset failed %d times", r.site, r.index,
                          r.url, self.reset_tries)
        finally:
            r.resetting = False
            self._notify()


_site_pool: dict[str, Any] = {"key": None, "pool": None}


def site_pool() -> SitePool | None:
    """This process's SitePool, from the environment (``SitePool.from_env``), built again when the variables
    change; None when no site has replicas."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("WA_") or k in ("RANK", "WORLD_SIZE")))
    if _site_pool["key"] != key:
        _site_pool.update(key=key, pool=SitePool.from_env())
    return _site_pool["pool"]


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
        if rubric not in RUBRICS:
            raise ValueError(f"unknown rubric {rubric!r} (expected 'vab' or 'webarena')")
        self.rubric = rubric

    def load(self, body: str) -> list[Task]:
        return load_webarena_tasks(body)

    def changes_state(self, task: Task) -> bool:
        """May an episode of ``task`` change its sites where a score reads them? Yes for a program_html check
        (it reads the site after the episode) and for a config's require_reset."""
        return task.require_reset or "program_html" in (task.eval.get("eval_types") or ())

    @contextlib.asynccontextmanager
    async def lease(self, task: Task) -> AsyncIterator[Task]:
        """A replica of each of the task's sites that has them (``site_pool``): its own when the episode may
        change it, a shared clean one when it only reads; the task as it runs there."""
        pool = site_pool()
        if pool is None:
            yield task
            return
        async with pool.lease(task, writes=self.changes_state(task)) as leased:
            yield leased

    async def context_options(self, env: WebEnv, browser: Any, task: Task) -> dict[str, Any]:
        """The task's login: its storage_state, checked first (check_storage_state: a clear message instead of
        Playwright's on a missing file; check_login_alive: one the site no longer accepts)."""
        if task.storage_state:
            check_storage_state(task)
            await check_login_alive(browser, task)
        return await super().context_options(env, browser, task)

    async def score_exit(self, env: WebEnv, page: Any, task: Task, message: str | None,
                         info: dict[str, Any]) -> float:
        return float(await evaluate(task, page, message, judge=env.judge, helpers=env.helpers,
                                    rubric=self.rubric, details=info.setdefault("eval", {})))

    def column(self, task: Task) -> str:
        return "Multi-site" if "+" in task.site else self.site_names.get(task.site, task.site)


register_family(WebArenaFamily())

