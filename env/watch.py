"""What one browser context's events tell its env (``ContextWatch``): requests in flight, navigations, tabs,
dialogs, and why an episode cannot go on (a crashed page, a closed context, a service worker)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from playwright.async_api import Error as PlaywrightError

from .hangs import MAX_DIALOGS, ScriptGuard
from .sandbox import Sandbox

log = logging.getLogger("webagent.env")

class ContextWatch:
    """What the events of one browser context tell its env: requests in flight, main-frame navigations, tabs
    opened (per episode, ``new_episode``), dialogs accepted (per step), and why the episode cannot go on: a
    page crashed, the context closed while an episode ran (``running()``), a service worker started (counted
    as blocked; such a context is not reused). One watch per context: ``stop()`` when the env lets its context
    go, after which that context's events (they still arrive while it closes) change nothing. A new tab
    becomes the active one (``on_tab(page)``); every tab is attached to the env's ``guard`` (hangs.py), which
    also stops a dialog loop: more than MAX_DIALOGS dialogs in one step."""

    def __init__(self, context: Any, sandbox: Sandbox, on_tab: Any, running: Any, guard: ScriptGuard) -> None:
        self.sandbox = sandbox
        self.on_tab = on_tab
        self.running = running
        self.guard = guard
        self.context = context
        self.live = True
        self.new_episode()
        context.on("serviceworker", self._on_service_worker)
        context.on("page", self._on_page)
        context.on("request", self._on_request)
        context.on("requestfinished", self._on_request_done)
        context.on("requestfailed", self._on_request_done)
        context.on("close", lambda _c: self.set_crash("the browser context was closed"))

    def new_episode(self) -> None:
        self.inflight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.navs = 0                           # main-frame navigations, of any tab
        self.opened = 0                         # tabs opened (popups, target=_blank, the start tabs)
        self.tab_opened = asyncio.Event()
        self.dialogs: list[str] = []            # accepted during the current step (step() clears both)
        self.n_dialogs = 0                      # ... and how many (the list keeps the first MAX_DIALOGS)
        self.crash: str | None = None
        self.worker_started = False

    def stop(self) -> None:
        self.live = False

    def set_crash(self, reason: str) -> None:
        if self.live and self.crash is None and self.running():
            self.crash = reason

    def _on_page(self, page: Any) -> None:
        if not self.live:
            return
        page.on("crash", lambda _p: self.set_crash("the page crashed"))
        page.on("dialog", self._on_dialog)
        page.on("framenavigated", lambda f: self._on_nav(page, f))
        self.guard.attach(self.context, page)
        self.opened += 1
        self.tab_opened.set()
        self.on_tab(page)

    def _on_service_worker(self, worker: Any) -> None:
        """A service worker started although pages cannot register one (a way around the refusal that we do
        not know of): counted as blocked, and its context is never reused, so the worker, which could answer
        a later episode's requests on its origin, ends with the context."""
        if self.live:
            self.worker_started = True
            self.sandbox.count(worker.url, "service_worker")
            log.warning("a service worker started (%s); its context will not be reused", worker.url[:200])

    async def _on_dialog(self, dialog: Any) -> None:
        """alert/confirm/prompt/beforeunload: accepted (a confirm() guards the agent's own action, e.g. a
        delete button); the message is reported in info["dialogs"] of the step. Past MAX_DIALOGS in one step the
        page is in a dialog loop: the guard is told to stop its script and the dialog is dismissed (a loop that
        goes on ends the episode: hangs.py)."""
        self.n_dialogs += self.live
        looping = self.live and self.n_dialogs > MAX_DIALOGS
        if looping:
            self.guard.stop(dialog.page, f"{self.n_dialogs} dialogs in one step (a dialog loop)")
        elif self.live:
            self.dialogs.append(f"{dialog.type}: {dialog.message}"[:300])
        with contextlib.suppress(PlaywrightError):
            await (dialog.dismiss() if looping else dialog.accept())

    def _on_nav(self, page: Any, frame: Any) -> None:
        if self.live and frame is page.main_frame:
            self.navs += 1

    def _on_request(self, _request: Any) -> None:
        if self.live:
            self.inflight += 1
            self.idle.clear()

    def _on_request_done(self, _request: Any) -> None:
        if self.live:
            self.inflight = max(0, self.inflight - 1)
            if self.inflight == 0:
                self.idle.set()
