"""The web environment for WebAgent-R1, the one package users import: ``import env`` gives the browser pool, the
agent's env, the action grammar, the task interface and all three task families, one module per concern:

- tasks.py: what a task is, the ``TaskFamily`` interface and its registry, the MiniWoB seed ranges: ``Task``,
  ``TaskFamily``, ``register_family``, ``family_of``, ``load_tasks``, ``EpisodeCrash``, ``EVAL_SEEDS``.
- actions.py: the action grammar, parse one action from a response and write it back (no browser):
  ``parse_action``, ``format_action``, ``Action``, ``ActionParseError``, ``ACTION_NAMES``.
- sandbox.py: a context reaches only its task's origins, request router + SOCKS5 proxy: ``Sandbox``,
  ``SandboxProxy``, ``host_entry``, ``url_allowed``, ``proxy_host``.
- execute.py: how each action runs on the page (``WebEnv.step`` calls ``execute.execute``).
- hangs.py: a page whose script hangs, told apart from a slow one by CPU time and stopped (``WebEnv``'s guard):
  ``env.hangs.ScriptGuard``, ``PageHung``, ``MAX_DIALOGS``.
- browser.py: one Chromium and many isolated contexts; the env one agent acts in (reset / step / observation,
  the observation's extractor in observation.js): ``BrowserPool``, ``WebEnv``, ``Observation``, ``StepResult``;
  what a context's events say in watch.py (``ContextWatch``), and the browser itself in chromium.py (where it
  is, its flags, browser servers elsewhere): ``find_chromium``, ``start_browser_server``.
- The task families, each registering itself on import: miniwob.py, MiniWoB++ (the embedded default):
  ``MiniWoBFamily``, ``miniwob_task``, ``MINIWOB_UNSOLVABLE``; webarena.py, WebArena / WebArena-Lite (configs
  and the family: ``load_webarena_tasks``, ``WebArenaFamily``), with its rubrics in webarena_rubrics.py
  (``evaluate``, ...), its helpers and logins in webarena_helpers.py (``webarena_login``, ...) and its site
  replicas in webarena_replicas.py (``SitePool``, ...); sitesuite.py, the WebArena-format site suite: ``SuiteFamily``,
  with its shop + forum, served here, in suite_site.py.
Every name listed is also ``env.<name>``, and each module ``env.<module>``.

Dependencies flow one way, in the order above: tasks uses sandbox's host_entry, actions uses compress.py's
response splitter; execute and browser use them (they name the env they act on by interfaces, tasks.TaskEnv and
execute.ActingEnv, not by importing browser); the families use tasks, sandbox and browser; this file imports
them all and nothing in the package imports it. So ``env.load_tasks("miniwob:click-button,login-user" |
"miniwob:all" | "suite:..." | "<webarena config>.json")`` finds every family wherever env is imported.

From the command line (``python -m env``, env/__main__.py):
    .venv/bin/python -m env miniwob:click-button 3        # a task by hand: the observation, then actions
    action> do(action="Click", element="0")                 #   from stdin until the episode ends
    .venv/bin/python -m env login --sites shopping,gitlab --out .auth    # WebArena logins
    .venv/bin/python -m env suite --port 8090              # serve the site suite (or write its configs)
"""

from __future__ import annotations

from . import miniwob, sitesuite, webarena  # noqa: F401  (each registers its family on import)
from .actions import (ACTION_NAMES, NEEDS_ARGUMENT, NEEDS_ELEMENT, OPTIONAL_ELEMENT, Action, ActionParseError,
                      format_action, parse_action)
from .browser import EXTRACT_JS, KEPT_ATTRS, MAX_OBS_CHARS, BrowserPool, Observation, StepResult, WebEnv
from .chromium import (LAUNCH_ARGS, browser_endpoints, find_chromium, redact_endpoint, start_browser_server,
                       stop_browser_server)
from .miniwob import (MINIWOB_BASE_URL, MINIWOB_EXCLUDE_IDS, MINIWOB_HOST, MINIWOB_UNSOLVABLE, MiniWoBFamily,
                      miniwob_task, miniwob_task_names)
from .sandbox import (NO_SERVICE_WORKER_JS, NO_WEBRTC_JS, Sandbox, SandboxProxy, address_toward, host_entry,
                      new_proxied_context, origin_allowed, outside_hosts_re, proxy_host, proxy_settings,
                      sandbox_proxy, url_allowed)
from .sitesuite import SuiteFamily
from .tasks import (DEMO_SEEDS, EVAL_SEEDS, FINDINGS_SEEDS, PAGE_SETS, RL_SEEDS, VALID_SEEDS, EpisodeCrash,
                    EpisodeStatus, Task, TaskEnv, TaskFamily, family_of, first_line, load_tasks, page_set, redact,
                    register_family)
from .watch import ContextWatch
from .webarena import EVAL_TYPES, WebArenaFamily, load_webarena_tasks, webarena_task
from .webarena_helpers import (LOGIN_SITES, WEBARENA_ACCOUNTS, WEBARENA_HELPERS, WEBARENA_SITES, check_login_alive,
                               check_storage_state, login_files, substitute_placeholders, webarena_login,
                               webarena_site_url)
from .webarena_rubrics import RUBRICS, evaluate, url_matches, word_tokenize
from .webarena_replicas import SitePool, site_pool

__all__ = [  # the package's public names: every one is also env.<name>
    "miniwob", "sitesuite", "webarena", "ACTION_NAMES", "NEEDS_ARGUMENT", "NEEDS_ELEMENT", "OPTIONAL_ELEMENT",
    "Action", "ActionParseError", "format_action", "parse_action", "EXTRACT_JS", "KEPT_ATTRS", "LAUNCH_ARGS",
    "MAX_OBS_CHARS", "BrowserPool", "ContextWatch", "Observation", "StepResult", "WebEnv", "browser_endpoints",
    "find_chromium", "redact_endpoint", "start_browser_server", "stop_browser_server", "MINIWOB_BASE_URL",
    "MINIWOB_EXCLUDE_IDS", "MINIWOB_HOST", "MINIWOB_UNSOLVABLE", "MiniWoBFamily", "miniwob_task",
    "miniwob_task_names", "NO_SERVICE_WORKER_JS", "NO_WEBRTC_JS", "Sandbox", "SandboxProxy", "address_toward",
    "host_entry", "new_proxied_context", "origin_allowed", "outside_hosts_re", "proxy_host", "proxy_settings",
    "sandbox_proxy", "url_allowed", "SuiteFamily", "DEMO_SEEDS", "EVAL_SEEDS", "FINDINGS_SEEDS", "PAGE_SETS", "RL_SEEDS", "VALID_SEEDS", "page_set",
    "EpisodeCrash", "EpisodeStatus", "Task", "TaskEnv", "TaskFamily", "family_of", "first_line", "load_tasks",
    "redact", "register_family", "EVAL_TYPES", "LOGIN_SITES", "RUBRICS", "WEBARENA_ACCOUNTS", "WEBARENA_HELPERS",
    "WEBARENA_SITES", "SitePool", "WebArenaFamily", "check_login_alive", "check_storage_state", "evaluate",
    "load_webarena_tasks", "login_files", "site_pool", "substitute_placeholders", "url_matches", "webarena_login",
    "webarena_site_url", "webarena_task", "word_tokenize",
]
