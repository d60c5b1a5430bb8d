"""The browser environment: a Playwright browser pool and the env one agent acts in.

- ``BrowserPool``: one headless Chromium (async Playwright), many isolated contexts (own cookies and
  storage). Browser: $WEBAGENT_CHROMIUM, else Playwright's bundled Chromium when installed, else a system
  one (chromium / chromium-browser on PATH, /usr/bin/chromium: chromium.py). Relaunched when it dies. With
  ``endpoints`` (``--browser-endpoint``) it connects to ``playwright run-server`` servers instead.
- ``WebEnv.reset(task) / step(response)``: ``step`` takes the model's whole reply, parses ONE action
  (actions.parse_action, a real tokenizer, never eval), executes it (execute.py), and returns s_{t+1}, the
  binary reward and info (action, parse_error, error, done_reason, blocked_requests, raw_reward, counters).
  WebEnv asks ``Task.family``'s family (tasks.TaskFamily) how to start, observe and score an episode and
  never branches on the site; its context is guarded by a sandbox.Sandbox and watched by a ``ContextWatch``
  (watch.py).
- Observation s_t: simplified HTML of the current viewport (``<tag id="N" attr="v"> text </tag>``),
  interactive elements numbered from 0 and stamped in the page as ``data-webagent-id``; one
  ``page.evaluate`` (EXTRACT_JS, which also returns the family's ``status_js`` value). ``max_obs_chars``
  (default MAX_OBS_CHARS) truncates it (never the intent) and says so.
- Reward: binary, from the family. MiniWoB: the page's raw reward > 0 when the page ends the episode
  (``exit()`` before that scores 0); WebArena: the rubric ``evaluate`` (string_match / url_match /
  program_html) on exit().
- Faults: a crashed page, a closed context or a dead browser ends the episode (done_reason "crash", a
  reason in info); the next reset works (fresh context, browser relaunched).

Departures from the paper / its reference code
- The reference code sleeps a fixed 3 s after each action; we wait on page events (one round trip,
  in-flight requests capped at ``idle_cap_ms``, the load event after a navigation). A page that changes
  later on its own (animations, autocomplete delays) is waited for by the agent's own "Wait" (1 s).
- Early stop after K unparseable responses or K identical actions in a row (K=5), done_reason
  "parse_failures" / "repeated_action".
- Observation details the paper leaves open: nested interactive elements are all numbered when each has
  content of its own (a wrapper around exactly one control is not); a text-less control gets its CSS class
  (else its page id) as ``class`` hint; aria-label/alt become ``title``; a scrollable page or list says
  "[more content below: scroll to see it]"; the tab list "Tabs (* = current): [0]* title [1] title" is
  prefixed only when more than one tab is open (``tab_header``: the model needs tab indices for Switch
  Tab, but a constant header on single-tab MiniWoB pages would only cost tokens); the URL is not in the
  text (Observation.url has it). Off-screen subtrees in normal flow are pruned (a fixed/absolute element
  inside an off-screen box is missed).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from .actions import Action, ActionParseError, format_action, parse_action
from .chromium import LAUNCH_ARGS, browser_endpoints, find_chromium, redact_endpoint
from .execute import execute
from .hangs import PageHung, ScriptGuard
from .sandbox import Sandbox, proxy_host, proxy_settings, proxy_toward, sandbox_proxy
from .watch import ContextWatch
from .tasks import EpisodeCrash, Task, TaskFamily, family_of, first_line

log = logging.getLogger("webagent.env")


# ---- what one step returns ----

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


@dataclass
class StepResult:
    """Result of ``WebEnv.step``: the next observation, the binary reward (non-zero only when done),
    whether the episode ended, and info (``action``, ``error``, ``parse_error``, ``done_reason``, ...)."""
    obs: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


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
def _extract_js(status_js: str | None, drawn_js: str | None) -> str:
    """EXTRACT_JS that also returns a family's ``status_js`` value as ``status`` and its ``drawn_js`` value as
    ``drawn``: one round trip per step."""
    if status_js is None and drawn_js is None:
        return EXTRACT_JS
    more = "".join(f" r.{k} = ({js})();" for k, js in (("status", status_js), ("drawn", drawn_js)) if js)
    return f"(opts) => {{ const r = ({EXTRACT_JS})(opts);{more} return r; }}"


# ---- browser pool: one Chromium (or browser servers elsewhere), many isolated contexts ----

class BrowserPool:
    """One Chromium process (async Playwright) shared by many environments, each with its own browser
    context (own cookies, storage, cache). The browser is relaunched when it died.

    ``endpoints`` (default: $WEBAGENT_BROWSER_ENDPOINT): browsers on other machines instead, Playwright
    browser servers (``scripts/browser_server.py``: ``run-server`` behind a secret path); the pool connects to
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
        if self.endpoints:
            proxy_toward(self.endpoints[0])
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
                errors.append(f"{redact_endpoint(endpoint)}: {first_line(e)}")
                self._down[endpoint] = time.monotonic() + self.server_retry_s
                continue
            self._down.pop(endpoint, None)
            self.launches += 1
            log.info("connected to Chromium %s at %s, connection #%d", self.remote[endpoint].version,
                     redact_endpoint(endpoint), self.launches)
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

class WebEnv:
    """One agent's browser context. ``reset(task)`` opens the task's tabs in a fresh context (nothing carries
    over from an earlier episode); ``step(response)`` parses one action from the model's response, executes
    it (execute.py), and returns the next observation. The env counts steps and ends the episode at
    ``task.max_steps``. Its context is guarded by ``self.sandbox`` and watched by ``self.watch``.

    >>> obs = await env.reset(task)                                               # doctest: +SKIP
    >>> res = await env.step('<answer>do(action="Click", element="0")</answer>')  # doctest: +SKIP
    >>> res.reward, res.done, res.info["done_reason"]                             # doctest: +SKIP
    (1.0, True, 'page_done')
    """

    def __init__(self, pool: BrowserPool, *, max_obs_chars: int | None = MAX_OBS_CHARS, max_repeats: int = 5,
                 max_parse_failures: int = 5, viewport: tuple[int, int] = (1280, 720), hang_cpu_s: float = 2.0,
                 action_timeout_ms: int = 60_000, nav_timeout_ms: int = 15_000, load_timeout_ms: int = 5_000,
                 idle_cap_ms: int = 1_000, eval_timeout_s: float = 60.0, wait_s: float = 1.0,
                 tab_header: str = "auto", reuse_context: bool = True, max_context_episodes: int = 50,
                 families: Sequence[TaskFamily] = (), judge: Any = None, helpers: Any = None) -> None:
        self.pool = pool
        self.max_obs_chars = max_obs_chars      # observation cap in characters (never cuts the intent)
        self.max_repeats = max_repeats          # K: stop after K identical actions in a row
        self.max_parse_failures = max_parse_failures  # K: stop after K unparseable responses in a row
        self.viewport = viewport
        # Wall-clock deadlines, meant to end only a page that hangs, never a busy machine's slow one (at 64
        # contexts on two busy cores one Playwright call took up to 14 s; bench/bench_verdicts.py):
        # - action_timeout_ms: a Playwright action's, once execute.element_state found the element ready (so it
        #   waits out no more than animations and the navigations the action started);
        # - eval_timeout_s: an evaluate's, or another call's without a timeout of its own (a crash);
        # - nav_timeout_ms, load_timeout_ms: a navigation's, the load event's after one;
        # - idle_cap_ms: how long settle waits for requests in flight, a cap on waiting only (what the observation
        #   needs of them, MiniWoB's icons, the family's drawn_js waits for, up to its drawn_wait_ms: neither
        #   cap was reached at 64 contexts on busy cores).
        # rollout.Runner's episode timeout bounds a whole episode besides; a hung page is stopped sooner (hangs.py).
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
        self.sandbox = Sandbox()                # the request router of this env's contexts, its counts
        self.guard = ScriptGuard(cpu_s=hang_cpu_s)   # stops a script that holds a page's main thread
        self.watch: ContextWatch | None = None  # the current context's events
        self._proxy_port: int | None = None     # this context's SandboxProxy listener
        self._browser: Any = None               # the browser this env's context lives in
        self._last_obs: Observation | None = None
        self._reset_episode_state()

    def _reset_episode_state(self) -> None:
        self.steps = 0
        self.n_parse_errors = 0
        self.n_action_errors = 0
        self._parse_streak = 0
        self._repeat_streak = 0
        self._last_action: str | None = None
        self.n_labels = 0                       # elements numbered in the last observation
        self.label_frames: dict[str, list[str]] = {}   # element id -> the iframes it lies in
        self.sandbox.new_episode()
        self.guard.new_episode()
        if self.watch is not None:
            self.watch.new_episode()

    @property
    def page(self) -> Any:
        """The active Playwright page (the tab the agent acts in)."""
        return self._page

    @page.setter
    def page(self, page: Any) -> None:
        self._page = page

    # the sandbox's counts of the current episode, as info reports them
    blocked_requests = property(lambda self: self.sandbox.blocked_requests)
    blocked_urls = property(lambda self: self.sandbox.blocked_urls)
    blocked_kinds = property(lambda self: self.sandbox.blocked_kinds)

    def family_for(self, task: Task) -> TaskFamily:
        """The family that runs ``task`` in this env: this env's own of that name, else the registered one."""
        return self.families.get(task.family) or family_of(task)

    # -- context lifecycle --

    async def _close_context(self) -> None:
        if self.watch is not None:
            self.watch.stop()                   # events of the old context are ignored from now on
        ctx, self.context, self._page = self.context, None, None
        self.guard.forget()
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
        # task's allow-list (redirect hops included, which the request router never sees)
        sandbox_proxy().close(self._proxy_port)
        self._proxy_port = await sandbox_proxy().listen(self.sandbox.proxy_check(self.sandbox.allowed,
                                                                                 fam.routed_hosts))
        kwargs: dict[str, Any] = dict(
            viewport={"width": self.viewport[0], "height": self.viewport[1]}, accept_downloads=False,
            service_workers="block", locale="en-US", proxy=proxy_settings(self._proxy_port))
        kwargs.update(await fam.context_options(self, browser, task))     # e.g. a WebArena login
        try:
            ctx = await self.timed(browser.new_context(**kwargs))
        except PlaywrightError as e:
            if "closed" not in str(e).lower():
                raise
            # the browser is gone although it reads as connected: Playwright's driver process died (it does
            # not report that to the browser object). Relaunch both, once, and carry on.
            log.warning("browser unreachable (%s); relaunching Playwright and Chromium", first_line(e))
            browser = await self.pool.get_browser(stale=browser)
            ctx = await self.timed(browser.new_context(**kwargs))
        self._browser = browser
        ctx.set_default_timeout(self.action_timeout_ms)
        ctx.set_default_navigation_timeout(self.nav_timeout_ms)
        await self.sandbox.route_requests(ctx, self.eval_timeout_s)
        await self.timed(fam.setup_context(self, ctx, task))               # e.g. MiniWoB's file routes
        await self.sandbox.guard_page(ctx, self.eval_timeout_s)
        await self.timed(ctx.add_init_script(POPUP_PROBE_JS))
        self.watch = ContextWatch(ctx, self.sandbox, self._on_new_tab, running=lambda: not self._done,
                                  guard=self.guard)
        return ctx

    def _on_new_tab(self, page: Any) -> None:
        """A newly opened tab (a popup, target=_blank) becomes the active one (reset opens the first itself)."""
        if self._page is not None:
            self._page = page

    def dead_reason(self) -> str | None:
        """Why the episode cannot go on (browser, context or page gone), or None."""
        if self.watch is not None and self.watch.crash:
            return self.watch.crash
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

    async def timed(self, coro: Any, timeout_s: float | None = None) -> Any:
        """Await a Playwright call that has no timeout of its own, with one (the env's eval timeout unless
        given; execute.py's actions use it too)."""
        return await asyncio.wait_for(coro, timeout_s or self.eval_timeout_s)

    async def eval_js(self, target: Any, js: str, arg: Any = None) -> Any:
        """page/frame/locator .evaluate with the env's timeout (a hung page must not hang the env); for
        families too."""
        return await asyncio.wait_for(target.evaluate(js, arg), self.eval_timeout_s)

    async def settle(self, page: Any, navs_before: int, opened_before: int | None = None) -> None:
        """After an action: one round trip (flushes pending events and reads whether the page asked for a
        new tab), wait (capped) for that tab, for in-flight requests, and for the load event when the main
        frame navigated."""
        watch = self.watch
        popups = 0
        with contextlib.suppress(PlaywrightError):
            popups = await self.eval_js(page, "() => { const n = window.__webagentPopups || 0; "
                                            "window.__webagentPopups = 0; return n; }")
        loop = asyncio.get_running_loop()
        if popups and opened_before is not None and watch.opened == opened_before:
            with contextlib.suppress(asyncio.TimeoutError):      # the new tab's page event is on its way
                await asyncio.wait_for(watch.tab_opened.wait(), self.load_timeout_ms / 1000)
        deadline = loop.time() + self.idle_cap_ms / 1000
        while watch.inflight > 0 and (left := deadline - loop.time()) > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(watch.idle.wait(), left)
        if watch.navs != navs_before and not page.is_closed():
            with contextlib.suppress(PlaywrightTimeoutError):
                await page.wait_for_load_state("load", timeout=self.load_timeout_ms)

    # -- observation --

    async def _observe(self, error: str | None = None) -> tuple[Observation, Any]:
        """Extract the observation of the active tab and, in the same evaluate, the value of the family's
        status_js (None without one); returns both. When the family's drawn_js says the page is not drawn
        yet, wait for it (capped) and extract again."""
        page = self._page
        fam = self._family
        assert self.task is not None and fam is not None
        opts = {"keep": list(KEPT_ATTRS), "exclude": list(fam.observe_exclude(self.task))}
        js = _extract_js(fam.status_js, fam.drawn_js)
        res = await self._extract(page, js, opts)
        if res.get("drawn") is False:
            with contextlib.suppress(PlaywrightError):
                await page.wait_for_function(fam.drawn_js, timeout=fam.drawn_wait_ms)
            res = await self._extract(page, js, opts)
        self.n_labels = res["n"]
        self.label_frames = res["frames"]
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

    async def _extract(self, page: Any, js: str, opts: dict[str, Any]) -> dict[str, Any]:
        for attempt in range(3):
            try:
                return await self.eval_js(page, js, opts)
            except PlaywrightError as e:
                # "Execution context was destroyed": a navigation raced the extraction; wait for it and retry
                if attempt == 2 or self.dead_reason():
                    raise
                log.debug("observation retry after %s", e)
                with contextlib.suppress(PlaywrightError):
                    await page.wait_for_load_state("domcontentloaded", timeout=self.load_timeout_ms)
        raise AssertionError("unreachable")

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
        if self._family is not fam or task.storage_state or self.watch.crash or self.watch.worker_started:
            return False
        if self._context_episodes >= self.max_context_episodes:
            return False
        if fam.hosts(task) != self.sandbox.allowed:               # the request router was built for those hosts
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
                    return await self.guard.run(self._reset_once(task, fam, reuse))
            except PageHung as e:                   # not retried: the start page hangs whenever it loads
                self.watch.set_crash(str(e))        # (its context is not reused)
                self._done, self._done_reason = True, "crash"
                raise EpisodeCrash(f"reset of {task.task_id} failed: {e}") from e
            except (PlaywrightError, asyncio.TimeoutError) as e:
                reason = self.dead_reason() or first_line(e)
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
        self.sandbox.allowed = fam.hosts(task)
        if reuse:
            page = await self._reuse_tab(prev, task, fam)
            self._context_episodes += 1
        else:
            self.context = await self._new_context(task, fam)
            self._context_episodes = 1
            urls = [u.strip() for u in task.start_url.split(" |AND| ") if u.strip()]
            page = None
            for url in urls:                        # WebArena: several start tabs; the first is active
                tab = await self.timed(self.context.new_page())
                await self.guard.attach(self.context, tab)   # while it answers (about:blank)
                page = page or tab
                self._page = tab
                await tab.goto(url, wait_until="domcontentloaded", timeout=self.nav_timeout_ms)
                await self.settle(tab, -1)
            self._page = page
            await self.timed(page.bring_to_front())
        self.task = await fam.start(self, page, task)
        obs, _ = await self._observe()
        return obs

    async def _reuse_tab(self, prev: Task, task: Task, fam: TaskFamily) -> Any:
        """The kept context's first tab, ready for the next episode: other tabs closed, cookies cleared, the
        start URL loaded again (unless the family restarts the same page in place)."""
        pages = self.context.pages
        for extra in pages[1:]:
            with contextlib.suppress(PlaywrightError):
                await self.timed(extra.close())
        await self.timed(self.context.clear_cookies())
        page = self._page = pages[0]
        if not fam.restart_in_place(prev, task, page.url):
            await page.goto(task.start_url, wait_until="domcontentloaded", timeout=self.nav_timeout_ms)
            await self.settle(page, -1)
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
        if self.watch is not None:
            self.watch.dialogs.clear()
            self.watch.n_dialogs = 0
        task = self.task
        try:
            obs, reward, done_reason = await self.guard.run(self._act(response, info))
        except (EpisodeCrash, PlaywrightError, asyncio.TimeoutError) as e:
            if isinstance(e, PageHung):
                self.watch.set_crash(str(e))        # the reason; and the context is not reused
            reason = self.dead_reason() or first_line(e) or type(e).__name__
            log.warning("episode of %s crashed at step %d: %s", task.task_id, self.steps, reason)
            info["error"] = f"the browser failed: {reason}"
            info["reason"] = reason
            reward, done_reason = 0.0, "crash"
            obs = Observation(text="", url=self._safe_url(), intent=task.intent, error=info["error"])
            self._last_obs = obs
        return StepResult(obs=obs, reward=reward, done=done_reason is not None,
                          info=self._finish_info(info, done_reason))

    async def _act(self, response: str, info: dict[str, Any]) -> tuple[Observation, float, str | None]:
        """step()'s work, under the guard: parse, execute, observe; returns (obs, reward, done_reason)."""
        task = self.task
        reward, done_reason = 0.0, None
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
                err = await execute(self, action)
                if err:
                    self.n_action_errors += 1
                    info["error"] = err
        if dead := self.dead_reason():
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
        return obs, reward, done_reason

    def _finish_info(self, info: dict[str, Any], done_reason: str | None) -> dict[str, Any]:
        info["done_reason"] = done_reason
        info["blocked_requests"] = self.blocked_requests
        if self.blocked_kinds:
            info["blocked_kinds"] = dict(self.blocked_kinds)
        info["steps"] = self.steps
        info["n_parse_errors"] = self.n_parse_errors
        info["n_action_errors"] = self.n_action_errors
        if self.watch is not None and self.watch.dialogs:
            info["dialogs"] = list(self.watch.dialogs)
        if stopped := self.guard.take():        # scripts stopped since the last step (its reset's included)
            info["hung_scripts"] = stopped
        if done_reason is not None:
            self._done = True
            self._done_reason = done_reason
        return info

    def _safe_url(self) -> str:
        try:
            return self._page.url if self._page is not None else ""
        except PlaywrightError:
            return ""


# Counts in-page requests for a new tab (window.open, an unprevented click on a link/form with a target),
# so that the step waits for the new tab's page event instead of racing it.
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
