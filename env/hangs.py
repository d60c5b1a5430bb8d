"""A page whose script hangs, told apart from a slow one and stopped in seconds.

A script that never yields (``while (true) {}``) holds its page's main thread: no event, no evaluate runs there
again, and an action or an observation waits on it until its wall-clock deadline (60 s, set for busy machines).
A busy machine only delays that thread. The two differ in what the thread does meanwhile, and Chromium answers
two DevTools commands off the main thread, even while a script spins: ``Performance.getMetrics`` (its
``ThreadTime`` is the main thread's own CPU time) and ``Runtime.terminateExecution`` (stops the running
script; the page then answers again and the call waiting on it returns).

The rule (``ScriptGuard``): while the env waits on a call (a step, a reset) for longer than ``grace_s``, it queues
a trivial probe (``Runtime.evaluate("0")``) on the main thread of each of the context's pages. A probe that has
not run while that thread spent ``cpu_s`` seconds of its own CPU time means one task has held the thread for that
long: a hang; the guard stops the script and the call goes on (the step observes what the page shows). CPU time,
not wall time, so that load cannot make a working page look hung: on a busy box a starved thread gains CPU time
only as slowly as it runs, and a working page's tasks (milliseconds each on MiniWoB and WebArena) let the probe
in between them, so it runs after at most one of them. A page that hangs again after ``max_stops`` stops in one
episode ends it (``PageHung``, a crash with its reason); its context is not reused.

Dialog loops (``alert()`` forever) block the thread without using CPU: when one step has opened more than
``MAX_DIALOGS`` dialogs (pages open one per user action, a handful at most: MiniWoB's task pages none, WebArena's a
confirm() before a delete or a beforeunload), ``ContextWatch`` asks the guard to stop the script and dismisses the
dialog. A script between two dialogs does not take the termination (measured: the loop goes on), so each further
dialog counts as another stop and the loop ends the episode within a second.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Awaitable, TypeVar

from playwright.async_api import Error as PlaywrightError

from .tasks import EpisodeCrash

T = TypeVar("T")

#: Dialogs one step may open before the guard stops the page's script (a dialog loop).
MAX_DIALOGS = 20


class PageHung(EpisodeCrash):
    """A page hung again after the guard had stopped scripts ``max_stops`` times in the episode."""


class ScriptGuard:
    """Watches the main threads of one context's pages while the env waits on them, and stops a script that
    holds one (see the module's rule). ``attach(context, page)`` each page while it answers (a new tab on
    about:blank); ``await run(coro)`` awaits a call under watch; ``take()`` returns the reasons of the
    scripts stopped since it was last called; ``new_episode()`` when an episode starts."""

    def __init__(self, cpu_s: float = 2.0, grace_s: float = 1.0, poll_s: float = 0.25, max_stops: int = 2) -> None:
        self.cpu_s = cpu_s              # main-thread CPU seconds without the probe running: a hang (0: no guard)
        self.grace_s = grace_s          # calls that return sooner are not watched at all
        self.poll_s = poll_s
        self.max_stops = max_stops      # stops in one episode; the next one ends it
        self.sessions: dict[Any, Any] = {}   # page -> its CDP session, Performance enabled
        self._attaching: dict[Any, asyncio.Future] = {}
        self.stopped: list[str] = []    # reasons, since take()
        self.episode_stops = 0          # since new_episode()
        self._give_up: asyncio.Event | None = None

    def attach(self, context: Any, page: Any) -> asyncio.Future:
        """Open a CDP session on ``page`` and enable its metrics (once per page; await the result to know it is
        done). Performance.enable needs the main thread, so this is done while the page answers (a new tab, on
        about:blank); a page it cannot attach to is not guarded (its calls keep their deadlines)."""
        if not self.cpu_s:                       # the guard is off
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(None)
            return fut
        if page not in self._attaching:
            self._attaching[page] = asyncio.ensure_future(self._attach(context, page))
        return self._attaching[page]

    async def _attach(self, context: Any, page: Any, timeout_s: float = 10.0) -> None:
        with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
            session = await asyncio.wait_for(context.new_cdp_session(page), timeout_s)
            await asyncio.wait_for(session.send("Performance.enable"), timeout_s)
            self.sessions[page] = session

    def forget(self) -> None:
        """The context is gone: its sessions with it."""
        self.sessions.clear()
        for fut in self._attaching.values():
            fut.cancel()
        self._attaching.clear()

    def new_episode(self) -> None:
        self.episode_stops = 0

    def take(self) -> list[str]:
        stopped, self.stopped = self.stopped, []
        return stopped

    def stop(self, page: Any, reason: str) -> None:
        """Stop the script running on ``page``'s main thread (or, when none runs, the next one to start). The
        command is sent, not awaited: a script blocked in a dialog takes it when the dialog closes."""
        session = self.sessions.get(page)
        if session is None:
            return
        sent = asyncio.ensure_future(session.send("Runtime.terminateExecution"))
        sent.add_done_callback(lambda f: f.cancelled() or f.exception())   # its answer is not needed
        self.stopped.append(reason)
        self.episode_stops += 1
        if self.episode_stops > self.max_stops and self._give_up is not None:
            self._give_up.set()

    async def run(self, call: Awaitable[T]) -> T:
        """Await ``call`` while watching the attached pages; raises PageHung when a page hangs again after
        ``max_stops`` stops in the episode."""
        if not self.cpu_s:                       # the guard is off: the call alone
            return await call
        self._give_up = asyncio.Event()
        task = asyncio.ensure_future(call)
        watch = asyncio.ensure_future(self._watch())
        give_up = asyncio.ensure_future(self._give_up.wait())
        try:
            await asyncio.wait({task, give_up}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() or self.episode_stops > self.max_stops:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise PageHung(f"the page hung again after {self.max_stops} stops in one episode: "
                               f"{self.stopped[-1]}")
            return task.result()
        finally:
            for t in (task, watch, give_up):
                t.cancel()
            with contextlib.suppress(BaseException):
                await watch
            self._give_up = None

    async def _watch(self) -> None:
        await asyncio.sleep(self.grace_s)
        probes: dict[Any, tuple[asyncio.Future, float]] = {}   # page -> (probe, thread time when it was sent)
        try:
            while True:
                for page, session in list(self.sessions.items()):
                    cpu = None if page.is_closed() else await self._thread_time(session)
                    if cpu is None:
                        continue
                    probe = probes.get(page)
                    if probe is None or probe[0].done() or cpu < probe[1]:   # answered, or a new renderer
                        probes[page] = (asyncio.ensure_future(self._probe(session)), cpu)
                    elif cpu - probe[1] >= self.cpu_s:
                        probes.pop(page)[0].cancel()
                        self.stop(page, f"a script held the page's main thread for {cpu - probe[1]:.1f} s of CPU "
                                        "without yielding; stopped")
                await asyncio.sleep(self.poll_s)
        finally:
            for probe, _ in probes.values():
                probe.cancel()

    @staticmethod
    async def _thread_time(session: Any) -> float | None:
        with contextlib.suppress(PlaywrightError, asyncio.TimeoutError):
            metrics = await asyncio.wait_for(session.send("Performance.getMetrics"), 10)
            return next(m["value"] for m in metrics["metrics"] if m["name"] == "ThreadTime")
        return None

    @staticmethod
    async def _probe(session: Any) -> None:
        with contextlib.suppress(PlaywrightError):
            await session.send("Runtime.evaluate", {"expression": "0"})
