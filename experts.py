"""Scripted MiniWoB++ demonstrators: the behavior-cloning data D of the warm-up stage (Sec. 2.2, Eq. 1).

Each solver reads the live page (Playwright locators on ``env.page``, the ``data-webagent-id`` labels
that the env stamps on the numbered elements of the observation, and the utterance
``Observation.intent``) but acts ONLY by sending the policy's own response strings to
``await env.step(response)``, built by compress.format_response and env.format_action:

    <think> # Element: the 'Submit' button </think> <answer> do(action="Click", element="7") </answer>

so a demonstration is exactly what the policy is trained to produce, one (observation, response) pair
per step, and every element a response names is a label of the observation it was taken on.
Only successful episodes are written.

What it implements
- ``EXPERTS``: task name -> ``async solver(demo)``; ``Demo`` carries the env, the latest observation
  and the recorded steps, and gives the solver its hands (click / type / select). ``MULTI_STEP`` names
  the tasks where most demonstrations take 3 actions or more.
- ``demonstrate(env, task) -> (record, reason)``: one trajectory record (schema below) for ``task.seed``,
  and why it failed (None for a success).
- ``SUITE_EXPERTS``: the site suite's task family name (env/sitesuite.py) -> solver, one per family; they read
  their values from the generated intent, log in first on a logged-out start, and answer through
  ``exit(message=...)``, which env's WebArena rubric scores (``solver_of(task)`` picks the expert).
- The CLI: (task, seed) jobs through ``rollout.Runner`` (``--concurrency`` contexts of one BrowserPool,
  the same failure policy as RL and evaluation: a page that fails to load or a demonstration longer than
  60 s ends that episode with a reason), a progress bar, a per-task success table, and the JSONL file
  train_bc.py reads.

How solvers behave (and how this departs from the paper)
- WebAgent-R1's BC data for WebArena-Lite came from WebRL's rule-based Playwright solvers on the WebArena
  sites; here the same idea covers the MiniWoB++ pages of the embedded default. Thoughts are short
  ("# Element: ..."), as in WebRL's data; train_bc.py's R1-CoT option rewrites them into long ones with a
  teacher model, and ``--thoughts long`` writes long ones without one (``long_thought``: a first-person
  paragraph that restates the goal, names other elements of the observation it considered, quotes the
  text that decides the target and names the action, then the same "# Element: ..." line).
- They search the way a person would: where the target is not on screen (click-tab-2,
  click-collapsible-2, navigate-tree) they open tabs / sections / folders in order until it is, instead
  of reading the hidden DOM and jumping to it; the observation (visible viewport only) explains every step.
- When the element they need is not in the observation, they take the step a person would and record
  it: "Scroll Down"/"Scroll Up" when it is scrolled away inside a scrolling list (email-inbox,
  social-media), "Wait" when the page changed after the observation was taken (an accordion that was
  still opening). social-media's icons swap their image on hover, so a first click can be lost; the
  solver clicks again when nothing happened. On ~2% of social-media seeds the wanted menu item cannot
  be brought into the observation (the env leaves out the open menu once its post is scrolled away, and
  the menu item is below the list without it), and the episode fails.
- The natural-language e-mail variants (email-inbox-forward-nl, *-nl-turk) are parsed with the template
  lists their pages load (NAME / DEST / MSG slots), keeping readings whose sender is in the inbox. A few
  Turk templates swap the slots ("Find the email from DEST and forward it to NAME"); when both names
  are senders the solver reads the request literally and fails on those seeds (~1-2%).
- Not covered: click-test-2 and click-button-sequence (the two buttons are placed at random and the
  one to click first is covered by the other in ~10% of seeds; the env clicks the element's centre,
  which then lands on the covering button), and tasks that need drag, canvas coordinates or copy-paste.
- Demonstrations run with env's own deadlines, which never bind on a working page however busy the box
  (env/execute.py), as RL and evaluation do.

Seeds: ``--split train`` draws from ``env.DEMO_SEEDS`` (0 .. 99_999), ``--split eval`` from ``env.EVAL_SEEDS``
(1_000_000 .. 1_999_999, used by the tests); RL rollouts (``env.RL_SEEDS``) and validation pages
(``env.VALID_SEEDS``) have ranges of their own, so no page is both demonstrated and rolled out, selected on
or tested on.

Run:
    python experts.py --tasks experts --episodes 100 --out data/demos.jsonl       # every covered task
    python experts.py --tasks miniwob:click-button,login-user --episodes 50 --concurrency 6
    python experts.py --tasks experts --episodes 100 --split eval --out /tmp/x.jsonl   # held-out check
    python experts.py --tasks suite:all,edit-profile@out --episodes 100 --split eval --out /tmp/s.jsonl  # site suite
``--prompt plain`` writes the responses for compress's plain prompt ("# Element: ..." line, then the
action) instead of <think>/<answer>. ``--thoughts long`` writes long chain-of-thought thoughts (R1-CoT in
miniature); the actions, and so the episodes, are the same as with the default ``short``.
Output, one JSON line per successful episode:
    {"task": "miniwob/login-user", "seed": 3, "intent": "Enter the username ...", "reward": 1.0,
     "steps": [{"observation": "<html> ...", "error": null, "url": "http://miniwob.local/...",
                "response": "<think> # Element: ... </think> <answer> do(...) </answer>"}, ...]}
"observation" is the text the action was taken on and "error" the env's message shown with it.
"""
from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import hashlib
import html
import json
import logging
import os
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

import env as webenv
from compress import PromptKind, format_response, split_response   # the response format lives in compress.py
from env import sitesuite, suite_site   # the site suite: its family name (env registers it), its site's account
from env.actions import Action, format_action, parse_action   # the action grammar
from rollout import Job, Runner
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

log = logging.getLogger("experts")


# ---- seeds ----

# --split: demonstrations come from env.DEMO_SEEDS (0 .. 99_999; RL and validation have their own ranges), the
# experts' own success checks from the held-out env.EVAL_SEEDS (one definition, in env/tasks.py)
SPLITS = {"train": webenv.DEMO_SEEDS, "eval": webenv.EVAL_SEEDS}

EPISODE_TIMEOUT_S = 60.0      # one demonstration, reset included


# ---- the demonstrator's hands: it reads the page, it acts only through env.step ----

class ExpertError(RuntimeError):
    """The solver could not find what it needed on the page (or the env refused its action)."""


class EpisodeOver(Exception):
    """Raised by Demo.act when env.step ends the episode (success or not)."""


# One page round trip per lookup: of a locator's matches, take the first one that is rendered (else the
# first), and return its label and, when it has none, where it is.
# - label: the element's own data-webagent-id, else its single labelled descendant (a <label> wrapping an
#   <input>), else a labelled ancestor with exactly the same text (a list item around its name); never a
#   container with more in it (a labelled e-mail row around an unlabelled, scrolled-away star icon is a
#   different element).
# - where: 'hidden' (not rendered), 'down' / 'up' (wholly or partly scrolled out of its scrolling
#   container or of the window: the env may leave out an element that only peeks into view), 'shown'
#   (on screen now: the page changed after the observation was taken).
_LOOKUP_JS = """els => {
  if (els.length === 0) return null;
  const rendered = (e) => { const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden'; };
  const text = (e) => e.textContent.replace(/\\s+/g, ' ').trim();
  const el = els.find(rendered) || els[0];
  const label = (() => {
    const own = el.getAttribute('data-webagent-id');
    if (own !== null) return own;
    const inner = el.querySelectorAll('[data-webagent-id]');
    if (inner.length === 1) return inner[0].getAttribute('data-webagent-id');
    const outer = el.parentElement && el.parentElement.closest('[data-webagent-id]');
    if (outer && text(el) !== '' && text(outer) === text(el)) return outer.getAttribute('data-webagent-id');
    return null;
  })();
  const where = (() => {
    if (!rendered(el)) return 'hidden';
    const r = el.getBoundingClientRect();
    for (let p = el.parentElement; p; p = p.parentElement) {
      const oy = getComputedStyle(p).overflowY;
      if ((oy === 'auto' || oy === 'scroll') && p.scrollHeight > p.clientHeight) {
        const q = p.getBoundingClientRect();
        if (r.bottom > q.bottom + 1) return 'down';
        if (r.top < q.top - 1) return 'up';
      }
    }
    if (r.bottom > innerHeight + 1) return 'down';
    if (r.top < -1) return 'up';
    return 'shown';
  })();
  return {label, where, n: els.length};
}"""

MAX_FIXES = 6        # scrolls / waits a solver may spend to bring one element into the observation
MAX_WAITS = 2        # of which waits for a page that is still changing
LOAD_WAIT_MS = 1_500  # how long a solver looks for an element that is not rendered yet (no step taken)


@dataclass
class Demo:
    """One demonstration in progress: the env, the latest observation, and the recorded steps.

    A solver calls ``await d.click(d.page.locator("#subbtn"), "the 'Submit' button")``; each call
    records ``{"observation", "error", "url", "response"}`` for the observation it acted on, steps
    the env, and raises EpisodeOver when the episode ends.
    """
    env: Any
    obs: Any                                   # env.Observation
    steps: list[dict] = dataclasses.field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    done_reason: str | None = None
    prompt: str = "thinking"                   # compress.system_prompt kind the responses are written for
    thoughts: str = "short"                    # "short" ("# Element: ...") or "long" (long_thought)
    key: str = ""                              # "task_id/seed": seeds long_thought's choices, with the step

    @property
    def page(self):
        return self.env.page

    @property
    def intent(self) -> str:
        return self.obs.intent

    def in_obs(self, value: str | None) -> bool:
        return value is not None and re.search(rf'<\w+ id="{value}"', self.obs.text) is not None

    async def label(self, target, what: str) -> int:
        """The observation label (``data-webagent-id``) of a locator's first match. When the element is
        not in the observation yet, the demonstrator does what a person would: scroll toward it when it
        is scrolled away, or wait when the page is still changing (an animation); each such action is
        a recorded step."""
        loc = self.page.locator(target) if isinstance(target, str) else target
        waits, loading = 0, True
        for attempt in range(MAX_FIXES + 1):
            found = await loc.evaluate_all(_LOOKUP_JS)
            if found is None:
                raise ExpertError(f"no element for {what} ({target})")
            if self.in_obs(found["label"]):
                return int(found["label"])
            where = found["where"]
            if where == "hidden" and loading:     # e.g. an icon whose image is still loading: look again
                loading = False
                try:
                    await loc.first.wait_for(state="visible", timeout=LOAD_WAIT_MS)
                    continue
                except PlaywrightTimeoutError:
                    pass
            if where == "hidden" or attempt == MAX_FIXES or (where == "shown" and waits == MAX_WAITS):
                raise ExpertError(f"{what} ({target}) is not in the observation ({where})")
            if where == "down":
                await self.act(Action("Scroll Down"), f"none yet; {what} is further down, so scroll down")
            elif where == "up":
                await self.act(Action("Scroll Up"), f"none yet; {what} is further up, so scroll up")
            else:
                waits += 1
                await self.act(Action("Wait"), f"none yet; the page is still changing, wait for {what}")
        raise AssertionError("unreachable")

    async def act(self, action: Action, what: str, refused_ok: bool = False) -> None:
        """Send one action (with its thought) through env.step and record the step (``send``)."""
        thought = f"# Element: {what}"
        if self.thoughts == "long":
            thought = long_thought(self.intent, self.obs.text, action, what, key=f"{self.key}/{len(self.steps)}")
            if self.prompt in ("plain", "short_plain"):      # the plain format's thought is "#" comment lines
                thought = re.sub(r"^(?!#)", "# ", thought, flags=re.M)
        await self.send(format_response(thought, format_action(action), prompt=self.prompt), refused_ok)

    async def send(self, response: str, refused_ok: bool = False) -> None:
        """Send a response (written by ``act``, or replayed) through env.step and record the step; an action the
        env refuses (its error shown with the next observation) stops the demonstration unless ``refused_ok``."""
        result = await self.env.step(response)
        self.steps.append({"observation": self.obs.text, "error": self.obs.error, "url": self.obs.url,
                           "response": response})
        self.obs, self.reward, self.done = result.obs, float(result.reward), bool(result.done)
        if result.done:
            self.done_reason = result.info.get("done_reason")
            raise EpisodeOver()
        if result.info.get("error") and not refused_ok:
            raise ExpertError(f"env rejected {split_response(response)[1]}: {result.info['error']}")

    async def click(self, target, what: str) -> None:
        await self.act(Action("Click", element=await self.label(target, what)), what)

    async def type(self, target, text: str, what: str) -> None:
        await self.act(Action("Type", element=await self.label(target, what), argument=text), what)

    async def select(self, target, option: str, what: str) -> None:
        await self.act(Action("Select Dropdown Option", element=await self.label(target, what),
                            argument=option), what)


# ---- reading the page ----

def quoted(text: str) -> list[str]:
    """The double-quoted strings of an utterance, in order."""
    return re.findall(r'"([^"]*)"', text)


def exact(text: str) -> re.Pattern:
    """Regex matching an element whose whole (stripped) text is ``text``."""
    return re.compile(rf"^\s*{re.escape(text)}\s*$")


async def visible(loc) -> bool:
    return await loc.count() > 0 and await loc.first.is_visible()


# ---- long thoughts (R1-CoT in miniature, --thoughts long) ----

_ELEMENT_RE = re.compile(r'<(\w+) id="(\d+)"([^>]*)>([^<]*)')      # a numbered element, its attributes, its text
_ATTR_RE = re.compile(r'([\w-]+)="([^"]*)"')
_KINDS = {"a": "link", "button": "button", "select": "dropdown", "textarea": "text area", "li": "list item",
          "option": "option", "img": "image", "label": "label"}
_DQ, _SQ = '"', "'"   # element texts are quoted in "...": their own double quotes become single ones
_INPUT_KINDS = {"checkbox": "checkbox", "radio": "radio button", "password": "password field",
                "submit": "button", "button": "button", "date": "date field"}


def _clean(text: str, limit: int = 60) -> str:
    """One line of page or intent text to quote in a thought: unescaped, spaces collapsed, no tags, at most
    ``limit`` chars."""
    text = " ".join(html.unescape(text).replace("<", " ").replace(">", " ").split())
    return text if len(text) <= limit else text[:limit - 3].rstrip() + "..."


def observed_elements(obs_text: str) -> dict[int, str]:
    """The numbered elements of an observation, described as a person would name them: id -> 'button 2
    "Submit"', 'text field 0 (after "Username")', 'span 8 (class "trash", after "Glen")'. The text is the
    element's own text, else its title / placeholder / value, else its class hint and the page text just
    before it (an input's label, the row of an icon)."""
    texts = [(t.end(1), t.group(1)) for t in re.finditer(r">([^<>]*[^\s<>][^<>]*)(?=<)", obs_text)]   # (end, page text)
    ends = [end for end, _ in texts]
    out = {}
    for m in _ELEMENT_RE.finditer(obs_text):
        tag, el, attrs = m.group(1).lower(), int(m.group(2)), dict(_ATTR_RE.findall(m.group(3)))
        kind = _INPUT_KINDS.get(attrs.get("type", ""), "text field") if tag == "input" else _KINDS.get(tag, tag)
        text = _clean(m.group(4)) or next((_clean(attrs[a]) for a in ("title", "placeholder", "value", "data-text")
                                           if _clean(attrs.get(a, ""))), "")
        before = bisect.bisect_right(ends, m.start()) - 1                 # the last page text before it
        near = _clean(texts[before][1], 200).replace(_DQ, _SQ) if before >= 0 else ""
        if len(near) > 40:                  # the words just before it
            near = "..." + near[-40:].split(" ", 1)[-1]
        if text:
            out[el] = f'{kind} {el} "{text.replace(_DQ, _SQ)}"'
        elif attrs.get("class"):            # env's hint for a text-less control (an icon)
            out[el] = f'{kind} {el} (class "{_clean(attrs["class"])}"' + (f', after "{near}")' if near else ")")
        else:
            out[el] = f'{kind} {el} (after "{near}")' if near else f"{kind} {el}"
    return out


def _action_words(action: Action) -> str:
    arg = _clean(action.argument or "", 80)
    el = f"element {action.element}"
    return {"Click": f"click {el}", "Right Click": f"right-click {el}", "Hover": f"hover over {el}",
            "Type": f'type "{arg}" into {el}', "Search": f'search for "{arg}" in {el}',
            "Select Dropdown Option": f'choose the option "{arg}" in {el}',
            "Scroll Up": "scroll up", "Scroll Down": "scroll down", "Wait": "wait for the page",
            "Press Enter": "press Enter", "Switch Tab": f'switch to tab "{arg}"',
            "exit": f'finish with the answer "{_clean(action.message or "", 80)}"' if action.message else "finish",
            "go_backward": "go back", "go_forward": "go forward"}[action.name]


def long_thought(intent: str, obs_text: str, action: Action, what: str, key: str) -> str:
    """A long first-person thought for one demonstration step, from what the agent sees only (the intent and
    the observation text): it restates the goal, names 2-4 other elements of the observation it considered,
    quotes the text that decides the target ``action.element`` (or says why no element is needed), names
    the action, and ends with the short thought's line "# Element: {what}". Phrasing and candidates are
    drawn from ``random.Random(key)`` (key = task id / seed / step), so a demonstration is reproducible."""
    rng = random.Random(key)
    elements = observed_elements(obs_text)
    target = None if action.element is None else elements.get(action.element, f"element {action.element}")
    goal = _clean(intent, 300).rstrip(".")
    parts = [rng.choice(["Okay, let me restate the goal: {}.", "The task asks me to: {}.",
                         "So the user wants this: {}.", "Let me think about what I need to do. The goal is: {}."]
                        ).format(goal)]
    others = [el for el in elements if el != action.element]
    if others:
        seen = [elements[el] for el in sorted(rng.sample(others, min(len(others), rng.randint(2, 4))))]
        seen_text = ", ".join(seen[:-1]) + (" and " if len(seen) > 1 else "") + seen[-1]
        parts.append(rng.choice(["Looking at the page, I can see {}.", "On the page there are {}, among others.",
                                 "The elements I considered include {}."]).format(seen_text))
    if target is not None:
        words = re.findall(r'"([^"]+)"', target)
        text = words[0].rstrip(".") if words else ""
        deciding = text if text and re.search(rf"(?<!\w){re.escape(text)}(?!\w)", intent, re.I) else ""
        if deciding:
            parts.append(rng.choice([f'The task mentions "{deciding}", and {target} is {what}, so it is the one.',
                                     f'{target[0].upper() + target[1:]} carries "{deciding}", the text the task '
                                     f"names: it is {what}."]))
        elif action.argument and _clean(action.argument, 80).lower() in intent.lower():
            parts.append(f'The task gives the value "{_clean(action.argument, 80)}", and {target} is {what}, '
                         "where it belongs.")
        else:
            parts.append(f"{target[0].upper() + target[1:]} is {what}, which is what the task needs at this point.")
    else:
        reason = re.sub(r"^none( yet)?;\s*", "", what)
        parts.append(rng.choice(["No element needs acting on right now: {}.", "I do not need any of them now: {}."]
                                ).format(reason.rstrip(".")))
    parts.append(rng.choice(["So I will {}.", "Therefore, I should {}.", "My next action: {}."]
                            ).format(_action_words(action)))
    return " ".join(parts) + f"\n# Element: {what}"


# ---- solvers ----
# EXPERTS maps a MiniWoB task name to ``async solver(demo)``; the solver returns when it has sent its
# last action (the driver then checks the reward). MULTI_STEP lists the tasks where most
# demonstrations take 3 actions or more (measured over 100 seeds).

Solver = Callable[[Demo], Awaitable[None]]
EXPERTS: dict[str, Solver] = {}
MULTI_STEP: set[str] = set()


def expert(*names: str, multi_step: bool = False):
    def register(fn: Solver) -> Solver:
        for name in names:
            EXPERTS[name] = fn
            if multi_step:
                MULTI_STEP.add(name)
        return fn
    return register


@expert("click-test")
async def click_test(d: Demo) -> None:
    await d.click("#subbtn", "the 'Click Me!' button")


@expert("click-button")
async def click_button(d: Demo) -> None:
    text = quoted(d.intent)[0]
    await d.click(d.page.locator("#area button").filter(has_text=exact(text)), f"the '{text}' button")


@expert("click-link")
async def click_link(d: Demo) -> None:
    text = quoted(d.intent)[0]
    await d.click(d.page.locator("#area .alink").filter(has_text=exact(text)), f"the link '{text}'")


@expert("click-dialog")
async def click_dialog(d: Demo) -> None:
    await d.click(".ui-dialog-titlebar button", "the 'x' close button in the dialog's title bar")


@expert("click-dialog-2")
async def click_dialog_2(d: Demo) -> None:
    name = quoted(d.intent)[0]
    if name == "x":
        await d.click(".ui-dialog-titlebar button", "the 'x' close button in the dialog's title bar")
    else:
        await d.click(d.page.locator(".ui-dialog-buttonpane button").filter(has_text=exact(name)),
                      f"the '{name}' button of the dialog")


@expert("click-tab")
async def click_tab(d: Demo) -> None:
    n = re.search(r"Tab #(\d)", d.intent).group(1)
    await d.click(f'#area ul a[href="#tabs-{n}"]', f"the 'Tab #{n}' tab")


@expert("click-widget")
async def click_widget(d: Demo) -> None:
    kind = quoted(d.intent)[0]
    noun = {"text": "text input", "textarea": "text area", "radio": "radio button",
            "checkbox": "checkbox", "button": "button"}[kind]
    await d.click(f'#area [data-type="{kind}"]', f"a {noun} widget")


@expert("focus-text")
async def focus_text(d: Demo) -> None:
    await d.click("#tt", "the text box")


@expert("focus-text-2")
async def focus_text_2(d: Demo) -> None:
    pos = re.search(r"the (\d)(?:st|nd|rd|th) input", d.intent).group(1)
    await d.click(d.page.locator("#area input").nth(int(pos) - 1), f"the {_ordinal(int(pos))} text box")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


@expert("click-option")
async def click_option(d: Demo) -> None:
    name = re.match(r"Select (.*) and click Submit\.", d.intent).group(1)
    await d.click(d.page.locator("#boxes label").filter(has_text=exact(name)).locator("input"),
                  f"the radio button '{name}'")
    await d.click("#subbtn", "the 'Submit' button")


@expert("click-checkboxes", multi_step=True)
async def click_checkboxes(d: Demo) -> None:
    names = re.match(r"Select (.*) and click Submit\.", d.intent).group(1)
    for name in ([] if names == "nothing" else names.split(", ")):
        box = d.page.locator("#boxes label").filter(has_text=exact(name)).locator("input")
        if not await box.first.is_checked():
            await d.click(box, f"the checkbox '{name}'")
    await d.click("#subbtn", "the 'Submit' button")


@expert("click-collapsible")
async def click_collapsible(d: Demo) -> None:
    header = d.page.locator("#area h3").first
    title = (await header.inner_text()).strip()
    await d.click(header, f"the collapsed section header '{title}'")
    await d.click("#subbtn", "the 'Submit' button")


@expert("click-collapsible-2", multi_step=True)
async def click_collapsible_2(d: Demo) -> None:
    text = quoted(d.intent)[0]
    link = d.page.locator("#area .alink").filter(has_text=exact(text))
    headers = d.page.locator("#area h3")
    for i in range(await headers.count()):
        if await _shown(d, link):
            break
        title = (await headers.nth(i).inner_text()).strip()
        await d.click(headers.nth(i), f"the section header '{title}', to look for the link '{text}'")
    await d.click(link, f"the link '{text}'")


@expert("click-tab-2")
async def click_tab_2(d: Demo) -> None:
    text = quoted(d.intent)[0]
    link = d.page.locator("#area .alink").filter(has_text=exact(text))
    tabs = d.page.locator("#area ul a")
    for i in range(await tabs.count()):
        if await _shown(d, link):
            break
        if await d.page.locator("#area ul li").nth(i).get_attribute("aria-selected") == "true":
            continue
        await d.click(tabs.nth(i), f"the 'Tab #{i + 1}' tab, to look for the link '{text}'")
    await d.click(link, f"the link '{text}'")


@expert("navigate-tree")
async def navigate_tree(d: Demo) -> None:
    name = quoted(d.intent)[0]
    target = d.page.locator("#tree span").filter(has_text=exact(name))
    for _ in range(12):
        if await _shown(d, target):
            break
        closed = d.page.locator("#tree li.expandable > span.folder:visible")
        if not await closed.count():
            raise ExpertError(f"no closed folder left and '{name}' not visible")
        folder = (await closed.first.inner_text()).strip()
        await d.click(closed.first, f"the closed folder '{folder}', to look for '{name}' inside it")
    kind = "folder" if "folder" in (await target.first.get_attribute("class") or "") else "file"
    await d.click(target, f"the {kind} '{name}'")


async def _shown(d: Demo, loc, timeout_ms: int = 2_000) -> bool:
    """Let jQuery animations (accordion, tabs, tree) finish, then: is a match of ``loc`` on screen?
    (If it appeared after the observation was taken, ``Demo.label`` waits for it with a Wait step.)"""
    await d.page.wait_for_function("() => !window.jQuery || jQuery(':animated').length === 0",
                                   timeout=timeout_ms)
    found = await loc.evaluate_all(_LOOKUP_JS)
    return found is not None and found["where"] != "hidden"


@expert("enter-text", "enter-text-dynamic")
async def enter_text(d: Demo) -> None:
    text = quoted(d.intent)[0]
    await d.type("#tt", text, "the text field")
    await d.click("#subbtn", "the 'Submit' button")


@expert("enter-text-2")
async def enter_text_2(d: Demo) -> None:
    text = quoted(d.intent)[0]
    text = text.upper() if "upper case" in d.intent else text.lower()
    await d.type("#tt", text, "the text input")
    await d.click("#subbtn", "the 'Submit' button")


@expert("read-table")
async def read_table(d: Demo) -> None:
    key = re.match(r"Enter the value of (.+) into the text field", d.intent).group(1)
    row = d.page.locator("#tab tr").filter(has=d.page.locator("td").first.filter(has_text=exact(key)))
    value = (await row.first.locator("td").nth(1).inner_text()).strip()
    await d.type("#tt", value, f"the text field (the table's {key} is {value})")
    await d.click("#subbtn", "the 'Submit' button")


@expert("find-word")
async def find_word(d: Demo) -> None:
    pos = int(re.search(r"Find the (\d+)(?:st|nd|rd|th) word", d.intent).group(1))
    words = (await d.page.locator("#area p").inner_text()).split()
    word = re.sub(r"[^a-zA-Z]", "", words[pos - 1])
    await d.type("#answer-input", word, f"the answer box (the {_ordinal(pos)} word is '{word}')")
    await d.click("#subbtn", "the 'Submit' button")


@expert("multi-orderings", multi_step=True)
async def multi_orderings(d: Demo) -> None:
    m = re.fullmatch(r"Search for (.+) movies directed by (.+) from year (\d+)\.", d.intent)
    values = {"Genre": m.group(1), "Director": m.group(2), "Year": m.group(3)}
    rows = d.page.locator("#area tr")
    for i in range(await rows.count()):      # the form's rows come in a random order
        field = (await rows.nth(i).locator("th").inner_text()).strip()
        await d.type(rows.nth(i).locator("input"), values[field], f"the '{field}' field")
    await d.click("#area .final", "the 'Submit' button")


@expert("enter-password", multi_step=True)
async def enter_password(d: Demo) -> None:
    pw = quoted(d.intent)[0]
    await d.type("#password", pw, "the 'Password' field")
    await d.type("#verify", pw, "the 'Verify password' field")
    await d.click("#subbtn", "the 'Submit' button")


@expert("login-user", multi_step=True)
async def login_user(d: Demo) -> None:
    user, pw = quoted(d.intent)[:2]
    await d.type("#username", user, "the 'Username' field")
    await d.type("#password", pw, "the 'Password' field")
    await d.click("#subbtn", "the 'Login' button")


@expert("login-user-popup", multi_step=True)
async def login_user_popup(d: Demo) -> None:
    user, pw = quoted(d.intent)[:2]
    for field, value, what in (("#username", user, "the 'Username' field"),
                               ("#password", pw, "the 'Password' field")):
        for _ in range(2):      # the popup appears at most once
            await _dismiss_popup(d)
            if await d.page.locator(field).input_value() == value:
                break
            try:
                await d.type(field, value, what)
            except ExpertError:  # the popup disabled the field under the typing
                if not await visible(d.page.locator("#popup")):
                    raise
    await _dismiss_popup(d)
    await d.click("#subbtn", "the 'OK' button")


async def _dismiss_popup(d: Demo) -> None:
    if await visible(d.page.locator("#popup")):
        await d.click("#popup-cancel", "the 'Cancel' button of the popup, to stay on the form")


@expert("choose-list")
async def choose_list(d: Demo) -> None:
    item = re.match(r"Select (.*) from the list and click Submit\.", d.intent).group(1)
    await d.select("#options", item, "the drop-down list")
    await d.click("#area button", "the 'Submit' button")


@expert("use-autocomplete", multi_step=True)
async def use_autocomplete(d: Demo) -> None:
    words = quoted(d.intent)
    start, end = words[0], (words[1] if len(words) > 1 else "")
    await d.type("#tags", start, "the 'Tags' input")
    items = d.page.locator("ul.ui-autocomplete li")
    await items.first.wait_for(state="visible", timeout=5_000)   # the menu opens 300 ms after typing
    texts = [t.strip() for t in await items.all_inner_texts()]
    pick = next((i for i, t in enumerate(texts) if t.startswith(start) and t.endswith(end)), None)
    if pick is None:
        raise ExpertError(f"no suggestion starts with {start!r} and ends with {end!r}: {texts}")
    await d.click(items.nth(pick), f"the suggestion '{texts[pick]}'")
    await d.click("#subbtn", "the 'Submit' button")


@expert("search-engine", multi_step=True)
async def search_engine(d: Demo) -> None:
    query = quoted(d.intent)[0]
    rank = int(re.search(r"click the (\d+)(?:st|nd|rd|th) search result", d.intent).group(1))
    await d.type("#search-text", query, "the search box")
    await d.click("#search", "the 'Search' button")
    page_no = (rank - 1) // 3 + 1
    if page_no > 1:
        await d.click(d.page.locator("#pagination a").filter(has_text=exact(str(page_no))),
                      f"the page '{page_no}' link of the results, where result {rank} is")
    link = d.page.locator(f'#page-content a[data-result="{rank - 1}"]')
    title = (await link.inner_text()).strip()
    await d.click(link, f"the {_ordinal(rank)} search result '{title}'")


@expert("enter-date")
async def enter_date(d: Demo) -> None:
    date = re.search(r"Enter (\d\d/\d\d/\d{4})", d.intent).group(1)
    await d.type("#tt", date, "the date input")
    await d.click("#subbtn", "the 'Submit' button")


@expert("simple-arithmetic")
async def simple_arithmetic(d: Demo) -> None:
    a, op, b = (await d.page.locator("#math-problem").inner_text()).split()[:3]
    value = {"+": int(a) + int(b), "-": int(a) - int(b), "x": int(a) * int(b)}[op]
    await d.type("#math-answer", str(value), f"the answer box ({a} {op} {b} = {value})")
    await d.click("#subbtn", "the 'Submit' button")


@expert("simple-algebra")
async def simple_algebra(d: Demo) -> None:
    problem = (await d.page.locator("#math-problem").inner_text()).strip()
    lhs, rhs = problem.split("=")
    a, op, b = lhs.split()
    rhs = int(rhs)
    if a == "x":                                   # x + b = rhs  |  x - b = rhs
        value = rhs - int(b) if op == "+" else rhs + int(b)
    else:                                          # a + x = rhs  |  a - x = rhs
        value = rhs - int(a) if op == "+" else int(a) - rhs
    await d.type("#math-answer", str(value), f"the answer box (x = {value})")
    await d.click("#subbtn", "the 'Submit' button")


# ---- email inbox family ----
# The standard utterances are parsed with fixed patterns. The natural-language variants
# (email-inbox-forward-nl, *-nl-turk) draw their utterance from template lists that the page itself
# loads (NL_TEMPLATES / TEMPLATES, with NAME, DEST and MSG slots); the solver turns each template into
# a pattern and keeps the readings whose NAME is a sender in the inbox.

_EMAIL_PATTERNS = [   # (action, regex) on the standard utterances
    ("reply", re.compile(r"Find the email by (?P<name>.+?) and reply to them with the text \"(?P<arg>.*)\"\.")),
    ("forward", re.compile(r"Find the email by (?P<name>.+?) and forward that email to (?P<arg>.+?)\.")),
    ("delete", re.compile(r"Find the email by (?P<name>.+?) and click the trash icon to delete it\.")),
    ("important", re.compile(r"Find the email by (?P<name>.+?) and click the star icon to mark it as important\.")),
]
_TEMPLATES_JS = """() => typeof TEMPLATES !== 'undefined' ? TEMPLATES
    : typeof NL_TEMPLATES !== 'undefined' ? {forward: {train: NL_TEMPLATES}} : {}"""


def _template_regex(template: str) -> re.Pattern:
    """'Forward NAME's email to DEST.' -> a regex with groups name and arg (the page fills only the
    first occurrence of each slot)."""
    rx = re.escape(template)
    rx = rx.replace("NAME", "(?P<name>.+?)", 1)
    rx = rx.replace("DEST", "(?P<arg>.+?)", 1).replace("MSG", "(?P<arg>.*?)", 1)
    return re.compile(rx)


async def _email_request(d: Demo) -> tuple[str, str, str | None]:
    """(action, sender, argument) of the e-mail task: argument = reply text or forward recipient."""
    for action, pattern in _EMAIL_PATTERNS:
        m = pattern.fullmatch(d.intent)
        if m:
            return action, m.group("name"), m.groupdict().get("arg")
    templates = await d.page.evaluate(_TEMPLATES_JS)
    people = set(await d.page.evaluate("() => ui_utils.PEOPLE_NAMES"))
    senders = {s.strip() for s in await d.page.locator("#main .email-sender").all_inner_texts()}
    readings = []
    for action, lists in templates.items():
        for template in lists.get("train", []):
            m = _template_regex(template).fullmatch(d.intent)
            if not m or m.group("name") not in senders:
                continue
            reading = (action, m.group("name"), m.groupdict().get("arg"))
            if action == "forward" and reading[2] not in people:
                continue                  # "Forward DEST ..." read into "Forward to Ann ...": DEST = "to Ann"
            if reading not in readings:
                readings.append(reading)
    if len(readings) > 1:
        # a few templates swap the slots ("Find the email from DEST and forward it to NAME"); when both
        # names are senders, read the request literally: the sender is the name after "from" / "by"
        literal = [r for r in readings if re.search(rf"\b(?:from|by) {re.escape(r[1])}\b", d.intent)]
        readings = literal if len(literal) == 1 else readings
    if len(readings) != 1:
        raise ExpertError(f"{len(readings)} readings of the e-mail request {d.intent!r}: {readings}")
    return readings[0]


@expert("email-inbox-delete", "email-inbox-important")
@expert("email-inbox", "email-inbox-forward", "email-inbox-reply", "email-inbox-star-reply",
        "email-inbox-noscroll", "email-inbox-forward-nl", "email-inbox-forward-nl-turk",
        "email-inbox-nl-turk", multi_step=True)
async def email_inbox(d: Demo) -> None:
    action, sender, arg = await _email_request(d)
    thread = d.page.locator("#main .email-thread").filter(
        has=d.page.locator(".email-sender").filter(has_text=exact(sender))).first
    if action in ("delete", "important"):
        icon = "trash" if action == "delete" else "star"
        await d.click(thread.locator(f".email-actions .{icon}"),
                      f"the {icon} icon of the email from {sender}")
        return
    await d.click(thread, f"the email from {sender}")
    if action == "reply":
        await d.click("#email .email-reply", "the 'Reply' button")
        await d.type("#reply-text", arg, "the reply text area")
        await d.click("#send-reply", "the send button of the reply")
    else:
        await d.click("#email .email-forward", "the 'Forward' button")
        await d.type("#forward .forward-sender", arg, "the 'to:' field of the forward")
        await d.click("#send-forward", "the send button of the forward")


# ---- social media ----

_SOCIAL_BUTTONS = {"Reply": "reply", "Retweet": "retweet", "Like": "like"}


@expert("social-media", multi_step=True)
async def social_media(d: Demo) -> None:
    m = re.fullmatch(r'For the user (\S+), click on the "(.+)" button\.', d.intent)
    user, button = m.group(1), m.group(2)
    post = d.page.locator("#area .media").filter(
        has=d.page.locator(".username").filter(has_text=exact(user))).first
    if button in _SOCIAL_BUTTONS:
        icon = post.locator(f".controls .{_SOCIAL_BUTTONS[button]}")
        await d.click(icon, f"the {button.lower()} icon of the post by {user}")
        # the icons swap their image on hover; a first click can land while the new image loads
        await d.click(icon, f"the {button.lower()} icon of the post by {user} again, since nothing happened")
        return
    item = post.locator("ul li").filter(has_text=re.compile(rf"^\s*{re.escape(button)}"))
    await d.click(post.locator(".controls .more"), f"the 'more' menu icon of the post by {user}")
    if not await item.first.is_visible():
        # the icon swaps its image on hover; a first click can land while the new image loads
        await d.click(post.locator(".controls .more"),
                      f"the 'more' menu icon of the post by {user} again, since its menu did not open")
    await d.click(item, f"the '{(await item.first.inner_text()).strip()}' menu item")


# ---- site suite (env/sitesuite.py): WebArena-format tasks on the local shop + forum ----
# SUITE_EXPERTS maps a suite task family to its solver. The intents are generated from templates
# (sitesuite.FAMILIES), so each solver reads its values from the intent; answers go out through
# exit(message=...) and are scored by env's WebArena rubrics. A logged-out start (edit-profile on odd
# seeds) shows the login form: the solver logs in first with the credentials the intent states.

SUITE_EXPERTS: dict[str, Solver] = {}


def suite_expert(name: str):
    def register(fn: Solver) -> Solver:
        SUITE_EXPERTS[name] = fn
        return fn
    return register


def _intent(d: Demo, pattern: str) -> re.Match:
    m = re.fullmatch(pattern, d.intent)
    if m is None:
        raise ExpertError(f"cannot read the intent {d.intent!r}")
    return m


async def _answer(d: Demo, message: str, what: str) -> None:
    await d.act(Action("exit", message=message), what)


async def _suite_login(d: Demo) -> None:
    """On the login form (a logged-out start), log in with the intent's credentials (else the default account)."""
    if not await visible(d.page.locator("#login-form")):
        return
    m = re.search(r"the username is (\S+) and the password is (\S+?)\.?$", d.intent)
    user, password = (m.group(1), m.group(2)) if m else (suite_site.ACCOUNT["username"],
                                                         suite_site.ACCOUNT["password"])
    await d.type("#login-form input[name=username]", user, "the 'Username' field of the login form")
    await d.type("#login-form input[name=password]", password, "the 'Password' field of the login form")
    await d.click("#login-form button[type=submit]", "the 'Log in' button")


async def _nav(d: Demo, path: str, name: str) -> None:
    await d.click(f"nav a[href='{path}']", f"the '{name}' link of the navigation bar")


async def _search(d: Demo, text: str) -> None:
    el = await d.label("input[name=q]", "the product search box")
    await d.act(Action("Search", element=el, argument=text), f"the product search box; search for {text!r}")


async def _open_product(d: Demo, name: str) -> None:
    await _search(d, name)
    await d.click(d.page.locator("table a").filter(has_text=exact(name)), f"the link of the product {name!r}")


@suite_expert("edit-profile")
async def suite_edit_profile(d: Demo) -> None:
    m = _intent(d, r'Set the (display name|location|bio|newsletter) of your profile to "(.*)"\. If you need .*')
    field, value = m.group(1), m.group(2)
    await _suite_login(d)
    await _nav(d, "/profile", "Profile")
    await _save_profile_field(d, field, value)
    await _answer(d, "done", f"none; the {field} is saved, so the task is done")


async def _save_profile_field(d: Demo, field: str, value: str) -> None:
    """From the profile page: Edit profile, set ``field`` ("display name", ..., "newsletter") to ``value``, Save."""
    await d.click("a[href='/profile/edit']", "the 'Edit profile' link")
    if field == "newsletter":
        await d.select("select[name=newsletter]", value, "the 'Newsletter' dropdown")
    else:
        target = "textarea[name=bio]" if field == "bio" else f"input[name={field.replace(' ', '_')}]"
        await d.type(target, value, f"the '{field.capitalize()}' field")
    await d.click("button[type=submit]", "the 'Save' button")


@suite_expert("stop-newsletter")
async def suite_stop_newsletter(d: Demo) -> None:
    await _suite_login(d)                                  # the login form returns to the profile page
    await _save_profile_field(d, "newsletter", "never")
    await _answer(d, "done", "none; the newsletter is set to never, so the task is done")


@suite_expert("log-in")
async def suite_log_in(d: Demo) -> None:
    await _suite_login(d)
    await _answer(d, "done", "none; I am logged in, so the task is done")


@suite_expert("product-price")
async def suite_product_price(d: Demo) -> None:
    name = _intent(d, r'What is the price of the "(.+)" in the shop\? .*').group(1)
    await _search(d, name)
    row = d.page.locator("table tr").filter(has=d.page.locator("a").filter(has_text=exact(name))).first
    price = (await row.locator("td").nth(2).inner_text()).strip()
    await _answer(d, price, f"none; the table says {name} costs {price}")


@suite_expert("order-items")
async def suite_order_items(d: Demo) -> None:
    order = _intent(d, r"Which products did I buy in order #(\d+)\? .*").group(1)
    await _nav(d, "/orders", "Orders")
    await d.click(f"a[href='/orders/{order}']", f"the link of order #{order}")
    names = [n.strip() for n in await d.page.locator("#order-summary tr td:first-child").all_inner_texts()]
    await _answer(d, ", ".join(names), f"none; order #{order} holds {', '.join(names)}")


@suite_expert("post-author")
async def suite_post_author(d: Demo) -> None:
    title = _intent(d, r'Who wrote the forum post "(.+)"\? .*').group(1)
    await _nav(d, "/forum", "Forum")
    for _ in range(10):                      # page through the post list until the post is listed
        row = d.page.locator("table tr").filter(has=d.page.locator("a").filter(has_text=exact(title)))
        if await row.count():
            author = (await row.first.locator("td").nth(2).inner_text()).strip()
            await _answer(d, author, f"none; the post {title!r} is by {author}")
            return
        await d.click(d.page.locator("a").filter(has_text=exact("Next")), "the 'Next' page link")
    raise ExpertError(f"post {title!r} not found")


@suite_expert("add-to-cart")
async def suite_add_to_cart(d: Demo) -> None:
    m = _intent(d, r'Add (\d) of the "(.+)" to my shopping cart\.')
    qty, name = m.group(1), m.group(2)
    await _open_product(d, name)
    await d.select("select[name=qty]", qty, "the 'Quantity' dropdown")
    await d.click("form[action='/cart/add'] button", "the 'Add to cart' button")
    await _answer(d, "done", f"none; {qty} x {name} are in the cart, so the task is done")


@suite_expert("checkout")
async def suite_checkout(d: Demo) -> None:
    m = _intent(d, r'Buy one "(.+)" and have it shipped to (.+) with (\w+) shipping\.')
    name, city, shipping = m.group(1), m.group(2), m.group(3)
    await _open_product(d, name)
    await d.click("form[action='/cart/add'] button", "the 'Add to cart' button")
    await d.click("a[href='/checkout']", "the 'Proceed to checkout' link")
    await d.type("input[name=ship_to]", city, "the 'Ship to city' field")
    await d.select("select[name=shipping]", shipping, "the 'Shipping' dropdown")
    await d.click("form[action='/checkout'] button", "the 'Place order' button")
    await _answer(d, "done", "none; the order is placed, so the task is done")


@suite_expert("new-post")
async def suite_new_post(d: Demo) -> None:
    m = _intent(d, r'Start a new post in the "(.+)" forum titled "(.+)" with the text "(.+)"\.')
    forum, title, text = m.group(1), m.group(2), m.group(3)
    await _nav(d, "/forum", "Forum")
    await d.click("a[href='/forum/new']", "the 'New post' link")
    await d.select("select[name=forum]", forum, "the 'Forum' dropdown")
    await d.type("input[name=title]", title, "the 'Title' field")
    await d.type("textarea[name=body]", text, "the 'Text' field")
    await d.click("form[action='/forum/new'] button", "the 'Submit' button")
    await _answer(d, "done", "none; the post is published, so the task is done")


@suite_expert("filter-category")
async def suite_filter_category(d: Demo) -> None:
    m = _intent(d, r"Show the (\w+) products of the shop sorted by price, (lowest|highest) price first\.")
    category, order = m.group(1), m.group(2)
    await d.select("select[name=category]", category, "the category dropdown")
    sort = "Price: low to high" if order == "lowest" else "Price: high to low"
    await d.select("select[name=sort]", sort, "the sort dropdown")
    await d.click(d.page.locator("button").filter(has_text=exact("Filter")), "the 'Filter' button")
    await _answer(d, "done", "none; the page lists them in that order, so the task is done")


@suite_expert("log-out")
async def suite_log_out(d: Demo) -> None:
    await _nav(d, "/logout", "Log out")
    await _answer(d, "done", "none; I am logged out, so the task is done")


async def run_demo(demo: Demo, solver: Solver, imperfection: str | None = None) -> str | None:
    """Run ``solver`` on ``demo`` to the episode's end; the failure reason, None for a success (prefixed with the
    ``imperfection`` a replayed episode carries)."""
    prefix = f"{imperfection}: " if imperfection else ""
    try:
        await solver(demo)
        return f"{prefix}{'replay' if imperfection else 'solver'} finished but the episode did not end"
    except EpisodeOver:
        return None if demo.reward > 0 else f"{prefix}episode ended without reward ({demo.done_reason})"
    except ExpertError as e:
        return f"{prefix or 'expert: '}{e}"
    except PlaywrightError as e:            # a read of the page failed (e.g. a wait for a menu timed out)
        return f"page: {webenv.first_line(e)}"


# ---- imperfect demonstrators: a demonstrator's mistakes and detours, at fixed rates ----

@dataclass(frozen=True)
class Quality:
    """How often the demonstrator errs, one imperfection at most per episode, drawn from a hash of the episode
    (task and seed), so the same flags write the same data. ``mistake``: the fraction of episodes with a mistake
    that fails them (kind a), half of them the decisive last action on another element of the observation
    (``wrong-element``), half that action taken before the steps that prepare it (``early-submit``; one-step
    episodes take the first); an unfiltered log keeps them. ``detour``: the fraction with a detour (kind b): a
    Scroll Down and a Scroll Up inserted before a random step, two interactions of the budget spent looking
    around (on a page that does not scroll, the env answers that it is already at the bottom / top); filtering
    by success cannot remove it. The kinds exclude each other (mistake + detour <= 1). Both 0:
    the clean demonstrator."""
    mistake: float = 0.0
    detour: float = 0.0

    def draw(self, key: str) -> tuple[str | None, random.Random]:
        """The imperfection of the episode ``key`` ("task_id/seed"): None, "wrong-element", "early-submit" or
        "detour", and the generator of its choices (which element, which step)."""
        rng = random.Random(hashlib.blake2b(key.encode(), digest_size=8).hexdigest())
        u, half = rng.random(), rng.random() < 0.5
        if u < self.mistake:
            return ("wrong-element" if half else "early-submit"), rng
        return ("detour" if u < self.mistake + self.detour else None), rng


_SCROLL_DETOUR = ((Action("Scroll Down"), "none; look further down the page first"),
                  (Action("Scroll Up"), "none; back up to where I was"))


def _wrong_element(obs_text: str, action: Action, rng: random.Random) -> Action:
    """``action`` on another element of the observation, of the same kind where there is one (a plausible
    slip: the neighbouring button, the other link); ``action`` itself when the observation has no other."""
    shown = observed_elements(obs_text)
    kind = shown.get(action.element, "").split(" ", 1)[0]
    others = sorted(e for e in shown if e != action.element)
    same = [e for e in others if shown[e].split(" ", 1)[0] == kind]
    return dataclasses.replace(action, element=rng.choice(same or others)) if others else action


async def replay_imperfect(env, task, clean: dict, kind: str, rng: random.Random,
                           prompt: str) -> tuple[dict, str | None]:
    """The clean demonstration ``clean`` of ``task`` sent again, response by response, on a fresh episode of the
    same page, with the imperfection ``kind`` (``Quality.draw``); the steps are recorded from the live pages, as
    ``demonstrate`` records them. Returns (record with ``"imperfection": kind``, failure reason or None)."""
    responses = [s["response"] for s in clean["steps"]]
    last = parse_action(responses[-1])
    if kind == "early-submit":
        responses = responses[:rng.randrange(max(len(responses) - 1, 1))] + [responses[-1]]
    demo = Demo(env, await env.reset(task), prompt=prompt, key=f"{task.task_id}/{task.seed}")
    detour_at = rng.randrange(len(responses)) if kind == "detour" else -1

    async def replay(d: Demo) -> None:
        for j, response in enumerate(responses):
            if j == detour_at:
                for action, what in _SCROLL_DETOUR:    # (on a page that does not scroll the env says so: spent)
                    await d.act(action, what, refused_ok=True)
            if j == len(responses) - 1 and kind == "wrong-element" and last.element is not None:
                wrong = _wrong_element(d.obs.text, last, rng)
                await d.act(wrong, observed_elements(d.obs.text).get(wrong.element, "another element"))
            else:
                await d.send(response)

    reason = await run_demo(demo, replay, kind)
    return {**clean, "reward": demo.reward, "steps": demo.steps, "imperfection": kind}, reason


# ---- driver ----

def task_name(task_id: str) -> str:
    """``miniwob/click-button`` -> ``click-button``."""
    return task_id.split("/", 1)[-1]


def solver_of(task) -> Solver | None:
    """The expert of ``task``: EXPERTS by MiniWoB task name, SUITE_EXPERTS by suite family (``suite/NAME``,
    ``suite/NAME@out``); None if there is none."""
    if task.family == sitesuite.SuiteFamily.name:
        return SUITE_EXPERTS.get(task_name(task.task_id).split("@")[0])
    return EXPERTS.get(task_name(task.task_id))


async def demonstrate(env, task, prompt: str = "thinking", thoughts: str = "short",
                      quality: Quality = Quality()) -> tuple[dict, str | None]:
    """Run one expert episode; returns (trajectory record, failure reason or None). The record is
    ``{"task", "seed", "intent", "reward", "steps": [{"observation", "error", "url", "response"}]}``
    (``reward`` 1.0 = success); ``prompt`` = the compress.system_prompt kind the responses are written for,
    ``thoughts`` = "short" ("# Element: ...") or "long" (long_thought). With a ``quality`` that gives this
    episode an imperfection, the clean demonstration is replayed with it (``replay_imperfect``) and that
    episode is returned, marked ``"imperfection"``."""
    solver = solver_of(task)
    obs = await env.reset(task)
    demo = Demo(env, obs, prompt=prompt, thoughts=thoughts, key=f"{task.task_id}/{task.seed}")
    reason = await run_demo(demo, solver)
    record = {"task": task.task_id, "seed": task.seed, "intent": obs.intent, "reward": demo.reward,
              "steps": demo.steps}
    kind, rng = quality.draw(demo.key)
    if reason is None and kind is not None:
        return await replay_imperfect(env, task, record, kind, rng, prompt)
    return record, reason


# ---- command line ----

@dataclass
class Args:
    """Generate behavior-cloning demonstrations with the scripted MiniWoB++ experts."""
    tasks: str = "experts"
    """'experts' (every covered task), or an env.load_tasks spec such as 'miniwob:click-button,login-user'"""
    episodes: int = 100
    """episodes (seeds) per task; only successful ones are written"""
    split: Literal["train", "eval"] = "train"
    """seed range: 'train' (env.DEMO_SEEDS, 0..99999) or 'eval' (env.EVAL_SEEDS, 1000000..1999999)"""
    seed_offset: int = 0
    """first seed = start of the split + seed_offset (episode i uses start + seed_offset + i)"""
    out: str = "data/demos.jsonl"
    """output JSONL, one successful trajectory per line"""
    concurrency: int = 6
    """browser contexts running episodes in parallel (one Chromium)"""
    max_obs_chars: int = 0
    """observation length cap passed to the env (0 = the env's default)"""
    chromium: str = ""
    """Chromium executable (empty = env's default)"""
    browser_endpoint: str = ""
    """Playwright browser servers to run the browsers on instead of Chromium here (ws://HOST:PORT/TOKEN, as
    scripts/browser_server.py prints it; several comma-separated; default $WEBAGENT_BROWSER_ENDPOINT);
    docs/environment.md, section Browsers on other machines"""
    failures: str = ""
    """optional JSONL of failed episodes (record + reason) for debugging"""
    progress: bool = True
    """show a tqdm progress bar"""
    prompt: PromptKind = "thinking"
    """response format, a compress.system_prompt kind: thinking / short (<think>..</think><answer>..</answer>)
    or plain / short_plain (a '# Element:' line, then the action)"""
    thoughts: Literal["short", "long"] = "short"
    """thoughts: 'short' ('# Element: ...') or 'long' (a reasoning paragraph, then that line: R1-CoT in miniature)"""
    mistakes: float = 0.0
    """an imperfect demonstrator: the fraction of episodes with a mistake that fails them (Quality), written too,
    as an unfiltered log keeps them (train_bc.py --no-only-successes clones them)"""
    detours: float = 0.0
    """an imperfect demonstrator: the fraction of episodes with a detour that spends two interactions (Quality)"""


def expand_tasks(spec: str) -> list:
    """Tasks of ``--tasks``: 'experts' = every MiniWoB task in EXPERTS, else env.load_tasks(spec) (e.g.
    'suite:all'), each of which must have an expert."""
    if spec in ("experts", "miniwob:experts"):
        spec = "miniwob:" + ",".join(EXPERTS)
    tasks = webenv.load_tasks(spec)
    missing = [t.task_id for t in tasks if solver_of(t) is None]
    if missing:
        raise SystemExit(f"no expert for {missing}; covered: {', '.join(EXPERTS)}; "
                         f"suite: {', '.join(SUITE_EXPERTS)}")
    return tasks


async def generate(tasks: list, seeds: list[int], concurrency: int, *, env_kwargs: dict | None = None,
                   pool_kwargs: dict | None = None, progress: bool = True, prompt: str = "thinking",
                   thoughts: str = "short", quality: Quality = Quality()) -> list[tuple[dict, str | None]]:
    """Run every (task, seed) through the experts with ``concurrency`` contexts of one BrowserPool."""
    jobs = [dataclasses.replace(t, seed=s) for t in tasks for s in seeds]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(jobs), desc="demos", unit="ep", dynamic_ncols=True)
    ok = 0

    def failed(job: Job, reason: str) -> tuple[dict, str]:   # a reset that failed, or a demonstration too long
        return {"task": job.task.task_id, "seed": job.task.seed, "intent": "", "reward": 0.0, "steps": []}, reason

    def done(job: Job, result: tuple[dict, str | None]) -> None:
        nonlocal ok
        if result[1]:
            log.info("%s seed %d failed: %s", job.task.task_id, job.task.seed, result[1])
        ok += result[1] is None
        if bar is not None:
            bar.update(1)
            bar.set_postfix(success=f"{ok}/{bar.n}")

    async with webenv.BrowserPool(**(pool_kwargs or {})) as pool, \
            Runner(pool, concurrency, timeout_s=EPISODE_TIMEOUT_S,
                   env_kwargs=env_kwargs or {}) as runner:
        results = await runner.run([Job(t) for t in jobs],
                                   lambda env, job: demonstrate(env, job.task, prompt, thoughts, quality), failed, done)
    if bar is not None:
        bar.close()
    return sorted(results, key=lambda r: (r[0]["task"], r[0]["seed"]))


def write_jsonl(path: str | Path, records: list[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def success_table(results: list[tuple[dict, str | None]]) -> str:
    per = collections.defaultdict(lambda: [0, 0, 0])    # task -> [successes, episodes, steps of successes]
    for rec, reason in results:
        p = per[rec["task"]]
        p[1] += 1
        if reason is None:
            p[0] += 1
            p[2] += len(rec["steps"])
    lines = [f"{'task':<34} {'success':>9} {'rate':>7} {'steps':>6}"]
    for task, (ok, n, steps) in sorted(per.items()):
        lines.append(f"{task:<34} {ok:>4}/{n:<4} {ok / n:>7.1%} {steps / max(ok, 1):>6.1f}")
    ok, n = sum(p[0] for p in per.values()), sum(p[1] for p in per.values())
    lines.append(f"{'all':<34} {ok:>4}/{n:<4} {ok / max(n, 1):>7.1%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from trainlib import parse_args
    args = parse_args(Args, argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    webenv.browser_endpoints(args.browser_endpoint or None)    # checked, and their tokens kept out of logs
    log.info("args %s", webenv.redact(str(vars(args))))
    # derived
    split = SPLITS[args.split]
    seeds = [split.start + args.seed_offset + i for i in range(args.episodes)]
    if seeds and seeds[-1] >= split.stop:
        raise SystemExit(f"seeds run past the {args.split} range {split}")
    if min(args.mistakes, args.detours) < 0 or args.mistakes + args.detours > 1:
        raise SystemExit(f"--mistakes and --detours are fractions of episodes, >= 0 and together <= 1, not "
                         f"{args.mistakes} and {args.detours}")
    tasks = expand_tasks(args.tasks)
    env_kwargs = {"max_obs_chars": args.max_obs_chars} if args.max_obs_chars else {}
    pool_kwargs = {"executable_path": args.chromium} if args.chromium else {}
    if args.browser_endpoint:
        pool_kwargs["endpoints"] = args.browser_endpoint

    t0 = time.time()
    results = asyncio.run(generate(tasks, seeds, args.concurrency, env_kwargs=env_kwargs,
                                   pool_kwargs=pool_kwargs, progress=args.progress, prompt=args.prompt,
                                   thoughts=args.thoughts, quality=Quality(args.mistakes, args.detours)))
    kept = [rec for rec, reason in results if reason is None or "imperfection" in rec]   # (a log keeps its mistakes)
    write_jsonl(args.out, kept)
    if args.failures:
        write_jsonl(args.failures, [{**rec, "reason": reason} for rec, reason in results if reason])
    reasons = collections.Counter(reason.split(":")[0] for _, reason in results if reason)
    print(success_table(results))
    imperfect = collections.Counter((r["imperfection"], r["reward"] > 0) for r in kept if "imperfection" in r)
    print(f"wrote {len(kept)} trajectories ({sum(len(r['steps']) for r in kept)} steps) to {args.out} "
          f"in {time.time() - t0:.1f}s; failures by kind: {dict(reasons)}"
          + (f"; imperfect (kind, success): {dict(sorted(imperfect.items()))}" if imperfect else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
