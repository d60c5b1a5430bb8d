"""WebArena / WebArena-Lite for WebAgent-R1, a task family of the env package: config loading and the family
(WebArenaFamily). Three modules beside it hold the rest, one concern each:
- webarena_rubrics.py: VisualAgentBench's and WebArena's rubrics (string_match, url_match, program_html)
  reproduced with their quirks, and ``evaluate``;
- webarena_helpers.py: the sites' URLs and placeholders, the built-in `func:` helper functions, and the sites'
  logins (``webarena_login``, ``python -m env login``);
- webarena_replicas.py: site replicas leased per trajectory (``SitePool``, ``site_pool``).
webarena_rubrics and webarena_replicas import webarena_helpers; this file imports the three, none imports it.

The family registers itself when this module is imported (it imports tasks.py, sandbox.py, browser.py and those
three, never env); env/__init__.py imports it, so ``env.load_tasks("<config>.json")`` and the ``env.<name>``
spellings of the public names (``env.evaluate``, ``env.load_webarena_tasks``, ``env.webarena_login``, ...) work
wherever env is imported.

The environment knows this module only as a task family (WebArenaFamily) and by:
  load_webarena_tasks(path) -> list[Task]        (used by load_tasks for a JSON path)
  async evaluate(task, page, answer, *, judge=None, helpers=None, rubric="vab") -> float in {0.0, 1.0}
                                                  (webarena_rubrics.py; called by WebArenaFamily.score_exit on exit())

Loading (both rubrics read the same Task):
- Site placeholders (__SHOPPING__, __SHOPPING_ADMIN__, __REDDIT__, __GITLAB__, __MAP__, __WIKIPEDIA__,
  __HOMEPAGE__) come from the environment: WA_<NAME> if set, else WebArena's own <NAME> (SHOPPING, ...).
  They are substituted at load in start_url and in the whole eval dict; a missing variable is a load error.
- Task.allowed_hosts = the origins ("host:port", the scheme's default port filled in) of the start tabs, of
  reference_url / program_html URLs, of every site in `sites` whose URL variable (WA_SHOPPING, ...) is set
  (cross-site tasks start on one site and finish on another), and of $WA_EXTRA_ORIGINS (comma-separated
  URLs or host:port). Ports, not whole hosts: with the sites on 127.0.0.1, a host-wide entry let a page
  reach every local service (a vLLM server, DeepSpeed's port). The map site's backends (tiles, geocoding,
  routing) sit on other ports, often another host: list them in WA_EXTRA_ORIGINS (docs/webarena.md).
- storage_state "" or null = none (97 map tasks of WebAgent-R1's training file have ""). Shapes that an
  evaluator raises on (a lone must_include string, url_note null) load and score 0 when evaluated;
  unknown keys, eval types, url_note rules and locators are load errors.
Scoring: ``rubric`` picks VisualAgentBench's WebArena-Lite evaluators ("vab", the paper's) or WebArena's
original ones ("webarena"), webarena_rubrics.py; docs/webarena.md ("Rubrics"). Logins: a task's storage_state
file is checked at reset (check_storage_state, check_login_alive in webarena_helpers.py).
Concurrency: a site given as replicas with a reset (WA_GITLAB="url1 url2 ...", WA_GITLAB_RESET=...) is
leased per trajectory (WebArenaFamily.lease, webarena_replicas.py; docs/webarena.md, "Concurrent trajectories").
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import urllib.parse
from typing import Any, AsyncIterator

from .browser import WebEnv
from .sandbox import host_entry
from .tasks import Task, TaskFamily, register_family
from .webarena_helpers import (WEBARENA_SITES, check_login_alive, check_storage_state, parse_helper_call,
                               substitute_placeholders, webarena_site_url)
from .webarena_rubrics import _CONTENT_KEYS, _OR, RUBRICS, evaluate
from .webarena_replicas import site_pool

EVAL_TYPES = ("string_match", "url_match", "program_html")
_ANSWER_KEYS = ("exact_match", "must_include", "must_exclude", "one_of", "required_values", "fuzzy_match")
_URL_RULES = ("GOLD in PRED", "EXACT")
_INEQUALITY = re.compile(r"^\s*(<=|>=|==|<|>)\s*(-?\d+(?:\.\d+)?)\s*$")
_AND = " |AND| "       # start_url: the tabs to open


# ---- config loading ----

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


# ---- the family, registered when this module is imported ----

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
