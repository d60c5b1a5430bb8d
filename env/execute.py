"""Executing one parsed action (actions.Action) on a WebEnv's active tab: ``execute(env, action)`` returns an
error text for the agent, or None. How each action runs (the paper's Table 6 names them, not how):
- Click / Right Click on the element's centre; when another element covers that point (an SVG label), the
  click goes to the covering one, as a person's would. Hover moves the mouse there.
- Type clears the field first and types key by key (pages listen to keys; texts over 64 characters are filled,
  the last one typed); date/time inputs are filled with the parsed value ("10/11/2011" -> 2011-10-11); a
  non-field element that listens to keys is clicked, then typed into. Search = Type + Enter.
- Scroll Up / Down move 2/3 of a viewport, of the element when one is given, else of the page, or of the
  largest scrollable list when the page cannot scroll.
- Select Dropdown Option matches the option text case-insensitively (exact, else a unique substring) and adds
  to a <select multiple>. Switch Tab takes a tab index; Wait waits ``env.wait_s``.
- alert/confirm/prompt dialogs are accepted by the env and their text reported in info["dialogs"].
After the action the env waits on page events (``WebEnv.settle``), never a fixed sleep.

Verdicts that do not depend on load (the verdict is the page's, never the machine's): before an action on an
element, one evaluate (actionable.js, ``element_state``) reads what Playwright's call would wait for: an element
gone, hidden, disabled, read-only or out of the viewport is an error at once, a covered one gets the click a
person's would (the covering element). What is left to Playwright then completes on a working page,
so its deadline, ``env.action_timeout_ms`` (wall-clock, 60 s by default), only ends a page that hangs, not a
busy CPU's slow one (at 64 contexts on two busy cores: a Playwright call 14 s at most, a whole step 21 s;
bench/RESULTS.md, "verdicts"); every call has such a finite deadline, and rollout.Runner's episode timeout bounds
an episode besides. A Playwright call that did fail is still followed by ``settle`` (the action may have reached
the page), so the step reads the page after it.
"""
from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any, Protocol

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from .actions import Action
from .tasks import first_line


class ActingEnv(Protocol):
    """What running an action uses of the env: browser.WebEnv, which imports this module (so this module names
    the interface, not the class, and no import runs the other way)."""
    page: Any                            # the active tab (Switch Tab sets it)
    context: Any                         # the Playwright context (its tabs)
    watch: Any                           # watch.ContextWatch: navigations and new tabs seen so far
    n_labels: int                        # elements numbered in the last observation
    label_frames: dict[str, list[str]]   # element id -> the iframes it lies in
    action_timeout_ms: int
    nav_timeout_ms: int
    eval_timeout_s: float
    wait_s: float                        # how long "Wait" waits

    def dead_reason(self) -> str | None:
        """Why the page, context or browser is gone, or None."""

    async def timed(self, coro: Any, timeout_s: float | None = None) -> Any:
        """Await a Playwright call with the env's timeout."""

    async def eval_js(self, target: Any, js: str, arg: Any = None) -> Any:
        """page/frame/locator .evaluate with the env's timeout."""

    async def settle(self, page: Any, navs_before: int, opened_before: int | None = None) -> None:
        """Wait on the page's events after an action."""


def locator(env: ActingEnv, element: int) -> Any:
    """The element numbered ``element`` in the last observation, inside the iframes it lies in."""
    root = env.page
    for k in env.label_frames.get(str(element), []):
        root = root.frame_locator(f'[data-webagent-frame="{k}"]')
    return root.locator(f'[data-webagent-id="{element}"]')


async def execute(env: ActingEnv, action: Action) -> str | None:
    """Execute a parsed action on the active tab; returns an error text for the agent, or None.
    Playwright errors that are about the action (timeouts, wrong element kind) become that text;
    a dead page/context/browser is raised as EpisodeCrash by the caller's check."""
    page = env.page
    name, el = action.name, action.element
    if el is not None and not 0 <= el < env.n_labels:
        ids = f"0..{env.n_labels - 1}" if env.n_labels else "none"
        return f"element {el} is not on the current page (element ids: {ids})"
    watch = env.watch
    navs, opened = watch.navs, watch.opened
    watch.tab_opened.clear()
    loc = locator(env, el) if el is not None else None
    t = env.action_timeout_ms
    state = "ok"
    try:
        if loc is not None:
            state = await element_state(env, loc, name)
            if state not in ("ok", "covered"):
                return f"{name} on element {el} failed: {STATE_ERRORS[state]}"
        if name == "go_backward" or name == "go_forward":
            go = page.go_back if name == "go_backward" else page.go_forward
            resp = await go(timeout=env.nav_timeout_ms, wait_until="domcontentloaded")
            if resp is None and watch.navs == navs:
                return f"{name}(): there is no {'previous' if name == 'go_backward' else 'next'} page"
        elif name in ("Click", "Right Click"):
            await _click(loc, "right" if name == "Right Click" else "left", t, force=state == "covered")
        elif name == "Hover":
            await loc.hover(timeout=t, force=state == "covered")
        elif name in ("Type", "Search"):
            await _type(env, loc, action.argument or "")
            if name == "Search":
                await loc.press("Enter", timeout=t)
        elif name == "Press Enter":
            if loc is not None:
                await loc.press("Enter", timeout=t)
            else:
                await env.timed(page.keyboard.press("Enter"))
        elif name in ("Scroll Up", "Scroll Down"):
            sign = -1 if name == "Scroll Up" else 1
            if loc is not None:
                moved = await env.eval_js(loc, "(el, s) => (" + SCROLL_JS + ")([el, s])", sign)
            else:
                moved = await env.eval_js(page, SCROLL_JS, [None, sign])
            if not moved:
                return f"{name}: already at the {'top' if sign < 0 else 'bottom'}"
        elif name == "Select Dropdown Option":
            err = await _select(env, loc, action.argument or "")
            if err:
                return err
        elif name == "Switch Tab":
            pages = [p for p in env.context.pages if not p.is_closed()]
            idx = int(action.argument or "0")
            if not 0 <= idx < len(pages):
                return f"tab {idx} does not exist (open tabs: 0..{len(pages) - 1})"
            env.page = page = pages[idx]
            await env.timed(page.bring_to_front())
        elif name == "Wait":
            await asyncio.sleep(env.wait_s)
        else:                                          # parse_action only returns the names above
            return f"unsupported action {name}"
    except PlaywrightTimeoutError as e:
        if env.dead_reason():
            raise
        error = f"{name} on element {el} failed: timed out ({first_line(e)})"
    except PlaywrightError as e:
        if env.dead_reason():
            raise
        error = f"{name} on element {el} failed: {first_line(e)}"
    else:
        error = None
    await env.settle(env.page if env.page is not None else page, navs, opened)
    return error


#: The agent's error text for each state of ``element_state`` that stops an action.
STATE_ERRORS = {"missing": "it is no longer on the page", "hidden": "the element is not visible",
                "disabled": "the element is disabled", "inert": "the element is inert",
                "read-only": "the element is read-only", "outside": "the element is outside of the viewport"}
#: actionable.js: what Playwright's action would wait for, read once.
ACTIONABLE_JS = "\n" + (Path(__file__).with_name("actionable.js")).read_text(encoding="utf-8")


async def element_state(env: ActingEnv, loc: Any, name: str) -> str:
    """Whether action ``name`` can run on the element now, as Playwright's call would find it (actionable.js): "ok",
    "covered" (another element is hit at its click point), or why not ("missing", "hidden", "disabled", "inert",
    "read-only", "outside"). Each action asks only what its Playwright call waits for: a pointer action
    (Click, Right Click, Hover) visible, enabled (not Hover) and not covered; Type and Search visible, enabled
    and editable; Select Dropdown Option visible and enabled; Scroll and Press Enter that the element exists.
    One evaluate that never waits (``evaluate_all``: an element that is gone is "missing" at once)."""
    pointer = name in ("Click", "Right Click", "Hover")
    want = {"pointer": pointer, "visible": pointer or name in ("Type", "Search", "Select Dropdown Option"),
            "enabled": name in ("Click", "Right Click", "Type", "Search", "Select Dropdown Option"),
            "editable": name in ("Type", "Search")}
    return await env.timed(loc.evaluate_all(ACTIONABLE_JS, want))


async def _click(loc: Any, button: str, timeout_ms: int, force: bool = False) -> None:
    """Click the element's centre. When another element covers that point (e.g. the label drawn on an
    SVG button: ``element_state`` "covered", ``force``), Playwright would refuse; the click then goes where a
    person's would: to the covering one. (Should Playwright still find the point covered where element_state did
    not, it waits its timeout out, then the click is forced just the same.)"""
    try:
        await loc.click(button=button, force=force, timeout=timeout_ms)
    except PlaywrightTimeoutError as e:
        if force or "intercepts pointer events" not in str(e):
            raise
        await loc.click(button=button, force=True, timeout=timeout_ms)


async def _type(env: ActingEnv, loc: Any, text: str) -> None:
    """Type clears the field first. Short texts are typed key by key (pages listen to key events,
    e.g. autocomplete and search-as-you-type); long ones are filled, the last character typed."""
    t = env.action_timeout_ms
    kind = await env.timed(loc.evaluate("el => el.tagName === 'INPUT' ? el.type : ''", timeout=t))
    iso = _html_input_value(kind, text) if kind in _DATE_INPUTS else None
    if iso is not None:                      # date/time widgets: keys depend on the locale; fill the value
        await loc.fill(iso, timeout=t)
        return
    try:
        if len(text) <= 64:
            await loc.fill("", timeout=t)
            # each key is a round trip to the page: 250 ms a key on top of the action timeout, since on a loaded
            # box 53 keys took over 11 s (two test workers) and over 15 s (two workers beside an RL run)
            await loc.press_sequentially(text, timeout=t + 250 * len(text))
        else:
            await loc.fill(text[:-1], timeout=t)
            await loc.press_sequentially(text[-1], timeout=t)
    except PlaywrightError as e:
        if "not an <input>" not in str(e):
            raise
        # not a text field: a control (button, link, select) is an error; another element (e.g. a div
        # terminal listening to keys) is focused by a click, then select-all + type
        kind = await env.eval_js(
            loc, "el => ['BUTTON', 'A', 'SELECT', 'INPUT', 'OPTION'].includes(el.tagName) ? el.tagName.toLowerCase() : ''")
        if kind:
            raise PlaywrightError(f"a <{kind}> is not a text field; Type needs an input, textarea or editable element")
        state = await element_state(env, loc, "Click")
        if state not in ("ok", "covered"):
            raise PlaywrightError(STATE_ERRORS[state])
        await _click(loc, "left", t, force=state == "covered")
        await env.timed(env.page.keyboard.press("ControlOrMeta+A"))
        await env.timed(env.page.keyboard.type(text), t / 1000 + 0.25 * len(text))


async def _select(env: ActingEnv, loc: Any, want: str) -> str | None:
    """Select Dropdown Option: match the option text case-insensitively (exact, else a unique
    substring); on a <select multiple> the option is added to the selection."""
    info = await env.eval_js(loc, """(el) => el.tagName !== 'SELECT' ? null : {multiple: el.multiple,
        options: Array.from(el.options).map((o) => [o.text, o.label, o.value, o.selected, o.matches(':disabled')])}""")
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
    if opts[hits[0]][4]:                   # Playwright would wait for it to be enabled
        return f"option {want!r} is disabled"
    index = [hits[0]]
    if info["multiple"]:
        index = sorted({i for i, o in enumerate(opts) if o[3]} | {hits[0]})
    await loc.select_option(index=index, timeout=env.action_timeout_ms)
    return None


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
    out, formats = _DATE_INPUTS[kind]
    for fmt in formats:
        try:
            return datetime.datetime.strptime(text.strip().upper() if "%p" in fmt else text.strip(), fmt).strftime(out)
        except ValueError:
            continue
    return None
