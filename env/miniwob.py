"""MiniWoB++ as a task family (the embedded default): the pages of the installed ``miniwob`` package, served
under http://miniwob.local/ by each context's request router (no server process, no port; flight.* pages
need http://, and cookies work, which file:// would not give), seeded and started in the page
(``Math.seedrandom(seed); core.startEpisodeReal()``), scored by the page's own reward.

- ``load_tasks("miniwob:click-button,login-user")`` or ``"miniwob:all"`` (every task this action space and a
  text observation can solve: ``MINIWOB_UNSOLVABLE`` says why each other one cannot be);
  ``miniwob_task(name, seed)`` makes one Task.
- The page's own episode timer is disabled, and its countdown display stopped; the page is reloaded for every episode
  (``MiniWoBFamily(in_place=True)`` restarts it in place: faster, but some pages keep state across episodes).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import json
import mimetypes
import re
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import unquote, urlsplit

from playwright.async_api import Error as PlaywrightError

from .tasks import EpisodeStatus, Task, TaskEnv, TaskFamily, register_family

MINIWOB_HOST = "miniwob.local"
MINIWOB_BASE_URL = f"http://{MINIWOB_HOST}/"
MINIWOB_EXCLUDE_IDS = ("reward-display", "sync-task-cover", "click-canvas")   # core.js overlays, not the task
MINIWOB_EPISODE_MS = 10 ** 9          # core.EPISODE_MAX_TIME: the page's own timer never ends an episode
# True once every rendered element whose style draws an image as its content (the email pages' trash, star and
# search icons: CSS content: url(...)) has a size, i.e. its image has arrived; until then the observation, which
# leaves out elements without a size, would not show them
STYLE_IMAGES_DRAWN_JS = """() => Array.from(document.querySelectorAll('body *')).every(el =>
    !getComputedStyle(el).content.startsWith('url(') || el.getClientRects().length === 0
    || el.getBoundingClientRect().width > 0)"""
STYLE_IMAGES_WAIT_MS = 5_000          # an image that never arrives (a missing file) costs this once per reset; a busy
                                      # box may take seconds to serve one


@functools.lru_cache(maxsize=1)
def _miniwob_html_dir() -> Path:
    """The package's html directory, found once per process: every file a MiniWoB page loads is served from it,
    and a later lookup could land elsewhere (a ``miniwob.py`` created in the working directory mid-run shadowed
    the package and made a running job serve 404s)."""
    spec = importlib.util.find_spec("miniwob")       # locate without importing (importing registers gym envs)
    if spec is None or spec.origin is None:
        raise RuntimeError("the `miniwob` package is not installed; run `make setup`")
    return (Path(spec.origin).parent / "html").resolve()


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

    async def setup_context(self, env: TaskEnv, context: Any, task: Task) -> None:
        await context.route(re.compile(r"^http://" + re.escape(MINIWOB_HOST) + r"/"), self._serve)

    def _read(self, rel_path: str) -> bytes | None:
        """Bytes of a file under the package's html directory (cached), or None if absent or outside it."""
        root = _miniwob_html_dir()
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

    # Icons drawn by CSS content: url(...) (the email pages' trash, star, search, reply and send icons) are
    # requested when the view that shows them is laid out, and have no size until they arrive: without this,
    # 19 of 200 first observations of an email page right after another task (eight envs at once) lacked them,
    # and a reply view opened on a freshly loaded page now and then lacked its send icon.
    drawn_js = STYLE_IMAGES_DRAWN_JS
    drawn_wait_ms = STYLE_IMAGES_WAIT_MS

    async def start(self, env: TaskEnv, page: Any, task: Task) -> Task:
        """Seed the page's RNG, start the episode (core.startEpisodeReal), stop its countdown display (the timer it
        counts is disabled, and redrawing it every second on every open page took ~0.3 of a CPU core with 64
        pages), wait for WOB_TASK_READY, and fill in the intent: the page's utterance (some pages return
        {utterance, fields}). (The first observation then waits for the images the page's style draws:
        ``drawn_js``.)"""
        ready, utt = await env.eval_js(page, """(a) => {
            Math.seedrandom(a.seed); core.EPISODE_MAX_TIME = a.ms; core.startEpisodeReal(); core.clearTimer();
            return WOB_TASK_READY === true ? [true, core.getUtterance()] : [false, null]; }""",
                                       {"seed": task.seed, "ms": MINIWOB_EPISODE_MS})
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
