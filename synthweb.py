"""Synthetic web pages for pretraining a tiny base model on generic web skills, in the environment's
observation format: find the element an instruction names and act on it.

A real base model arrives knowing how to read an instruction and find the thing it names on a page; the tiny
models of the CPU demo arrive knowing nothing, and behavior cloning on a few dozen demonstrations per task
teaches them position guesses instead (docs/training.md: "The tiny web base"). ``pretrain.py`` trains a tiny
model on these pages first. Nothing here comes from the demo suite: no MiniWoB++ page, template or word list;
instructions, element kinds and labels are this file's own, labels are random words, random strings or random
pieces of the tokenizer's vocabulary (so that copying must work for any token sequence).

Three skills, one step each (the previous turns of multi-step records appear as history, compressed):
  click    "Press the "X" toggle."              -> the element whose text is X (case-sensitive; near misses
                                                    such as x / X1 appear as distractors)
  type     "Put "v" in the City field."         -> Type v into the field labelled City
  select   "Mark X and Y, then press Z."        -> the first of X, Y not yet marked on the page, else Z
"""
from __future__ import annotations

import random

import compress

WORDS = ("alpha bravo delta echo golf hotel india kilo lima mike oscar papa quebec romeo sierra tango victor "
         "whiskey yankee zulu amber azure coral ivory olive onyx pearl ruby sage slate teal umber violet apple "
         "berry cherry grape lemon mango melon peach plum cedar maple pine birch oak willow river stone cloud "
         "storm frost ember spark pixel vector matrix kernel socket buffer packet router portal beacon anchor "
         "harbor castle garden meadow canyon desert island valley summit forest lagoon glacier north south east "
         "west red blue green yellow orange purple brown black white silver gold save open close next back home "
         "start stop play pause edit copy paste print share send reply search filter sort upload download "
         "refresh delete remove add create update confirm accept decline retry skip done apply reset").split()
KINDS = ["button", "link", "item", "option", "entry", "checkbox", "toggle", "card", "tile", "chip"]
FIELDS = ["Name", "Email", "City", "Code", "Title", "Comment", "Phone", "Street", "Country", "Note", "Tag",
          "Nickname", "Company", "Subject", "Message", "Query", "Label", "Color", "Amount", "Zip"]
NUMBERED = ["Item", "Step", "Page", "Part", "Slot", "Row", "Card", "Box"]
CLICK = ['Press the "{x}" {k}.', 'Select the {k} "{x}".', 'Hit "{x}".', 'Please click "{x}".',
         'Find the {k} labelled "{x}" and click it.', 'Choose "{x}".', 'Tap the {k} named "{x}".',
         'Activate {x}.', 'Pick the {k} "{x}" from the page.', 'Go to "{x}".', 'Open {x}.',
         'Use the "{x}" {k}.']
TYPE = ['Fill the {f} box with "{x}".', 'Write "{x}" into the {f} field.', 'Put "{x}" in {f}.',
        'In the {f} field, type "{x}".', 'Set {f} to "{x}".', 'Your {f} is "{x}": enter it.']
SELECT = ['Mark {xs}, then press {z}.', 'Tick {xs} and hit "{z}".', 'Turn on {xs}; finish with {z}.',
          'Check {xs} before pressing {z}.']
FINISH = ["Done", "Apply", "Send", "Save", "OK", "Go", "Next", "Finish"]
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


class Labels:
    """Random element texts: English words, random strings, numbered names and new words glued from 1-3
    word-like pieces of the tokenizer's vocabulary (a copy must work for token sequences never seen whole)."""

    def __init__(self, vocab: list[str] | None = None):
        self.pieces = sorted({w.replace("\u0120", "") for w in (vocab or [])
                              if w.replace("\u0120", "").isalpha() and w.isascii()
                              and len(w.replace("\u0120", "")) >= 2})

    def __call__(self, rng: random.Random) -> str:
        r = rng.random()
        if self.pieces and r < 0.45:
            w = "".join(rng.choice(self.pieces) for _ in range(rng.choice([1, 1, 2, 2, 3])))
            w = w.lower() if rng.random() < 0.6 else w.capitalize()
        elif r < 0.65:
            w = " ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 1, 2])))
            w = w.capitalize() if rng.random() < 0.3 else w
        elif r < 0.85:
            w = "".join(rng.choice(ALNUM) for _ in range(rng.randint(2, 6)))
        else:
            w = f"{rng.choice(NUMBERED)}{rng.choice([' #', ' ', ''])}{rng.randint(1, 12)}"
        return w


def near_miss(rng: random.Random, x: str) -> str:
    """A distractor text close to ``x``: other case, a character more or less, a digit appended."""
    r = rng.random()
    if r < 0.4 and x.lower() != x:
        return x.lower()
    if r < 0.6 and x.capitalize() != x:
        return x.capitalize()
    if r < 0.8 and len(x) > 2:
        return x[:-1]
    return x + str(rng.randint(0, 9))


def _response(element_text: str, action: str) -> str:
    """The short prompt's response: ``# Element: {element_text}`` as the thought, then the action."""
    return compress.format_response(f"# Element: {element_text}", action, prompt="short")


def _click(i: int) -> str:
    return f'do(action="Click", element="{i}")'


def bbox(rng: random.Random) -> str:
    return (f'{rng.randint(2, 150)},{rng.randint(50, 200)},{rng.randint(12, 150)},'
            f'{rng.choice([11, 13, 17, 20, 21, 23, 25, 31])}')


def filler(rng: random.Random, labels: Labels) -> str:
    return " ".join(rng.choice(WORDS) if rng.random() < 0.6 else labels(rng).lower()
                    for _ in range(rng.randint(2, 9)))


def element(rng: random.Random, i: int, text: str, style: str, status: str | None = None,
            with_bbox: bool = True) -> str:
    b = f' data-bbox="{bbox(rng)}"' if with_bbox else ""
    if style in ("checkbox", "radio"):
        st = f' data-status="{status or "not-checked"}"'
        return f'<label> <input id="{i}" type="{style}"{st}{b}> {text} </label>'
    if style == "li-a":
        return f'<li> <a id="{i}"{b}> {text} </a> </li>'
    extra = f' data-status="{status}"' if status else ""
    return f'<{style} id="{i}"{extra}{b}> {text} </{style}>'


CLICK_STYLES = ["button", "a", "span", "li", "div", "h3", "li-a", "checkbox", "radio"]


def _distinct(rng: random.Random, labels: Labels, n: int, near: float) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        x = (near_miss(rng, out[0]) if out and rng.random() < near else labels(rng)).strip()
        if x and x not in out:
            out.append(x)
    return out


def _page(rng: random.Random, intent: str, body: list[str], labels: Labels, filler_text: bool = True) -> str:
    parts = [f"<div> {intent} </div>"]
    for p in body:
        if filler_text and rng.random() < 0.3:
            parts.append(f"<div> {filler(rng, labels)} </div>")
        parts.append(p)
    if filler_text and rng.random() < 0.3:
        parts.append(f"<p> {filler(rng, labels)} </p>")
    return "<html> " + " ".join(parts) + " </html>"


def click_record(rng: random.Random, labels: Labels, easy: bool = False) -> tuple[str, list[str], str, str]:
    """``easy``: 2-4 elements, no data-bbox, no filler (the first stage of the pretraining curriculum)."""
    n = rng.randint(2, 4 if easy else 8)
    texts = _distinct(rng, labels, n, near=0.25)
    rng.shuffle(texts)
    t = rng.randrange(n)
    kind = rng.choice(KINDS)
    intent = rng.choice(CLICK).format(x=texts[t], k=kind)
    style = rng.choice(CLICK_STYLES)
    body, i = [], 0
    ids = []
    for x in texts:
        if not easy and rng.random() < 0.15:  # a non-target interactive element without a label of its own
            body.append(f'<input id="{i}" type="text" value=""{" data-bbox=" + chr(34) + bbox(rng) + chr(34)}>')
            i += 1
        s = style if rng.random() < 0.8 else rng.choice(CLICK_STYLES)
        body.append(element(rng, i, x, s, with_bbox=not easy))
        ids.append(i)
        i += 1
    obs = _page(rng, intent, body, labels, filler_text=not easy)
    th = f"the '{texts[t]}' {kind}" if rng.random() < 0.5 else f"the {kind} '{texts[t]}'"
    return intent, [], obs, _response(th, _click(ids[t]))


def type_record(rng: random.Random, labels: Labels) -> tuple[str, list[str], str, str]:
    n = rng.randint(1, 4)
    fields = rng.sample(FIELDS, n)
    t = rng.randrange(n)
    value = labels(rng).strip()
    intent = rng.choice(TYPE).format(f=fields[t], x=value)
    body = []
    for k, f in enumerate(fields):
        b = f' data-bbox="{bbox(rng)}"'
        if rng.random() < 0.5:
            body.append(f'<p> <label> {f} </label> <input id="{k}" type="text" value=""{b}> </p>')
        else:
            body.append(f'<input id="{k}" type="text" placeholder="{f}" value=""{b}>')
    if rng.random() < 0.6:
        body.append(element(rng, n, rng.choice(FINISH), "button"))
    obs = _page(rng, intent, body, labels)
    action = f'do(action="Type", argument="{value}", element="{t}")'
    return intent, [], obs, _response(f"the '{fields[t]}' field", action)


def select_record(rng: random.Random, labels: Labels) -> tuple[str, list[str], str, str]:
    """A multi-step record at a random step: the targets marked so far are checked on the page and appear in
    the history as earlier responses (their observations compressed away)."""
    n = rng.randint(2, 6)
    k = rng.randint(1, min(3, n))
    texts = _distinct(rng, labels, n, near=0.15)
    targets = rng.sample(range(n), k)
    finish = rng.choice(FINISH)
    xs = [texts[j] for j in targets]
    listed = xs[0] if k == 1 else ", ".join(xs[:-1]) + " and " + xs[-1]
    intent = rng.choice(SELECT).format(xs=listed, z=finish)
    done = rng.randint(0, k)
    style = rng.choice(["checkbox", "checkbox", "radio", "button"])
    history = [_response(f"the '{texts[j]}' checkbox", _click(j)) for j in targets[:done]]
    body = [element(rng, j, x, style, "checked" if j in targets[:done] else "not-checked")
            for j, x in enumerate(texts)]
    body.append(element(rng, n, finish, "button"))
    obs = _page(rng, intent, body, labels)
    if done < k:
        j = targets[done]
        return intent, history, obs, _response(f"the '{texts[j]}' checkbox", _click(j))
    return intent, history, obs, _response(f"the '{finish}' button", _click(n))


SKILLS = {"click": click_record, "type": type_record, "select": select_record}
MIX = {"click": 0.6, "type": 0.2, "select": 0.2}


def record(rng: random.Random, labels: Labels, mix: dict[str, float] = MIX, easy: bool = False):
    """One (skill, intent, history responses, observation, response) drawn by ``mix``; ``easy``: an easy click
    page whatever ``mix`` says."""
    r, acc = rng.random(), 0.0          # drawn in either case: the rows stay those the committed base saw
    if easy:
        return ("click", *click_record(rng, labels, easy=True))
    for name, p in mix.items():
        acc += p
        if r < acc:
            return (name, *SKILLS[name](rng, labels))
    return (name, *SKILLS[name](rng, labels))
