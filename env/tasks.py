"""What a task is and how a kind of task joins the environment: ``Task``, the ``TaskFamily`` interface, the
registry of families, ``load_tasks``, the MiniWoB seed ranges, and ``EpisodeCrash`` (how an episode ends
with a recorded reason). No browser and no family here: each family lives in its own module and registers
itself when imported (miniwob.py, webarena.py, sitesuite.py, or yours); env/__init__.py imports the three, so
``env.load_tasks(spec)`` finds them wherever env is imported.

    class Quiz(TaskFamily): ...          # see TaskFamily
    register_family(Quiz())              # then load_tasks("quiz:...") and WebEnv run its tasks
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, Sequence

from .sandbox import host_entry


#: MiniWoB episode seeds (one seed = one page), in five disjoint ranges so that no two uses share a page:
#: demonstrations (demos.py), RL rollouts (train_mgrpo.py, which wraps around inside its range whatever
#: --seed and the run's length say), validation pages for choosing settings (eval.py --seed-start 500000),
#: the held-out test pages (eval.py's default), whose first 50 a task every issue since the first test run has
#: evaluated (the development test set, make demo's), and held-out pages no evaluation touched before
#: 2026-12-02, kept for the findings' runs (eval.py --seed-start 2000000; docs/results.md says which pages
#: each table is on).
DEMO_SEEDS = range(0, 100_000)
RL_SEEDS = range(100_000, 500_000)
VALID_SEEDS = range(500_000, 1_000_000)
EVAL_SEEDS = range(1_000_000, 2_000_000)
FINDINGS_SEEDS = range(2_000_000, 3_000_000)
PAGE_SETS = {"demonstration": DEMO_SEEDS, "RL": RL_SEEDS, "validation": VALID_SEEDS,
             "held-out (development test set)": EVAL_SEEDS, "held-out (fresh, the findings')": FINDINGS_SEEDS}


def page_set(seed: int) -> str:
    """The name of the range a page's seed lies in (``PAGE_SETS``), "outside the ranges" for any other."""
    return next((name for name, seeds in PAGE_SETS.items() if seed in seeds), "outside the ranges")


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


class EpisodeCrash(RuntimeError):
    """The page, its context or the browser died. Raised by reset() when starting the episode failed twice
    (or the start URL does not load); inside step() it becomes done=True, info["done_reason"] == "crash".
    A family raises it too (e.g. a WebArena site whose replicas all failed their reset)."""


# Browser servers' endpoint tokens (``ws://host:port/TOKEN``, chromium.browser_endpoints registers them): the
# token is the only thing between a network neighbour and a program launched on the browser machine, and
# Playwright's errors quote the whole URL. Nothing this process records or logs holds one.
SECRETS: set[str] = set()


def redact(text: str) -> str:
    """``text`` with every registered browser-server token replaced by ``<token>``."""
    for secret in SECRETS:
        text = text.replace(secret, "<token>")
    return text


def first_line(e: BaseException) -> str:
    """The first line of an error (at most 300 characters, tokens redacted), the reason an episode records."""
    text = redact(str(e)).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


# ---- task families: how a kind of task loads, starts, observes and scores its episodes ----
class TaskEnv(Protocol):
    """What a family's hooks may use of the env that runs them: browser.WebEnv, which imports this module (so
    the hooks name this interface, not the class, and no import runs the other way)."""
    nav_timeout_ms: int                  # the page-load timeout of the env's navigations
    judge: Any                           # WebArena's fuzzy-match judge for evaluate(), or None
    helpers: Any                         # WebArena's program_html helper functions for evaluate(), or None
    families: dict[str, Any]             # this env's own families by name (else the registered ones)

    async def eval_js(self, target: Any, js: str, arg: Any = None) -> Any:
        """page/frame/locator .evaluate with the env's timeout."""


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
        replica of each site a state-changing task uses (``webarena_replicas.SitePool``) and gives the task with its
        URLs moved there; the runner (rollout.Runner) enters this around every episode."""
        yield task

    def hosts(self, task: Task) -> tuple[str, ...]:
        """Hosts a context of ``task`` may reach ("host", "host:port", or "file" for file:// URLs); every other
        request is blocked and counted. Default: Task.allowed_hosts, else the hosts of its start_url tabs."""
        if task.allowed_hosts:
            return tuple(task.allowed_hosts)
        hosts = (host_entry(url) for url in task.start_url.split(" |AND| "))
        return tuple(h for h in hosts if h)

    async def context_options(self, env: TaskEnv, browser: Any, task: Task) -> dict[str, Any]:
        """Extra ``browser.new_context`` options for ``task``'s context. Default: its ``storage_state``
        (Playwright's cookies and local storage file), if any; WebArena's family checks the login first."""
        return {"storage_state": task.storage_state} if task.storage_state else {}

    async def setup_context(self, env: TaskEnv, context: Any, task: Task) -> None:
        """Prepare a new Playwright context before any tab opens, e.g. ``await context.route(...)`` to serve
        pages without a server. Default: nothing."""

    def observe_exclude(self, task: Task) -> Sequence[str]:
        """Element ids (of the top document) left out of the observation with their subtrees: page furniture
        that is not part of the task. Default: none."""
        return ()

    async def start(self, env: TaskEnv, page: Any, task: Task) -> Task:
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

    #: What the page must show before it is observed: JS ``() => bool``, read inside the observation's evaluate
    #: (no extra round trip); while it is false WebEnv waits for it (at most ``drawn_wait_ms``, polled per
    #: animation frame) and observes again. MiniWoB's: every image its style draws has arrived (an icon that
    #: is still loading has no size, and the observation would leave it out). None = observe at once.
    drawn_js: str | None = None
    drawn_wait_ms: int = 5_000

    def read_status(self, value: Any) -> EpisodeStatus | None:
        """The episode's status from the value ``status_js`` returned (None: nothing to report, e.g. the
        agent left the task's page)."""
        return None

    async def status(self, env: TaskEnv, page: Any) -> EpisodeStatus | None:
        """The episode's status now (done, reward, raw reward, reason), or None. Default: ``status_js`` read
        on its own and given to ``read_status``. After an action WebEnv calls this only when ``status_js`` is
        None (else it reads status_js with the observation): override it for a status that is not in the page."""
        if self.status_js is None:
            return None
        return self.read_status(await env.eval_js(page, self.status_js))

    async def score_exit(self, env: TaskEnv, page: Any, task: Task, message: str | None,
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

    def start_kinds(self, task: Task) -> tuple[str, ...]:
        """The kinds of start ``task``'s episodes have by seed, where there are several (an RL step counts each
        kind's rollouts apart too, ``rollout/success/ID@KIND``); () = one kind (the default)."""
        return ()

    def start_kind(self, task: Task) -> str:
        """The kind of start of ``task``'s episode at its seed, one of ``start_kinds(task)``."""
        return ""


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
    WebArena-Lite config JSON (a list or one task) to the webarena family. Families are those imported so
    far: ``env.load_tasks`` (the one to call) has all three."""
    name, sep, body = spec.partition(":")
    if sep and name in _FAMILIES:
        return _FAMILIES[name].load(body.strip())
    if (os.path.exists(spec) or spec.endswith(".json")) and "webarena" in _FAMILIES:
        return _FAMILIES["webarena"].load(spec)
    raise ValueError(f"unknown task spec {spec!r}: use '<family>:<tasks>' (families: {', '.join(_FAMILIES)}) "
                     f"or the path of a config .json" + ("" if "webarena" in _FAMILIES else
                                                          " (with webarena.py imported: import env)"))
