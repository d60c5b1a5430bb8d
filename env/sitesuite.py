"""A small WebArena-format site suite that runs anywhere: a shop and a forum behind a login, served by a real
HTTP server on 127.0.0.1 with a sqlite database, plus task families in WebArena's own config format, scored
only by env's WebArena rubrics (``env.evaluate``).

Why: MiniWoB++ pages are stateless single pages scored by the page itself, and the real WebArena needs six
docker sites. This suite has state (a cart, orders, posts, a profile), a login, and answers given through
``exit(message=...)``, ``url_match`` and ``program_html`` checks, so the paper's log-out / edit-profile
argument (Sec. 1) can be trained and measured on a laptop.

What it implements
- The site (``suite_site.py``: the world of each seed, the pages, the per-trajectory sqlite sandboxes, the HTTP
  server ``SuiteServer`` and the default account's storage state); ``python -m env suite --port 8090`` serves
  it by hand, and the default account is ``alex`` / ``suite1234``.
- Task families (``FAMILIES``; docs/site-suite.md lists them): each turns (seed, base URL) into one task
  config in WebArena's format (task_id, sites, require_login, storage_state, start_url, intent, intent_template,
  instantiation_dict, eval{eval_types, reference_answers, reference_url, url_note, program_html}), checked by
  env's own config loader. ``edit-profile`` is the paper's pair: its episodes start logged in (even
  seeds) or logged out (odd seeds); ``edit-profile@in`` / ``edit-profile@out`` force one start type.
  ``stop-newsletter`` is the same pair with nothing to copy from the intent (``make demo-suite``), and
  ``log-in`` always starts logged out.
- ``SuiteFamily`` (registered as "suite"): ``env.load_tasks("suite:all")`` or ``"suite:edit-profile,add-to-cart"``
  gives one Task per family; callers set the seed per episode (``dataclasses.replace(task, seed=s)``, as for
  MiniWoB; demonstrations use env.DEMO_SEEDS, RL env.RL_SEEDS, evaluation env.EVAL_SEEDS); ``setup_context``
  sets the sandbox cookie and, for a ``require_login`` config, the cookies of its ``storage_state`` file; ``start`` fills in
  the concrete intent and eval. The server starts lazily in a thread on first load (or set
  ``SITESUITE_URL`` to use one started by hand).

Departures from WebArena: one small site instead of six large ones; logged-in starts come from a
storage-state file the family writes itself (a signed cookie, no login run needed); ``require_reset`` is
never needed, since every episode has its own sandbox.

Run:
    python -m env suite --port 8090                          # serve by hand (log in as alex / suite1234)
    python -m env suite --configs out.json --tasks all --split eval --n 3   # write concrete configs
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import random
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from . import webarena, webarena_rubrics
from .suite_site import (_BIOS, _NAMES, _TOPICS, ACCOUNT, CATEGORIES, CITIES, FORUMS, NEWSLETTER, SANDBOX_COOKIE,
                         SHIPPING, SITE, SuiteServer, World, _money, base_url, new_sandbox, storage_state_path, world)
from .tasks import DEMO_SEEDS, EVAL_SEEDS, Task, TaskEnv, register_family


# ---- task families: (seed, base URL) -> one task config in WebArena's format ----
# A family picks its targets from the seed's world with its own RNG and returns the parts of the config that
# differ; task_config() adds the rest. Eval types: string_match (exact_match / must_include), url_match,
# program_html; every program_html target reads the page through the agent's cookies (sandbox and session).

@dataclass
class Spec:
    """The varying parts of one task config."""
    intent_template: str
    values: dict[str, Any]                  # instantiation_dict
    eval: dict[str, Any]
    start_path: str = "/"


def _edit_profile(w: World, rng: random.Random, base: str) -> Spec:
    field, key = rng.choice([("display name", "display_name"), ("location", "location"), ("bio", "bio"),
                             ("newsletter", "newsletter")])
    pool = {"display_name": _NAMES, "location": CITIES, "bio": _BIOS, "newsletter": NEWSLETTER}[key]
    value = rng.choice([v for v in pool if v != w.profile[key]])
    return Spec("Set the {field} of your profile to \"{value}\". If you need to log in, the username is "
                "{username} and the password is {password}.",
                {"field": field, "value": value, **ACCOUNT},
                {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
                 "program_html": [{"url": f"{base}/profile", "locator":
                                   f"document.querySelector('#profile-{key.replace('_', '-')}').textContent",
                                   "required_contents": {"exact_match": value}}]})


def _product_price(w: World, rng: random.Random, base: str) -> Spec:
    p = rng.choice(w.products)
    return Spec('What is the price of the "{product}" in the shop? Answer with the number only, like 12.50.',
                {"product": p["name"]},
                {"eval_types": ["string_match"], "reference_answers": {"exact_match": _money(p["price"])},
                 "reference_url": "", "program_html": []})


def _order_items(w: World, rng: random.Random, base: str) -> Spec:
    o = rng.choice(w.orders)
    names = {p["id"]: p["name"] for p in w.products}
    return Spec("Which products did I buy in order #{order}? Name all of them.", {"order": o["id"]},
                {"eval_types": ["string_match"],
                 "reference_answers": {"must_include": [names[pid] for pid, _ in o["items"]]},
                 "reference_url": "", "program_html": []})


def _post_author(w: World, rng: random.Random, base: str) -> Spec:
    post = rng.choice(w.posts)
    return Spec('Who wrote the forum post "{title}"? Answer with the username.', {"title": post["title"]},
                {"eval_types": ["string_match"], "reference_answers": {"must_include": [post["author"]]},
                 "reference_url": "", "program_html": []})


_CART_JS = ("[...document.querySelectorAll('#cart-items tr[data-name]')]"
            ".map((r) => r.dataset.name + ' x ' + r.dataset.qty).join('; ')")


def _add_to_cart(w: World, rng: random.Random, base: str) -> Spec:
    p, qty = rng.choice(w.products), rng.randint(2, 5)
    return Spec('Add {qty} of the "{product}" to my shopping cart.', {"qty": qty, "product": p["name"]},
                {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
                 "program_html": [{"url": f"{base}/cart", "locator": _CART_JS,
                                   "required_contents": {"exact_match": f"{p['name']} x {qty}"}}]})


def _checkout(w: World, rng: random.Random, base: str) -> Spec:
    p, city, ship = rng.choice(w.products), rng.choice(CITIES), rng.choice(SHIPPING)
    next_id = max(o["id"] for o in w.orders) + 1
    return Spec('Buy one "{product}" and have it shipped to {city} with {shipping} shipping.',
                {"product": p["name"], "city": city, "shipping": ship},
                {"eval_types": ["url_match", "program_html"], "reference_answers": None,
                 "reference_url": f"{base}/orders/{next_id}", "url_note": "GOLD in PRED",
                 "program_html": [{"url": "last", "locator": "document.querySelector('#order-summary').innerText",
                                   "required_contents": {"must_include": [p["name"], f"Ship to: {city}",
                                                                          f"Shipping: {ship}"]}}]})


def _new_post(w: World, rng: random.Random, base: str) -> Spec:
    forum = rng.choice(FORUMS)
    topic = rng.choice(_TOPICS)
    title = f"{rng.choice(['Ideas', 'News', 'Questions', 'Notes'])} about {topic} #{rng.randint(10, 99)}"
    text = f"Does anyone else enjoy {topic}? {rng.choice(['Let me know.', 'Share your tips.', 'Reply below.'])}"
    return Spec('Start a new post in the "{forum}" forum titled "{title}" with the text "{text}".',
                {"forum": forum, "title": title, "text": text},
                {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
                 "program_html": [
                     {"url": "last", "locator": "document.querySelector('#post-title').textContent",
                      "required_contents": {"exact_match": title}},
                     {"url": "last", "locator": "document.querySelector('#post-forum').textContent",
                      "required_contents": {"exact_match": forum}},
                     {"url": "last", "locator": "document.querySelector('#post-body').textContent",
                      "required_contents": {"exact_match": text}}]})


def _filter_category(w: World, rng: random.Random, base: str) -> Spec:
    cat = rng.choice(CATEGORIES)
    sort, words = rng.choice([("price_asc", "lowest price first"), ("price_desc", "highest price first")])
    return Spec("Show the {category} products of the shop sorted by price, {order}.",
                {"category": cat, "order": words},
                {"eval_types": ["url_match"], "reference_answers": None,
                 "reference_url": f"{base}/shop?category={cat.lower()}&sort={sort}", "url_note": "GOLD in PRED",
                 "program_html": []})


_LOGGED_IN_JS = "document.querySelector('#login-form') ? 'logged out' : 'logged in'"


def _stop_newsletter(w: World, rng: random.Random, base: str) -> Spec:
    # The same action sequence on every seed (no value to copy from the intent): the on-policy demo's task.
    # It starts on the profile page (logged out: the login form, which returns there after the login).
    return Spec("Unsubscribe from the newsletter: set the newsletter of your profile to \"never\". If you need to "
                "log in, the username is {username} and the password is {password}.", dict(ACCOUNT),
                {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
                 "program_html": [{"url": f"{base}/profile",
                                   "locator": "document.querySelector('#profile-newsletter').textContent",
                                   "required_contents": {"exact_match": "never"}}]}, start_path="/profile")


def _log_in(w: World, rng: random.Random, base: str) -> Spec:
    return Spec("Log in to the site. The username is {username} and the password is {password}.", dict(ACCOUNT),
                {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
                 "program_html": [{"url": f"{base}/profile", "locator": _LOGGED_IN_JS,
                                   "required_contents": {"exact_match": "logged in"}}]})


def _log_out(w: World, rng: random.Random, base: str) -> Spec:
    return Spec("Log out of the site.", {},
                {"eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
                 "program_html": [{"url": f"{base}/profile", "locator": _LOGGED_IN_JS,
                                   "required_contents": {"exact_match": "logged out"}}]})


@dataclass(frozen=True)
class Family:
    """One task family of the suite: its generator, the actions an expert takes (typical) and its eval types
    (docs/site-suite.md lists them)."""
    name: str
    make: Callable[[World, random.Random, str], Spec]
    steps: str
    login_starts: bool = False      # episodes start logged out on odd seeds (edit-profile: the paper's pair)
    logged_out: bool = False        # every episode starts logged out (log-in)


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("edit-profile", _edit_profile, "5 logged in / 8 logged out", login_starts=True),
    Family("product-price", _product_price, "2"),
    Family("order-items", _order_items, "3"),
    Family("post-author", _post_author, "2-4"),
    Family("add-to-cart", _add_to_cart, "5"),
    Family("checkout", _checkout, "8"),
    Family("new-post", _new_post, "7"),
    Family("filter-category", _filter_category, "4"),
    Family("log-out", _log_out, "2"),
    Family("stop-newsletter", _stop_newsletter, "4 logged in / 7 logged out", login_starts=True),
    Family("log-in", _log_in, "4", logged_out=True),
)}
START_TYPES = {"": "by seed (even: logged in, odd: logged out)", "in": "logged in", "out": "logged out"}


def split_name(name: str) -> tuple[Family, str]:
    """``"edit-profile@out"`` -> (the edit-profile Family, "out"); a clear ValueError for a bad name."""
    fam_name, _, start = name.partition("@")
    fam = FAMILIES.get(fam_name)
    if fam is None:
        raise ValueError(f"unknown suite task family {fam_name!r} (families: {', '.join(FAMILIES)})")
    if start not in START_TYPES:
        raise ValueError(f"{name!r}: unknown start type {start!r} (use @in or @out)")
    if start and not fam.login_starts:
        raise ValueError(f"{name!r}: only families with logged-out starts take @in / @out "
                         f"({', '.join(f.name for f in FAMILIES.values() if f.login_starts)})")
    return fam, start


def starts_logged_in(name: str, seed: int) -> bool:
    """Does an episode of family ``name`` (optionally "@in" / "@out") with ``seed`` start logged in?"""
    fam, start = split_name(name)
    if fam.logged_out:
        return False
    if not fam.login_starts:
        return True
    return start == "in" if start else seed % 2 == 0


def task_config(name: str, seed: int, base: str | None = None, standalone: bool = False) -> dict[str, Any]:
    """The WebArena config of family ``name`` at ``seed`` on the suite at ``base`` (default: base_url()), e.g.
    ``task_config("product-price", 1000000)["eval"]["reference_answers"] == {"exact_match": "23.99"}``.
    ``standalone``: the start URL itself opens a fresh sandbox of the seed (``/sandbox?seed=N&next=PATH``),
    so the config also runs as a plain WebArena config (``env.load_tasks("configs.json")``) without this
    family's cookie; the URLs the agent then visits are the same."""
    fam, _ = split_name(name)
    base = (base or base_url()).rstrip("/")
    spec = fam.make(world(seed), random.Random(f"sitesuite-task-{fam.name}-{seed}"), base)
    logged_in = starts_logged_in(name, seed)
    return {
        "sites": [SITE], "task_id": f"{name}/{seed}", "require_login": logged_in,
        "storage_state": storage_state_path() if logged_in else None,
        "start_url": (f"{base}/sandbox?{urllib.parse.urlencode({'seed': seed, 'next': spec.start_path})}"
                      if standalone else base + spec.start_path), "geolocation": None,
        "intent_template": spec.intent_template, "instantiation_dict": spec.values,
        "intent": spec.intent_template.format(**spec.values), "require_reset": False,
        "intent_template_id": list(FAMILIES).index(fam.name),
        "eval": spec.eval,
    }


# ---- the task family seam (env.TaskFamily) ----

class SuiteFamily(webarena.WebArenaFamily):
    """The suite's tasks in the env: ``load("all")`` / ``load("edit-profile@out,add-to-cart")`` gives one Task
    per family (id ``suite/NAME``; "all" = every family, and may be combined: "all,edit-profile@out"); an
    episode's seed picks the concrete config (``task_config``). A new context per episode gets a fresh sandbox
    cookie and, when the config says ``require_login``, the cookies of its ``storage_state`` file; ``start``
    fills in the intent and the eval; exit() is scored by env's WebArena rubric (``env.evaluate``; "vab", or
    the env's WebArenaFamily's choice); results are grouped by suite family (``column``: "edit-profile@out")."""
    name = "suite"

    def load(self, body: str) -> list[Task]:
        names: list[str] = []
        for n in (n.strip() for n in (body or "all").split(",")):
            if n == "all":                               # every family (edit-profile with starts by seed)
                names += [f for f in FAMILIES if f not in names]
            elif n and n not in names:
                split_name(n)                            # a clear error for an unknown family
                names.append(n)
        base = base_url()
        # a family's start page is the same for every seed: its seed-0 config's (start() checks the episode's)
        return [Task(task_id=f"suite/{n}", site=SITE, intent="",
                     start_url=task_config(n, 0, base)["start_url"], eval={"type": "suite"},
                     family=self.name) for n in names]

    @staticmethod
    def config(task: Task) -> dict[str, Any]:
        """The concrete config of an episode of ``task`` (its family and seed; the task's own server URL)."""
        base = task.start_url.split("/", 3)
        return task_config(task.task_id.removeprefix("suite/"), task.seed, "/".join(base[:3]))

    async def setup_context(self, env: TaskEnv, context: Any, task: Task) -> None:
        cfg = self.config(task)
        base = cfg["start_url"].split("/", 3)
        origin = "/".join(base[:3])
        cookies = [{"name": SANDBOX_COOKIE, "value": new_sandbox(task.seed), "url": origin}]
        if cfg["require_login"] and cfg["storage_state"]:          # as WebArena: the config's storage state
            with open(cfg["storage_state"], encoding="utf-8") as f:
                cookies += json.load(f)["cookies"]
        await context.add_cookies(cookies)

    async def start(self, env: TaskEnv, page: Any, task: Task) -> Task:
        # env's own config check (the one WebArena configs go through) builds the concrete task
        concrete = webarena.webarena_task(self.config(task))
        if concrete.start_url != task.start_url:          # a seed with its own start page
            await page.goto(concrete.start_url, wait_until="domcontentloaded")
        return dataclasses.replace(task, intent=concrete.intent, eval=concrete.eval,
                                   require_login=concrete.require_login, storage_state=concrete.storage_state)

    async def score_exit(self, env: TaskEnv, page: Any, task: Task, message: str | None,
                         info: dict[str, Any]) -> float:
        """env.evaluate under this family's rubric; an env given no SuiteFamily of its own but a WebArenaFamily
        (eval.py / train_mgrpo.py ``--rubric``) scores suite tasks under that family's rubric too."""
        fam = self
        wa = env.families.get("webarena")
        if env.families.get(self.name) is not self and isinstance(wa, webarena.WebArenaFamily):
            fam = wa
        return float(await webarena_rubrics.evaluate(task, page, message, judge=env.judge, helpers=env.helpers,
                                                   rubric=fam.rubric, details=info.setdefault("eval", {})))

    def changes_state(self, task: Task) -> bool:
        """As WebArena's: a program_html check in the concrete config of the episode's seed."""
        return "program_html" in self.config(task)["eval"]["eval_types"]

    def column(self, task: Task) -> str:
        return task.task_id.removeprefix("suite/")

    def start_kinds(self, task: Task) -> tuple[str, ...]:
        """A family with logged-out starts, not forced to one (``@in`` / ``@out``): ("in", "out") by seed."""
        fam, start = split_name(self.column(task))
        return ("in", "out") if fam.login_starts and not start else ()

    def start_kind(self, task: Task) -> str:
        return "in" if starts_logged_in(self.column(task), task.seed) else "out"


register_family(SuiteFamily())


# ---- command line ----

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m env suite", description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8090, help="port to serve on (127.0.0.1)")
    ap.add_argument("--configs", default="", help="write concrete task configs (WebArena JSON) here and exit")
    ap.add_argument("--tasks", default="all", help="families for --configs: all, or NAME[,NAME...]")
    ap.add_argument("--split", choices=("train", "eval"), default="eval", help="seed range for --configs")
    ap.add_argument("--n", type=int, default=3, help="seeds per family for --configs")
    ap.add_argument("--shared", type=int, default=None, metavar="SEED",
                    help="shared-state mode: one database (the world of SEED) for everyone, reset by POST /__reset "
                         "(a replica for webarena_replicas.SitePool; --configs then writes that seed's configs)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.configs:
        names = list(FAMILIES) if args.tasks == "all" else args.tasks.split(",")
        seeds = DEMO_SEEDS if args.split == "train" else EVAL_SEEDS
        base = os.environ.get("SITESUITE_URL", f"http://127.0.0.1:{args.port}").rstrip("/")
        configs = ([task_config(n, args.shared, base, standalone=True) for n in names] if args.shared is not None
                   else [task_config(n, seeds[i], base, standalone=True) for n in names for i in range(args.n)])
        Path(args.configs).write_text(json.dumps(configs, indent=1))
        print(f"wrote {len(configs)} configs for {base} to {args.configs}")
        return 0
    server = SuiteServer(args.port, shared_seed=args.shared)
    mode = "" if args.shared is None else f", shared state of seed {args.shared} (POST /__reset resets it)"
    print(f"serving the site suite at {server.url}/ (log in as {ACCOUNT['username']} / {ACCOUNT['password']}"
          f"{mode}); Ctrl-C stops it", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0
