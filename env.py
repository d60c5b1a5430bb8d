"""The web environment for WebAgent-R1, the one module users import: ``import env`` gives the browser pool, the
agent's env, the action grammar, the task interface and all three task families, each living in its module:

- browser.py: one Chromium and many isolated contexts; the env one agent acts in (reset / step / observation):
  ``BrowserPool``, ``WebEnv``, ``Observation``, ``StepResult``, ``find_chromium``, ``start_browser_server``.
- actions.py: the action grammar, parse one action from a response and write it back (no browser):
  ``parse_action``, ``format_action``, ``Action``, ``ActionParseError``, ``ACTION_NAMES``.
- execute.py: how each action runs on the page: ``execute``.
- sandbox.py: a context reaches only its task's origins, request router + SOCKS5 proxy: ``Sandbox``,
  ``SandboxProxy``, ``host_entry``, ``url_allowed``, ``proxy_host``.
- tasks.py: what a task is, the ``TaskFamily`` interface and its registry, the MiniWoB seed ranges: ``Task``,
  ``TaskFamily``, ``register_family``, ``family_of``, ``load_tasks``, ``EpisodeCrash``, ``EVAL_SEEDS``.
- miniwob_tasks.py: MiniWoB++ (the embedded default): ``MiniWoBFamily``, ``miniwob_task``, ``MINIWOB_UNSOLVABLE``.
- webarena.py: WebArena / WebArena-Lite, configs, rubrics, helpers, logins, site replicas: ``evaluate``,
  ``load_webarena_tasks``, ``webarena_login``, ``SitePool``, ...
- sitesuite.py: the WebArena-format shop + forum served here: ``SuiteFamily``; ``python sitesuite.py`` serves it.
Every name listed is also ``env.<name>``.

A task family joins by registering itself when its module is imported (``tasks.register_family``); this
module imports the three, so ``env.load_tasks("miniwob:click-button,login-user" | "miniwob:all" |
"suite:..." | "<webarena config>.json")`` finds them wherever env is imported. Dependencies flow one way:
sandbox is a leaf, tasks uses its host_entry and actions compress.py's response splitter; browser and execute
use them; the families use tasks, sandbox and browser; env imports everything and nothing here imports env.

Quick manual check (prints the observation, then reads actions from stdin until the episode ends):
    .venv/bin/python env.py miniwob:click-button 3
    action> do(action="Click", element="0")
WebArena logins: ``.venv/bin/python env.py login --sites shopping,gitlab --out .auth`` (= webarena.py login).
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import miniwob_tasks  # noqa: F401  (registers the MiniWoB++ family, "miniwob:...")
import sitesuite  # noqa: F401  (registers the site suite's family, "suite:...")
import webarena as _webarena  # registers the WebArena family (config .json paths)
from actions import (ACTION_NAMES, NEEDS_ARGUMENT, NEEDS_ELEMENT, OPTIONAL_ELEMENT, Action,  # noqa: F401
                     ActionParseError, format_action, parse_action)
from browser import (EXTRACT_JS, KEPT_ATTRS, LAUNCH_ARGS, MAX_OBS_CHARS, BrowserPool, ContextWatch,  # noqa: F401
                     Observation, StepResult, WebEnv, browser_endpoints, find_chromium, redact_endpoint,
                     start_browser_server, stop_browser_server)
from execute import execute  # noqa: F401
from miniwob_tasks import (MINIWOB_BASE_URL, MINIWOB_EXCLUDE_IDS, MINIWOB_HOST, MINIWOB_UNSOLVABLE,  # noqa: F401
                           MiniWoBFamily, miniwob_task, miniwob_task_names)
from sandbox import (NO_SERVICE_WORKER_JS, NO_WEBRTC_JS, Sandbox, SandboxProxy, address_toward,  # noqa: F401
                     host_entry, new_proxied_context, origin_allowed, outside_hosts_re, proxy_host,
                     proxy_settings, sandbox_proxy, url_allowed)
from sitesuite import SuiteFamily  # noqa: F401
from tasks import (DEMO_SEEDS, EVAL_SEEDS, RL_SEEDS, TRAIN_SEEDS, VALID_SEEDS, EpisodeCrash,  # noqa: F401
                   EpisodeStatus, Task, TaskFamily, family_of, first_line, load_tasks, redact, register_family)


def __getattr__(name: str) -> Any:
    """WebArena's public names under env too (``env.evaluate``, ``env.load_webarena_tasks``, ...)."""
    if not name.startswith("_") and hasattr(_webarena, name):
        return getattr(_webarena, name)
    raise AttributeError(f"module 'env' has no attribute {name!r}")


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


if __name__ == "__main__":   # python env.py login --sites S,... --out DIR | python env.py miniwob:click-button [seed]
    import sys as _sys
    if _sys.argv[1:2] == ["login"]:
        _webarena._login_cli(_sys.argv[2:])
    else:
        asyncio.run(_manual_check(_sys.argv[1] if len(_sys.argv) > 1 else "miniwob:click-button",
                                  int(_sys.argv[2]) if len(_sys.argv) > 2 else 0))
