"""The site of the site suite (sitesuite.py holds its task families, the registered family "suite" and the
command line): a shop and a forum behind a login, served by a real HTTP server on 127.0.0.1 with a sqlite
database, the state of every trajectory its own. Standard library only; nothing here knows of tasks or rubrics.

What it implements
- The world of a seed (``world``, ``World``): the shop, orders, forum and profile a fresh sandbox of that seed
  holds, and the sqlite database built from it (``_build_db``); the task families pick their targets from it.
- The site (``SuiteServer``; ``python -m env suite --port 8090`` serves it by hand): ``/login``, ``/logout``,
  ``/shop`` (product table, search box, category / sort dropdowns, pagination), ``/product/ID`` (quantity
  dropdown, add to cart), ``/cart``, ``/checkout`` (shipping city, shipping method), ``/orders``,
  ``/orders/ID``, ``/forum`` (posts, pagination), ``/forum/post/ID``, ``/forum/new``, ``/profile``,
  ``/profile/edit``. Plain HTML forms, links and tables; no JavaScript. Every page but ``/login`` needs a
  login and redirects to ``/login?next=PATH`` without one.
- The default account (documented, the only one that can log in): username ``alex``, password ``suite1234``
  (``ACCOUNT``). The session cookie ``suite_session`` is signed, so one storage-state file logs every sandbox in.
- State isolated per trajectory: the cookie ``suite_sandbox=SEED.TOKEN`` selects a sandbox, an in-memory
  sqlite database copied on first use from the template of SEED (the seed's generated shop, orders, forum
  and profile). ``SuiteFamily.setup_context`` gives every episode's browser context a fresh TOKEN, so G
  trajectories of one task never see each other's writes, every episode starts from its seed's state, and
  URLs are the same for every episode (url_match works unchanged). The least recently used sandboxes are
  dropped beyond ``max_sandboxes`` (default 512). A browser without the cookie (a person) gets seed 0;
  ``/sandbox?seed=N&next=PATH`` opens a fresh sandbox of seed N (the start URL of standalone configs).
- The storage-state file of the default account (``storage_state_path``): the signed session cookie that the
  configs' ``require_login`` starts from.

Run:
    python -m env suite --port 8090          # serve by hand (sitesuite.py's command line; alex / suite1234)
    with suite_site.serve() as server: ...   # from Python: the site on a free port (server.url)
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import hmac
import html
import json
import logging
import os
import random
import re
import secrets
import sqlite3
import tempfile
import threading
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

log = logging.getLogger("webagent.sitesuite")

SITE = "suite"                                   # the config's "sites" entry and Task.site
ACCOUNT = {"username": "alex", "password": "suite1234"}   # the site's documented default account
SESSION_COOKIE = "suite_session"
SANDBOX_COOKIE = "suite_sandbox"
# The session cookie is "alex.<hmac>": signed with a fixed key, so it is valid in every sandbox and across
# server restarts (the storage-state file stays good). This is a local toy site, not a security boundary.
_SESSION_KEY = b"webagent-r1 sitesuite session"
PAGE_SIZE = 8                                     # rows per page of the product and post tables


# ---- the world of one seed: what the database of a fresh sandbox holds ----

CATEGORIES = ("Books", "Garden", "Kitchen", "Sports", "Toys")
_ADJECTIVES = ("Amber", "Blue", "Bright", "Classic", "Compact", "Cozy", "Deluxe", "Golden", "Green", "Handy",
               "Little", "Lucky", "Modern", "Quiet", "Rapid", "Royal", "Silver", "Simple", "Sunny", "Urban")
_NOUNS = {"Books": ("Atlas", "Cookbook", "Diary", "Novel", "Poetry Book", "Sketchbook"),
          "Garden": ("Planter", "Rake", "Seed Kit", "Trowel", "Watering Can", "Hose"),
          "Kitchen": ("Kettle", "Mug", "Pan", "Teapot", "Whisk", "Cutting Board"),
          "Sports": ("Ball", "Jump Rope", "Racket", "Yoga Mat", "Water Bottle", "Headband"),
          "Toys": ("Kite", "Puzzle", "Robot", "Teddy Bear", "Yo-Yo", "Train Set")}
USERS = ("maria", "kenji", "olga", "samir", "lena", "tomas", "ivy", "omar", "nadia", "pablo")
FORUMS = ("news", "help", "cooking", "games")
_TOPICS = ("bread baking", "chess openings", "city parks", "board games", "winter tires", "tea", "old maps",
           "jazz records", "home offices", "rainy days", "bike repair", "house plants", "night trains",
           "soup recipes", "puzzles", "street food", "camping", "podcasts", "sunrise photos", "knitting")
_TITLES = ("Tips for {t}", "Question about {t}", "My thoughts on {t}", "Looking for advice on {t}",
           "Best of {t} this week")
CITIES = ("Lisbon", "Oslo", "Denver", "Kyoto", "Nairobi", "Lima", "Dublin", "Perth", "Tallinn", "Quebec",
          "Porto", "Seville", "Graz", "Bergen", "Austin")
SHIPPING = ("Standard", "Express")
NEWSLETTER = ("weekly", "monthly", "never")
_BIOS = ("I like long walks.", "Coffee first, then code.", "Gardener and reader.", "Board game fan.",
         "Always learning.", "Cyclist in the city.", "Tea over coffee.", "Collector of old maps.")
_NAMES = ("Alex Kim", "Alex Moreno", "Alex Novak", "Alex Okafor", "Alex Berg", "Alex Silva", "Alex Tanaka")


@dataclass
class World:
    """The generated content of one seed, e.g. ``world(3).products[0] == {"id": 1, "name": "Blue Kettle",
    "category": "Kitchen", "price": 1299}`` (prices in cents). Task families read it to pick their targets;
    ``_build_db`` writes it into a sandbox's sqlite database."""
    seed: int
    products: list[dict]
    orders: list[dict]            # {"id", "date", "ship_to", "shipping", "items": [(product_id, qty)]}
    posts: list[dict]             # {"id", "forum", "author", "title", "body", "date"}, oldest first
    profile: dict                 # {"display_name", "location", "bio", "newsletter"} of the default account


@functools.lru_cache(maxsize=64)
def world(seed: int) -> World:
    """The content of seed ``seed`` (deterministic across runs and processes)."""
    rng = random.Random(f"sitesuite-world-{seed}")
    names = sorted({f"{a} {n}" for a in _ADJECTIVES for c in CATEGORIES for n in _NOUNS[c]})
    category = {f"{a} {n}": c for a in _ADJECTIVES for c in CATEGORIES for n in _NOUNS[c]}
    picked = sorted(rng.sample(names, 30))
    products = [{"id": i + 1, "name": n, "category": category[n], "price": rng.randrange(199, 9999)}
                for i, n in enumerate(picked)]
    orders = []
    for k in range(rng.randint(4, 6)):
        items = rng.sample(range(1, len(products) + 1), rng.randint(1, 3))
        orders.append({"id": 1001 + k, "date": f"2024-{1 + 2 * k:02d}-{rng.randint(1, 28):02d}",
                       "ship_to": rng.choice(CITIES), "shipping": rng.choice(SHIPPING),
                       "items": [(p, rng.randint(1, 3)) for p in items]})
    titles = rng.sample([t.format(t=topic) for t in _TITLES for topic in _TOPICS], 20)
    posts = [{"id": i + 1, "forum": rng.choice(FORUMS), "author": rng.choice(USERS), "title": title,
              "body": f"A few words about {title.split(' ', 2)[-1].lower()}. What do you think?",
              "date": f"2024-{1 + i // 2:02d}-{rng.randint(1, 28):02d}"} for i, title in enumerate(titles)]
    profile = {"display_name": rng.choice(_NAMES), "location": rng.choice(CITIES), "bio": rng.choice(_BIOS),
               "newsletter": rng.choice(NEWSLETTER)}
    if profile["newsletter"] == "never":          # every account starts subscribed (stop-newsletter has work to do)
        profile["newsletter"] = "monthly"
    return World(seed, products, orders, posts, profile)


_SCHEMA = """
CREATE TABLE users (username TEXT PRIMARY KEY, password TEXT, display_name TEXT, location TEXT, bio TEXT,
                    newsletter TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT UNIQUE, category TEXT, price INTEGER);
CREATE TABLE cart (username TEXT, product_id INTEGER, qty INTEGER, PRIMARY KEY (username, product_id));
CREATE TABLE orders (id INTEGER PRIMARY KEY, username TEXT, date TEXT, ship_to TEXT, shipping TEXT);
CREATE TABLE order_items (order_id INTEGER, product_id INTEGER, qty INTEGER, price INTEGER);
CREATE TABLE posts (id INTEGER PRIMARY KEY, forum TEXT, author TEXT, title TEXT, body TEXT, date TEXT);
"""


def _build_db(w: World) -> sqlite3.Connection:
    """A fresh in-memory database holding world ``w``: the template that sandboxes of its seed copy."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript(_SCHEMA)
    p = w.profile
    db.execute("INSERT INTO users VALUES (?,?,?,?,?,?)", (ACCOUNT["username"], ACCOUNT["password"],
                                                          p["display_name"], p["location"], p["bio"], p["newsletter"]))
    db.executemany("INSERT INTO users VALUES (?,?,?,?,?,?)",
                   [(u, secrets.token_hex(8), u.title(), "", "", "never") for u in USERS])   # nobody can log in as them
    db.executemany("INSERT INTO products VALUES (:id,:name,:category,:price)", w.products)
    price = {p["id"]: p["price"] for p in w.products}
    for o in w.orders:
        db.execute("INSERT INTO orders VALUES (?,?,?,?,?)", (o["id"], ACCOUNT["username"], o["date"], o["ship_to"],
                                                             o["shipping"]))
        db.executemany("INSERT INTO order_items VALUES (?,?,?,?)",
                       [(o["id"], pid, q, price[pid]) for pid, q in o["items"]])
    db.executemany("INSERT INTO posts VALUES (:id,:forum,:author,:title,:body,:date)", w.posts)
    db.commit()
    return db


# ---- sandboxes: one database per trajectory ----

_SANDBOX_RE = re.compile(r"^(\d{1,9})\.([0-9a-f]{8,64})$")


class Sandboxes:
    """Per-trajectory databases keyed by the sandbox cookie ``SEED.TOKEN``: created on first use as a copy of
    the seed's template (sqlite's backup API, ~1 ms), dropped least recently used beyond ``max_sandboxes``."""

    def __init__(self, max_sandboxes: int = 512, max_templates: int = 64, shared_seed: int | None = None) -> None:
        self.max_sandboxes, self.max_templates = max_sandboxes, max_templates
        self.shared_seed = shared_seed
        self.resets = 0
        self._lock = threading.Lock()
        self._boxes: collections.OrderedDict[str, tuple[sqlite3.Connection, threading.Lock]] = collections.OrderedDict()
        self._templates: collections.OrderedDict[int, sqlite3.Connection] = collections.OrderedDict()
        self._shared: tuple[sqlite3.Connection, threading.Lock] | None = None
        if shared_seed is not None:
            self.reset()

    def __len__(self) -> int:
        return len(self._boxes)

    def reset(self) -> None:
        """Shared mode: the one database back to the seed's world (what a WebArena container restart does)."""
        if self.shared_seed is None:
            raise ValueError("only a shared-state server resets (its sandboxes are fresh per episode)")
        db = sqlite3.connect(":memory:", check_same_thread=False)
        _build_db(world(self.shared_seed)).backup(db)
        with self._lock:
            old, self._shared = self._shared, (db, threading.Lock())
            self.resets += int(old is not None)
        if old is not None:
            with old[1]:                  # a request in flight on the old database finishes first
                old[0].close()

    def get(self, key: str) -> tuple[sqlite3.Connection, threading.Lock]:
        """The database of sandbox ``key`` ("SEED.TOKEN") and the lock that serialises its requests; in shared
        mode the one database, whatever the key (as a real WebArena site: one state for every visitor)."""
        if self._shared is not None:
            return self._shared
        m = _SANDBOX_RE.match(key)
        if not m:
            raise ValueError(f"malformed sandbox {key!r} (expected SEED.HEXTOKEN)")
        with self._lock:
            box = self._boxes.get(key)
            if box is not None:
                self._boxes.move_to_end(key)
                return box
            seed = int(m.group(1))
            template = self._templates.get(seed)
            if template is None:
                template = self._templates[seed] = _build_db(world(seed))
                while len(self._templates) > self.max_templates:
                    self._templates.popitem(last=False)[1].close()
            else:
                self._templates.move_to_end(seed)
            db = sqlite3.connect(":memory:", check_same_thread=False)
            template.backup(db)
            box = self._boxes[key] = (db, threading.Lock())
            while len(self._boxes) > self.max_sandboxes:      # an old episode's sandbox: nobody uses it now
                self._boxes.popitem(last=False)
            return box


def new_sandbox(seed: int) -> str:
    """A fresh sandbox cookie value for an episode of seed ``seed``, e.g. ``"1000003.9f2c..."``."""
    if not 0 <= seed < 10 ** 9:
        raise ValueError(f"sandbox seeds are 0 .. 999,999,999, got {seed}")
    return f"{seed}.{secrets.token_hex(12)}"


def session_token(username: str) -> str:
    """The signed session cookie value of ``username``."""
    sig = hmac.new(_SESSION_KEY, username.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{username}.{sig}"


def _session_user(token: str | None) -> str | None:
    if not token or "." not in token:
        return None
    user = token.rsplit(".", 1)[0]
    return user if hmac.compare_digest(session_token(user), token) else None


# ---- pages ----

_CSS = ("body{font:14px sans-serif;margin:8px 16px}nav a{margin-right:10px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}form{margin:6px 0}.err{color:#b00}"
        "h1{font-size:20px;margin:8px 0}")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _money(cents: int) -> str:
    return f"{cents / 100:.2f}"


def _layout(title: str, body: str, user: str | None, cart_n: int = 0) -> str:
    """One page: the navigation bar (signed in) and the body."""
    nav = ""
    if user:
        nav = (f'<nav><a href="/shop">Shop</a><a href="/cart">Cart ({cart_n})</a><a href="/orders">Orders</a>'
               f'<a href="/forum">Forum</a><a href="/profile">Profile</a><a href="/logout">Log out</a>'
               f'<span>Signed in as {_e(user)}</span></nav>')
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)} - Suite</title>"
            f"<style>{_CSS}</style></head><body>{nav}<h1>{_e(title)}</h1>{body}</body></html>")


def _options(values: list[tuple[str, str]], selected: str) -> str:
    return "".join(f'<option value="{_e(v)}"{" selected" if v == selected else ""}>{_e(t)}</option>'
                   for v, t in values)


def _pager(path: str, query: dict[str, str], page: int, pages: int) -> str:
    """'Page 2 of 4' with Previous / Next links that keep the other query parameters."""
    def link(p: int, text: str) -> str:
        q = {k: v for k, v in query.items() if v and k != "page"}
        if p > 1:
            q["page"] = str(p)
        return f'<a href="{_e(path + ("?" + urllib.parse.urlencode(q) if q else ""))}">{text}</a>'
    parts = [link(page - 1, "Previous")] if page > 1 else []
    parts.append(f"<span>Page {page} of {pages}</span>")
    if page < pages:
        parts.append(link(page + 1, "Next"))
    return "<p>" + " ".join(parts) + "</p>"


@dataclass
class Response:
    status: int = 200
    body: str = ""
    location: str | None = None
    cookies: list[str] = dataclasses.field(default_factory=list)   # Set-Cookie header values


def _redirect(location: str, cookies: list[str] | None = None) -> Response:
    return Response(303, "", location, cookies or [])


def _safe_next(value: str) -> str:
    """A local path to go to after logging in (never another site)."""
    return value if value.startswith("/") and not value.startswith("//") and "\\" not in value else "/shop"


class Site:
    """The request logic on one sandbox database: ``Site(db, user).handle(method, path, query, form)``."""

    def __init__(self, db: sqlite3.Connection, user: str | None) -> None:
        self.db, self.user = db, user

    def q(self, sql: str, *args: Any) -> list[tuple]:
        return self.db.execute(sql, args).fetchall()

    def page(self, title: str, body: str) -> Response:
        n = self.q("SELECT COALESCE(SUM(qty), 0) FROM cart WHERE username=?", self.user)[0][0]
        return Response(200, _layout(title, body, self.user, n))

    def not_found(self, what: str = "page") -> Response:
        return Response(404, _layout("Not found", f"<p>No such {_e(what)}.</p>", self.user))

    def handle(self, method: str, path: str, query: dict[str, str], form: dict[str, str]) -> Response:
        if path == "/login":
            return self.login(method, query, form)
        if path == "/logout":
            return _redirect("/login", [f"{SESSION_COOKIE}=; Path=/; Max-Age=0"])
        if self.user is None:                                   # every other page needs a login
            full = path + ("?" + urllib.parse.urlencode(query) if query else "")
            return _redirect("/login?" + urllib.parse.urlencode({"next": full}))
        routes: list[tuple[str, Callable[..., Response]]] = [
            (r"/", lambda: _redirect("/shop")), (r"/shop", lambda: self.shop(query)),
            (r"/product/(\d+)", lambda i: self.product(int(i))), (r"/cart", lambda: self.cart()),
            (r"/cart/add", lambda: self.cart_add(method, form)), (r"/checkout", lambda: self.checkout(method, form)),
            (r"/orders", lambda: self.orders()), (r"/orders/(\d+)", lambda i: self.order(int(i))),
            (r"/forum", lambda: self.forum(query)), (r"/forum/post/(\d+)", lambda i: self.post(int(i))),
            (r"/forum/new", lambda: self.new_post(method, form)), (r"/profile", lambda: self.profile()),
            (r"/profile/edit", lambda: self.edit_profile(method, form))]
        for pattern, fn in routes:
            m = re.fullmatch(pattern, path)
            if m:
                return fn(*m.groups())
        return self.not_found()

    # -- account --

    def login(self, method: str, query: dict[str, str], form: dict[str, str]) -> Response:
        nxt = _safe_next(form.get("next") or query.get("next") or "/shop")
        error = ""
        if method == "POST":
            row = self.q("SELECT password FROM users WHERE username=?", form.get("username", ""))
            if row and hmac.compare_digest(row[0][0], form.get("password", "")):
                token = session_token(form["username"])
                return _redirect(nxt, [f"{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax"])
            error = '<p class="err">Wrong username or password.</p>'
        body = (f'{error}<form id="login-form" method="post" action="/login">'
                f'<input type="hidden" name="next" value="{_e(nxt)}">'
                f'<p><label>Username <input name="username" placeholder="Username"></label></p>'
                f'<p><label>Password <input name="password" type="password" placeholder="Password"></label></p>'
                f'<button type="submit">Log in</button></form>')
        return Response(200, _layout("Log in", body, None))

    def profile(self) -> Response:
        name, loc, bio, news = self.q("SELECT display_name, location, bio, newsletter FROM users WHERE username=?",
                                      self.user)[0]
        rows = [("Username", "profile-username", self.user), ("Display name", "profile-display-name", name),
                ("Location", "profile-location", loc), ("Bio", "profile-bio", bio),
                ("Newsletter", "profile-newsletter", news)]
        table = "".join(f'<tr><th>{k}</th><td id="{i}">{_e(v)}</td></tr>' for k, i, v in rows)
        return self.page("Profile", f'<table>{table}</table><p><a href="/profile/edit">Edit profile</a></p>')

    def edit_profile(self, method: str, form: dict[str, str]) -> Response:
        if method == "POST":
            news = form.get("newsletter", "never")
            if news not in NEWSLETTER:
                return Response(400, _layout("Bad request", "<p>Unknown newsletter option.</p>", self.user))
            self.db.execute("UPDATE users SET display_name=?, location=?, bio=?, newsletter=? WHERE username=?",
                            (form.get("display_name", "")[:100], form.get("location", "")[:100],
                             form.get("bio", "")[:300], news, self.user))
            self.db.commit()
            return _redirect("/profile")
        name, loc, bio, news = self.q("SELECT display_name, location, bio, newsletter FROM users WHERE username=?",
                                      self.user)[0]
        body = (f'<form method="post" action="/profile/edit">'
                f'<p><label>Display name <input name="display_name" value="{_e(name)}"></label></p>'
                f'<p><label>Location <input name="location" value="{_e(loc)}"></label></p>'
                f'<p><label>Bio <textarea name="bio" rows="2">{_e(bio)}</textarea></label></p>'
                f'<p><label>Newsletter <select name="newsletter">{_options([(n, n) for n in NEWSLETTER], news)}'
                f'</select></label></p><button type="submit">Save</button></form>')
        return self.page("Edit profile", body)

    # -- shop --

    def shop(self, query: dict[str, str]) -> Response:
        text, cat, sort = query.get("q", "").strip(), query.get("category", ""), query.get("sort", "name")
        where, args = ["1=1"], []
        if text:
            where.append("LOWER(name) LIKE ?")
            args.append(f"%{text.lower()}%")
        if cat:
            where.append("LOWER(category)=?")
            args.append(cat.lower())
        order = {"price_asc": "price, name", "price_desc": "price DESC, name"}.get(sort, "name")
        rows = self.q(f"SELECT id, name, category, price FROM products WHERE {' AND '.join(where)} ORDER BY {order}",
                      *args)
        pages = max(1, -(-len(rows) // PAGE_SIZE))
        page = min(max(1, int(query["page"]) if query.get("page", "").isdigit() else 1), pages)
        shown = rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        cats = [("", "All categories")] + [(c.lower(), c) for c in CATEGORIES]
        sorts = [("name", "Name"), ("price_asc", "Price: low to high"), ("price_desc", "Price: high to low")]
        body = (f'<form action="/shop" method="get"><input type="search" name="q" value="{_e(text)}" '
                f'placeholder="Search products"> <button type="submit">Search</button></form>'
                f'<form action="/shop" method="get"><select name="category">{_options(cats, cat.lower())}</select> '
                f'<select name="sort">{_options(sorts, sort)}</select> <button type="submit">Filter</button></form>')
        if shown:
            body += ("<table><tr><th>Product</th><th>Category</th><th>Price</th></tr>" + "".join(
                f'<tr><td><a href="/product/{i}">{_e(n)}</a></td><td>{_e(c)}</td><td>{_money(p)}</td></tr>'
                for i, n, c, p in shown) + "</table>")
            body += _pager("/shop", query, page, pages)
        else:
            body += "<p>No products match.</p>"
        return self.page("Shop", body)

    def product(self, pid: int) -> Response:
        row = self.q("SELECT name, category, price FROM products WHERE id=?", pid)
        if not row:
            return self.not_found("product")
        name, cat, price = row[0]
        body = (f'<p>Category: {_e(cat)}</p><p>Price: {_money(price)}</p>'
                f'<form method="post" action="/cart/add"><input type="hidden" name="product_id" value="{pid}">'
                f'<label>Quantity <select name="qty">{_options([(str(k), str(k)) for k in range(1, 6)], "1")}'
                f'</select></label> <button type="submit">Add to cart</button></form>')
        return self.page(name, body)

    def cart_add(self, method: str, form: dict[str, str]) -> Response:
        if method != "POST":
            return _redirect("/cart")
        pid, qty = form.get("product_id", ""), form.get("qty", "1")
        known = pid.isdigit() and bool(self.q("SELECT 1 FROM products WHERE id=?", int(pid)))
        if not (known and qty.isdigit() and 1 <= int(qty) <= 5):
            return Response(400, _layout("Bad request", "<p>Unknown product or quantity.</p>", self.user))
        self.db.execute("INSERT INTO cart VALUES (?,?,?) ON CONFLICT (username, product_id) "
                        "DO UPDATE SET qty = qty + ?", (self.user, int(pid), int(qty), int(qty)))
        self.db.commit()
        return _redirect("/cart")

    def _cart_rows(self) -> list[tuple]:
        return self.q("SELECT p.id, p.name, c.qty, p.price FROM cart c JOIN products p ON p.id = c.product_id "
                      "WHERE c.username=? ORDER BY p.name", self.user)

    def cart(self) -> Response:
        rows = self._cart_rows()
        if not rows:
            return self.page("Cart", '<p id="cart-empty">Your cart is empty.</p>')
        body = ('<table id="cart-items"><tr><th>Product</th><th>Quantity</th><th>Price</th></tr>' + "".join(
            f'<tr data-name="{_e(n)}" data-qty="{q}"><td>{_e(n)}</td><td>{q}</td><td>{_money(p * q)}</td></tr>'
            for _, n, q, p in rows) + "</table>")
        body += (f'<p>Total: {_money(sum(q * p for _, _, q, p in rows))}</p>'
                 '<p><a href="/checkout">Proceed to checkout</a></p>')
        return self.page("Cart", body)

    def checkout(self, method: str, form: dict[str, str]) -> Response:
        rows = self._cart_rows()
        if not rows:
            return self.page("Checkout", '<p>Your cart is empty.</p>')
        if method == "POST":
            city, ship = form.get("ship_to", "").strip()[:100], form.get("shipping", "")
            if not city or ship not in SHIPPING:
                return self.page("Checkout", '<p class="err">Enter a city and choose a shipping method.</p>'
                                 + self._checkout_form())
            oid = self.q("SELECT COALESCE(MAX(id), 1000) + 1 FROM orders")[0][0]
            self.db.execute("INSERT INTO orders VALUES (?,?,?,?,?)", (oid, self.user, "2024-12-24", city, ship))
            self.db.executemany("INSERT INTO order_items VALUES (?,?,?,?)", [(oid, pid, q, p) for pid, _, q, p in rows])
            self.db.execute("DELETE FROM cart WHERE username=?", (self.user,))
            self.db.commit()
            return _redirect(f"/orders/{oid}")
        items = ", ".join(f"{n} x {q}" for _, n, q, _ in rows)
        return self.page("Checkout", f"<p>Items: {_e(items)}</p>" + self._checkout_form())

    def _checkout_form(self) -> str:
        ship = _options([("", "Choose...")] + [(s, s) for s in SHIPPING], "")
        return ('<form method="post" action="/checkout"><p><label>Ship to city <input name="ship_to" '
                'placeholder="City"></label></p><p><label>Shipping <select name="shipping">' + ship +
                '</select></label></p><button type="submit">Place order</button></form>')

    def orders(self) -> Response:
        rows = self.q("SELECT o.id, o.date, SUM(i.qty), SUM(i.qty * i.price) FROM orders o JOIN order_items i "
                      "ON i.order_id = o.id WHERE o.username=? GROUP BY o.id ORDER BY o.id DESC", self.user)
        body = ("<table><tr><th>Order</th><th>Date</th><th>Items</th><th>Total</th></tr>" + "".join(
            f'<tr><td><a href="/orders/{i}">Order #{i}</a></td><td>{d}</td><td>{n}</td><td>{_money(t)}</td></tr>'
            for i, d, n, t in rows) + "</table>") if rows else "<p>No orders yet.</p>"
        return self.page("Orders", body)

    def order(self, oid: int) -> Response:
        head = self.q("SELECT date, ship_to, shipping FROM orders WHERE id=? AND username=?", oid, self.user)
        if not head:
            return self.not_found("order")
        date, city, ship = head[0]
        items = self.q("SELECT p.name, i.qty, i.price FROM order_items i JOIN products p ON p.id = i.product_id "
                       "WHERE i.order_id=? ORDER BY p.name", oid)
        body = (f'<div id="order-summary"><p>Date: {date}</p><p>Ship to: {_e(city)}</p><p>Shipping: {_e(ship)}</p>'
                '<table><tr><th>Product</th><th>Quantity</th><th>Price</th></tr>' + "".join(
                    f"<tr><td>{_e(n)}</td><td>{q}</td><td>{_money(p * q)}</td></tr>" for n, q, p in items)
                + f'</table><p>Total: {_money(sum(q * p for _, q, p in items))}</p></div>')
        return self.page(f"Order #{oid}", body)

    # -- forum --

    def forum(self, query: dict[str, str]) -> Response:
        rows = self.q("SELECT id, title, forum, author, date FROM posts ORDER BY id DESC")
        pages = max(1, -(-len(rows) // PAGE_SIZE))
        page = min(max(1, int(query["page"]) if query.get("page", "").isdigit() else 1), pages)
        shown = rows[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        body = ('<p><a href="/forum/new">New post</a></p><table><tr><th>Title</th><th>Forum</th><th>Author</th>'
                '<th>Date</th></tr>' + "".join(
                    f'<tr><td><a href="/forum/post/{i}">{_e(t)}</a></td><td>{_e(f)}</td><td>{_e(a)}</td>'
                    f'<td>{d}</td></tr>'
                    for i, t, f, a, d in shown) + "</table>" + _pager("/forum", query, page, pages))
        return self.page("Forum", body)

    def post(self, pid: int) -> Response:
        row = self.q("SELECT title, forum, author, body, date FROM posts WHERE id=?", pid)
        if not row:
            return self.not_found("post")
        title, forum, author, text, date = row[0]
        body = (f'<p>In <span id="post-forum">{_e(forum)}</span> by <span id="post-author">{_e(author)}</span>'
                f' on {date}</p><p id="post-body">{_e(text)}</p><p><a href="/forum">Back to the forum</a></p>')
        return Response(200, _layout(title, body, self.user, self._cart_n()).replace(
            "<h1>", '<h1 id="post-title">', 1))

    def _cart_n(self) -> int:
        return self.q("SELECT COALESCE(SUM(qty), 0) FROM cart WHERE username=?", self.user)[0][0]

    def new_post(self, method: str, form: dict[str, str]) -> Response:
        error = ""
        if method == "POST":
            forum, title = form.get("forum", ""), form.get("title", "").strip()[:200]
            text = form.get("body", "").strip()[:2000]
            if forum in FORUMS and title and text:
                cur = self.db.execute("INSERT INTO posts (forum, author, title, body, date) VALUES (?,?,?,?,?)",
                                      (forum, self.user, title, text, "2024-12-24"))
                self.db.commit()
                return _redirect(f"/forum/post/{cur.lastrowid}")
            error = '<p class="err">Choose a forum and fill in the title and the text.</p>'
        opts = _options([("", "Choose a forum...")] + [(f, f) for f in FORUMS], "")
        body = (f'{error}<form method="post" action="/forum/new"><p><label>Forum <select name="forum">{opts}</select>'
                f'</label></p><p><label>Title <input name="title" placeholder="Title"></label></p>'
                f'<p><label>Text <textarea name="body" rows="3" placeholder="Text"></textarea></label></p>'
                f'<button type="submit">Submit</button></form>')
        return self.page("New post", body)


# ---- the HTTP server ----

class _Handler(BaseHTTPRequestHandler):
    """Parses the request, picks the sandbox (cookie) and the user (session cookie), runs Site.handle."""
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, fmt: str, *args: Any) -> None:      # quiet: one line per request at debug level
        log.debug("%s " + fmt, self.address_string(), *args)

    def _cookies(self) -> dict[str, str]:
        jar = SimpleCookie()
        try:
            jar.load(self.headers.get("Cookie", ""))
        except CookieError:
            return {}
        return {k: m.value for k, m in jar.items()}

    def _serve(self, method: str) -> None:
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        form: dict[str, str] = {}
        if method == "POST":
            length = self.headers.get("Content-Length") or "0"
            if not length.isdigit() or int(length) > 100_000:
                self._send(Response(413 if length.isdigit() else 400, "bad or too large Content-Length"))
                return
            form = dict(urllib.parse.parse_qsl(self.rfile.read(int(length)).decode("utf-8", "replace")))
        if parts.path == "/__reset" and self.server.sandboxes.shared_seed is not None:
            if method != "POST":
                self._send(Response(405, "POST to reset"))
                return
            self.server.sandboxes.reset()          # a replica's reset (webarena_replicas.SitePool), as a restart would
            log.info("reset to the world of seed %d (reset #%d)", self.server.sandboxes.shared_seed,
                     self.server.sandboxes.resets)
            self._send(Response(200, "reset"))
            return
        cookies = self._cookies()
        set_cookies = []
        if parts.path == "/sandbox":            # a fresh sandbox of ?seed=N, then ?next= (standalone configs)
            seed = query.get("seed", "0")
            if not seed.isdigit() or len(seed) > 9:
                self._send(Response(400, "seed must be an integer 0 .. 999999999"))
                return
            cookie = f"{SANDBOX_COOKIE}={new_sandbox(int(seed))}; Path=/; SameSite=Lax"
            self._send(_redirect(_safe_next(query.get("next", "/")), [cookie]))
            return
        key = cookies.get(SANDBOX_COOKIE, "")
        if not _SANDBOX_RE.match(key):          # a person's browser without a sandbox: seed 0, its own copy
            key = new_sandbox(0)
            set_cookies.append(f"{SANDBOX_COOKIE}={key}; Path=/; SameSite=Lax")
        db, lock = self.server.sandboxes.get(key)
        with lock:
            try:
                resp = Site(db, _session_user(cookies.get(SESSION_COOKIE))).handle(method, parts.path, query, form)
            except Exception:                   # a bug in a page: a 500 page and a logged traceback, not a hang
                log.exception("sitesuite: %s %s failed", method, self.path)
                resp = Response(500, _layout("Server error", "<p>Something went wrong.</p>", None))
        resp.cookies = set_cookies + resp.cookies
        self._send(resp)

    def _send(self, resp: Response) -> None:
        data = resp.body.encode()
        self.send_response(resp.status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if resp.location:
            self.send_header("Location", resp.location)
        for c in resp.cookies:
            self.send_header("Set-Cookie", c)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    sandboxes: Sandboxes


class SuiteServer:
    """The site on 127.0.0.1 in a background thread, e.g. ``with SuiteServer() as s: print(s.url)``
    (port 0 = a free one). ``url`` has no trailing slash.

    ``shared_seed``: the shared-state mode. One database, the world of that seed, for every visitor, as a real
    WebArena site has (episodes can then corrupt each other's rewards), reset to that world by ``POST
    /__reset``: what several replicas of a site leased per trajectory need (``webarena_replicas.SitePool``)."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1", max_sandboxes: int = 512,
                 shared_seed: int | None = None) -> None:
        self.httpd = _Server((host, port), _Handler)
        self.httpd.sandboxes = Sandboxes(max_sandboxes, shared_seed=shared_seed)
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        self._thread: threading.Thread | None = None

    @property
    def sandboxes(self) -> Sandboxes:
        return self.httpd.sandboxes

    def start(self) -> "SuiteServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="sitesuite", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "SuiteServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextmanager
def serve(port: int = 0) -> Iterator[SuiteServer]:
    """``with sitesuite.serve() as server: ...``: the site on a free port for the block's duration."""
    with SuiteServer(port) as server:
        yield server


_shared: SuiteServer | None = None
_shared_lock = threading.Lock()


def base_url() -> str:
    """The URL the suite's tasks use: $SITESUITE_URL (a server started by hand), else this process's own
    server, started on first use (a daemon thread on a free port)."""
    global _shared
    url = os.environ.get("SITESUITE_URL", "").strip().rstrip("/")
    if url:
        return url
    with _shared_lock:
        if _shared is None:
            _shared = SuiteServer().start()
            log.info("sitesuite serving at %s", _shared.url)
        return _shared.url


# ---- storage state: the default account's login, as WebArena's configs name it ----

def auth_dir() -> Path:
    """Where the storage-state file lives: $SITESUITE_AUTH_DIR, else <tmp>/webagent-sitesuite."""
    return Path(os.environ.get("SITESUITE_AUTH_DIR") or Path(tempfile.gettempdir()) / "webagent-sitesuite")


def storage_state_path() -> str:
    """The Playwright storage-state file of the default account (written on first use): one session cookie
    for 127.0.0.1 (cookies ignore ports, so it holds for any port of the suite)."""
    path = auth_dir() / "suite_state.json"
    state = {"cookies": [{"name": SESSION_COOKIE, "value": session_token(ACCOUNT["username"]), "domain": "127.0.0.1",
                          "path": "/", "expires": -1, "httpOnly": True, "secure": False, "sameSite": "Lax"}],
             "origins": []}
    try:
        if json.loads(path.read_text()) == state:
            return str(path)
    except (OSError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, path)
    return str(path)
