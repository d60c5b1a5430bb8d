"""The WebArena sites' stand-ins for tests/test_webarena.py: one tiny web site to log in, log out, a profile page
that needs a login, and a form that edits the profile name. State lives on the server (users, sessions, orders, reviews, project
members), so a program_html check can verify an edit from a fresh page of the same browser context.

Pages: ``/`` (home, links), ``/login`` (GET form, POST sets the ``session`` cookie), ``/logout``
(ends the session, redirects to ``/login?logged_out=1``), ``/profile`` (name and email; redirects to
``/login?next=/profile`` without a session), ``/profile/edit`` (GET form, POST saves then redirects to
``/profile?saved=1``), ``/api/profile?user=alice`` (JSON, for helper functions in tests).

It also stands in for the four WebArena sites that have logins, each with its own session cookie and
the pages, fields and APIs that WebArena's auto_login.py and helper functions use (their default
accounts are users here). Point WA_SHOPPING, WA_REDDIT, WA_GITLAB at the site's URL and
WA_SHOPPING_ADMIN at URL + "/admin":

- reddit (Postmill): ``/login`` above (labels Username / Password, button "Log in"),
  ``/user/NAME/account`` (needs the login; has "Delete account"), posts ``/f/FORUM/ID/SLUG`` and
  comment pages ``/f/FORUM/ID/-/comment/CID`` (the post's text, in ``.submission__inner``, is only on the
  post's page).
- shopping (Magento storefront, cookie ``shop_session``): ``/customer/account/login/`` (labels Email /
  Password, button "Sign In"), ``/wishlist/`` and ``/sales/order/view/order_id/N/`` (need the login;
  the items in ``.order-details-items.ordered``), product pages ``/SKU.html`` with a review form.
- Magento's REST API (bearer token): ``POST /rest/default/V1/integration/admin/token``,
  ``GET /rest/V1/orders`` (searchCriteria sortOrders / pageSize), ``GET /rest/V1/products/SKU/reviews``.
- shopping_admin (Magento admin under ``/admin``, cookie ``admin_session``): the sign-in form at every
  admin URL (placeholders "user name" / "password", button "Sign in"), ``/admin/dashboard``.
- gitlab (cookie ``_gitlab_session``): ``/users/sign_in`` (data-testid username-field, password-field,
  sign-in-button), ``/-/profile`` (needs the login), ``/NS/PROJECT/-/project_members`` (the members
  table GitLab renders: ``td[data-label='Account'] span.gl-avatar-labeled-sublabel`` = "@user",
  ``td.col-max-role span`` = the role).

Why not the site suite (env/suite_site.py): that is a shop and forum of its own, with its own sign-in page and
account, for training and evaluating agents; these tests check the WebArena family against the real sites' sign-in
forms, cookies, admin token API and member tables (what WebArena's auto_login.py and helper functions touch),
which the suite does not imitate and should not grow for tests' sake.

Standard library only: a ThreadingHTTPServer on 127.0.0.1 with an ephemeral port.
Run by hand: ``python tests/webarena_sites.py`` prints the URL and serves until Ctrl-C.
"""
from __future__ import annotations

import copy
import html
import json
import re
import secrets
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USERS = {
    "alice": {"password": "wonderland", "name": "Alice Liddell", "email": "alice@example.com"},
    "bob": {"password": "builder", "name": "Bob Builder", "email": "bob@example.com"},
    "MarvelsGrantMan136": {"password": "test1234", "name": "Marvel", "email": "marvel@example.com"},  # reddit
}
COOKIE = "session"
# WebArena's sites: session cookie names, default accounts (browser_env/env_config.py) and some content
COOKIES = {"shop": "shop_session", "admin": "admin_session", "gitlab": "_gitlab_session"}
ACCOUNTS = {"shop": {"emma.lopez@gmail.com": "Password.123"}, "admin": {"admin": "admin1234"},
            "gitlab": {"byteblaze": "hello1234"}}
PRODUCTS = {"B07DFJ5XKH": "Ugreen USB Hub", "B00J8RZL7I": "Nivea Lip Balm", "B0041MSF2S": "Tide Pods"}
ORDERS = [  # not in date order: the latest order is the one created last, not the last one listed
    {"increment_id": "000000148", "created_at": "2023-01-10 09:00:00", "items": [("B00J8RZL7I", 2)]},
    {"increment_id": "000000170", "created_at": "2023-05-02 18:30:00", "items": [("B0041MSF2S", 1)]},
    {"increment_id": "000000160", "created_at": "2023-03-01 12:00:00", "items": [("B07DFJ5XKH", 1)]},
]
REVIEWS = {  # oldest first, as Magento's reviews API lists them
    "B00J8RZL7I": [{"id": 1, "nickname": "Jane", "title": "Nice", "detail": "Soft lips.",
                    "ratings": [{"rating_name": "Rating", "percent": 60, "value": 3}]}],
    "B07DFJ5XKH": [], "B0041MSF2S": []}
POSTS = {7: {"forum": "consoles", "title": "What is the recommended console to buy these days",
             "body": "PS5 or Switch?", "comments": {3: "Switch, for the games."}}}
MEMBERS = {"byteblaze/dotfiles": [("byteblaze", "Byte Blaze", "Owner"), ("yjlou", "Yi-Jun Lou", "Developer")]}


class Site:
    """The server and its state, e.g. ``site = Site(); url = site.start(); ...; site.stop()``.
    ``site.reset()`` restores the users and drops every session."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users: dict[str, dict[str, str]] = {}
        self.sessions: dict[str, str] = {}          # token -> username
        self.logins: dict[str, dict[str, str]] = {}  # site ("shop", "admin", "gitlab") -> token -> account
        self.tokens: set[str] = set()                # Magento REST admin tokens
        self.orders: list[dict] = []
        self.reviews: dict[str, list[dict]] = {}
        self.members: dict[str, list[tuple[str, str, str]]] = {}
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.url = ""
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.users = copy.deepcopy(USERS)
            self.sessions = {}
            self.logins = {kind: {} for kind in COOKIES}
            self.tokens = set()
            self.orders = copy.deepcopy(ORDERS)
            self.reviews = copy.deepcopy(REVIEWS)
            self.members = copy.deepcopy(MEMBERS)

    def place_order(self, items: list[tuple[str, int]]) -> str:
        """Add an order of (sku, qty) items created now; returns its increment id, e.g. "000000171"."""
        with self.lock:
            n = max(int(o["increment_id"]) for o in self.orders) + 1
            latest = max(o["created_at"] for o in self.orders)
            self.orders.append({"increment_id": f"{n:09d}", "items": list(items),
                                "created_at": latest[:-2] + f"{int(latest[-2:]) + 1:02d}"})
            return f"{n:09d}"

    def start(self) -> str:
        site = self

        class Handler(_Handler):
            pass
        Handler.site = site
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(timeout=5)
            self.server = None


def _page(title: str, body: str, user: dict | None) -> str:
    nav = ('<a href="/">Home</a> <a href="/profile">Profile</a> <a href="/profile/edit">Edit profile</a> '
           + ('<a href="/logout">Log out</a>' if user else '<a href="/login">Log in</a>'))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body><nav>{nav}</nav><h1>{html.escape(title)}</h1>{body}</body></html>")


class _Handler(BaseHTTPRequestHandler):
    site: Site

    def log_message(self, format: str, *args) -> None:  # keep test output quiet
        pass

    # ---- helpers ----
    def _user(self) -> tuple[str | None, dict | None]:
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                with self.site.lock:
                    username = self.site.sessions.get(value)
                    if username:
                        return username, dict(self.site.users[username])
        return None, None

    def _send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8",
              headers: dict | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _redirect(self, location: str, cookie: str | None = None) -> None:
        headers = {"Location": location}
        if cookie is not None:
            headers["Set-Cookie"] = cookie
        self._send(303, "", headers=headers)

    def _cookie(self, name: str) -> str | None:
        for part in self.headers.get("Cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return None

    def _account(self, kind: str) -> str | None:
        """The account logged into WebArena site ``kind`` ("shop", "admin", "gitlab") by this request's cookie."""
        with self.site.lock:
            return self.site.logins[kind].get(self._cookie(COOKIES[kind]) or "")

    def _log_in(self, kind: str, account: str, password: str, ok: str, failed: str) -> None:
        """Check ``account`` and ``password`` of site ``kind``: redirect to ``ok`` with a session cookie, or to
        ``failed``."""
        if ACCOUNTS[kind].get(account) != password:
            return self._redirect(failed)
        token = secrets.token_hex(16)
        with self.site.lock:
            self.site.logins[kind][token] = account
        self._redirect(ok, f"{COOKIES[kind]}={token}; Path=/; HttpOnly; SameSite=Lax")

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj), "application/json")

    def _rest_authorized(self) -> bool:
        auth = self.headers.get("Authorization", "")
        with self.site.lock:
            ok = auth.startswith("Bearer ") and auth[7:] in self.site.tokens
        if not ok:
            self._json(401, {"message": "The consumer isn't authorized to access %resources."})
        return ok

    def _form(self) -> dict[str, str]:
        n = int(self.headers.get("Content-Length", "0") or 0)
        data = self.rfile.read(min(n, 65536)).decode("utf-8", "replace")
        return {k: v[0] for k, v in urllib.parse.parse_qs(data, keep_blank_values=True).items()}

    # ---- the WebArena sites' pages and APIs ----
    def _webarena_get(self, path: str, query: dict[str, str], username: str | None) -> bool:
        """Serve a WebArena site's page or API; False if ``path`` is none of theirs."""
        site = self.site
        login_form = ("<form method='post' action='{action}'>"
                      "<label for='{uid}'>{ulabel}</label><input id='{uid}' name='{uname}' placeholder='{uph}' {uattr}>"
                      "<label for='{pid}'>Password</label>"
                      "<input id='{pid}' name='{pname}' type='password' placeholder='{pph}' {pattr}>"
                      "<button type='submit' {battr}>{button}</button></form>")
        if path == "/customer/account/login":
            form = login_form.format(action="/customer/account/loginPost/", uid="email", ulabel="Email",
                                     uname="login[username]", uph="", uattr="", pid="pass", pname="login[password]",
                                     pph="", pattr="", battr="", button="Sign In")
            self._send(200, _page("Customer Login", form, None))
        elif path in ("/customer/account", "/wishlist") or path.startswith("/sales/order/view/order_id/"):
            email = self._account("shop")
            if not email:
                self._redirect("/customer/account/login/")
            elif path.startswith("/sales/"):
                self._order_page(path.rsplit("/", 1)[-1])
            else:
                title = "My Wish List" if path == "/wishlist" else "My Account"
                self._send(200, _page(title, f"<p class='email'>{html.escape(email)}</p>", None))
        elif re.fullmatch(r"/\w+\.html", path) and path[1:-5] in PRODUCTS:
            self._product_page(path[1:-5])
        elif path == "/rest/V1/orders":
            if self._rest_authorized():
                field = query.get("searchCriteria[sortOrders][0][field]", "increment_id")
                desc = query.get("searchCriteria[sortOrders][0][direction]", "ASC").upper() == "DESC"
                size = int(query.get("searchCriteria[pageSize]", "0") or 0)
                with site.lock:
                    orders = sorted(site.orders, key=lambda o: o[field], reverse=desc)
                    items = [{"increment_id": o["increment_id"], "created_at": o["created_at"],
                              "items": [{"sku": sku, "qty_ordered": qty} for sku, qty in o["items"]]}
                             for o in (orders[:size] if size else orders)]
                self._json(200, {"items": items, "total_count": len(orders)})
        elif m := re.fullmatch(r"/rest/V1/products/(\w+)/reviews", path):
            if self._rest_authorized():
                with site.lock:
                    reviews = copy.deepcopy(site.reviews.get(m.group(1)))
                if reviews is None:
                    self._json(404, {"message": "The product that was requested doesn't exist."})
                else:
                    self._json(200, reviews)
        elif path == "/admin" or path.startswith("/admin/"):
            if self._account("admin") and path == "/admin/dashboard":
                self._send(200, _page("Dashboard", "<p>Lifetime Sales</p>", None))
            elif self._account("admin"):
                self._redirect("/admin/dashboard/")
            else:
                form = login_form.format(action="/admin/", uid="username", ulabel="Username", uname="login[username]",
                                         uph="user name", uattr="", pid="login", pname="login[password]",
                                         pph="password", pattr="", battr="", button="Sign in")
                self._send(200, _page("Magento Admin", form, None))
        elif path == "/users/sign_in":
            form = login_form.format(action="/users/sign_in", uid="user_login", ulabel="Username or email",
                                     uname="user[login]", uph="", uattr="data-testid='username-field'",
                                     pid="user_password", pname="user[password]", pph="",
                                     pattr="data-testid='password-field'", battr="data-testid='sign-in-button'",
                                     button="Sign in")
            self._send(200, _page("Sign in · GitLab", form, None))
        elif path == "/-/profile" or path.endswith("/-/project_members"):
            account = self._account("gitlab")
            project = path[1:-len("/-/project_members")]
            if not account:
                self._redirect("/users/sign_in")
            elif path == "/-/profile":
                self._send(200, _page("Edit Profile · GitLab", f"<p>@{html.escape(account)}</p>", None))
            elif project not in site.members:
                self._send(404, _page("Not found", "<p>No such project.</p>", None))
            else:
                with site.lock:
                    rows = "".join(
                        f"<tr><td data-label='Account'><span class='gl-avatar-labeled-label'>{html.escape(name)}</span>"
                        f"<span class='gl-avatar-labeled-sublabel'>@{html.escape(user)}</span></td>"
                        f"<td class='col-max-role'><span>{html.escape(role)}</span></td></tr>"
                        for user, name, role in site.members[project])
                self._send(200, _page("Project members", f"<table><tbody>{rows}</tbody></table>", None))
        elif m := re.fullmatch(r"/user/([^/]+)/account", path):
            if not username:
                self._redirect(f"/login?next={urllib.parse.quote(path)}")
            elif username != m.group(1):
                self._send(403, _page("Forbidden", "<p>Not your account.</p>", None))
            else:
                self._send(200, _page("Account settings", "<button>Delete account</button>", None))
        elif ((m := re.fullmatch(r"/f/(\w+)/(\d+)(/.*)?", path))
              and POSTS.get(int(m.group(2)), {}).get("forum") == m.group(1)):
            post, rest = POSTS[int(m.group(2))], m.group(3) or ""
            comments = "".join(f"<div class='comment' id='comment-{cid}'>{html.escape(text)}</div>"
                               for cid, text in post["comments"].items()
                               if not rest.startswith("/-/comment/") or rest == f"/-/comment/{cid}")
            if rest.startswith("/-/comment/"):      # a comment's page: the thread, a link to the post
                body = f"{comments}<a href='/f/{m.group(1)}/{m.group(2)}/'>View the whole post</a>"
            else:
                body = (f"<div class='submission__inner'><h2>{html.escape(post['title'])}</h2>"
                        f"<p>{html.escape(post['body'])}</p></div>{comments}")
            self._send(200, _page(post["title"], body, None))
        else:
            return False
        return True

    def _order_page(self, order_id: str) -> None:
        with self.site.lock:
            order = next((o for o in self.site.orders if order_id.isdigit() and int(o["increment_id"]) == int(order_id)),
                         None)
        if order is None:
            return self._send(404, _page("Not found", "<p>No such order.</p>", None))
        rows = "".join(f"<tbody><tr><td class='col name'>{html.escape(PRODUCTS[sku])}</td><td class='col sku'>{sku}</td>"
                       f"<td class='col qty'>Ordered{qty}</td></tr></tbody>" for sku, qty in order["items"])
        self._send(200, _page(f"Order # {order['increment_id']}",
                              f"<div class='order-details-items ordered'><table id='my-orders-table'>{rows}</table></div>",
                              None))

    def _product_page(self, sku: str) -> None:
        with self.site.lock:
            reviews = "".join(f"<li>{html.escape(r['nickname'])}: {html.escape(r['title'])}</li>"
                              for r in self.site.reviews.get(sku, []))
        form = (f"<form method='post' action='/review/product/post/id/{sku}/'>"
                "<label for='nickname'>Nickname</label><input id='nickname' name='nickname'>"
                "<label for='title'>Summary</label><input id='title' name='title'>"
                "<label for='detail'>Review</label><textarea id='detail' name='detail'></textarea>"
                "<label for='rating'>Rating</label><select id='rating' name='rating'>"
                + "".join(f"<option value='{i}'>{i} stars</option>" for i in range(1, 6))
                + "</select><button type='submit'>Submit Review</button></form>")
        self._send(200, _page(PRODUCTS[sku], f"<p class='sku'>{sku}</p><ul>{reviews}</ul>{form}", None))

    # ---- routes ----
    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        username, user = self._user()
        path = url.path.rstrip("/") or "/"
        if self._webarena_get(path, query, username):
            return
        if path == "/":
            who = f"Signed in as {html.escape(user['name'])}." if user else "Not signed in."
            self._send(200, _page("Tiny Site", f"<p id='status'>{who}</p>", user))
        elif path == "/login":
            msgs = []
            if "logged_out" in query:
                msgs.append("<p id='message'>You have been logged out.</p>")
            if "error" in query:
                msgs.append("<p id='message'>Wrong username or password.</p>")
            nxt = html.escape(query.get("next", "/profile"), quote=True)
            form = ("<form method='post' action='/login'>"
                    "<label for='username'>Username</label><input id='username' name='username' placeholder='Username'>"
                    "<label for='password'>Password</label>"
                    "<input id='password' name='password' type='password' placeholder='Password'>"
                    f"<input type='hidden' name='next' value='{nxt}'>"
                    "<button type='submit'>Log in</button></form>")
            self._send(200, _page("Log in", "".join(msgs) + form, user))
        elif path == "/logout":
            cookie = self.headers.get("Cookie", "")
            with self.site.lock:
                for part in cookie.split(";"):
                    name, _, value = part.strip().partition("=")
                    if name == COOKIE:
                        self.site.sessions.pop(value, None)
            self._redirect("/login?logged_out=1", f"{COOKIE}=; Path=/; Max-Age=0")
        elif path == "/profile":
            if not user:
                return self._redirect("/login?next=/profile")
            saved = "<p id='message'>Profile saved.</p>" if "saved" in query else ""
            body = (f"{saved}<p>Name: <span id='name'>{html.escape(user['name'])}</span></p>"
                    f"<p>Email: <span id='email'>{html.escape(user['email'])}</span></p>"
                    f"<p>Username: <span id='username'>{html.escape(username)}</span></p>")
            self._send(200, _page("Profile", body, user))
        elif path == "/profile/edit":
            if not user:
                return self._redirect("/login?next=/profile/edit")
            err = "<p id='message'>The name cannot be empty.</p>" if "error" in query else ""
            form = ("<form method='post' action='/profile/edit'><label for='name'>Name</label>"
                    f"<input id='name' name='name' value='{html.escape(user['name'], quote=True)}'>"
                    "<button type='submit'>Save</button></form>")
            self._send(200, _page("Edit profile", err + form, user))
        elif path == "/api/profile":
            with self.site.lock:
                u = self.site.users.get(query.get("user", ""))
                body = json.dumps({"name": u["name"], "email": u["email"]} if u else {"error": "no such user"})
            self._send(200 if u else 404, body, "application/json")
        else:
            self._send(404, _page("Not found", "<p>No such page.</p>", user))

    def do_POST(self) -> None:
        path = urllib.parse.urlsplit(self.path).path.rstrip("/")
        if path == "/__reset":      # a replica's reset (env.webarena_sites.SitePool): users back, sessions gone
            self.site.reset()
            return self._send(200, "reset", ctype="text/plain")
        if path == "/rest/default/V1/integration/admin/token":     # JSON body, not a form
            n = int(self.headers.get("Content-Length", "0") or 0)
            try:
                body = json.loads(self.rfile.read(min(n, 65536)) or b"{}")
            except ValueError:
                body = {}
            if ACCOUNTS["admin"].get(body.get("username")) != body.get("password"):
                return self._json(401, {"message": "The account sign-in was incorrect or your account is "
                                                   "disabled temporarily. Please wait and try again later."})
            token = secrets.token_hex(16)
            with self.site.lock:
                self.site.tokens.add(token)
            return self._json(200, token)
        form = self._form()
        if path == "/customer/account/loginPost":
            return self._log_in("shop", form.get("login[username]", ""), form.get("login[password]", ""),
                                "/customer/account/", "/customer/account/login/?error=1")
        if path.startswith("/admin"):
            return self._log_in("admin", form.get("login[username]", ""), form.get("login[password]", ""),
                                "/admin/dashboard/", "/admin/?error=1")
        if path == "/users/sign_in":
            return self._log_in("gitlab", form.get("user[login]", ""), form.get("user[password]", ""),
                                "/", "/users/sign_in?error=1")
        m = re.fullmatch(r"/review/product/post/id/(\w+)", path)
        if m and m.group(1) in PRODUCTS:
            with self.site.lock:
                reviews = self.site.reviews.setdefault(m.group(1), [])
                rating = max(1, min(5, int(form.get("rating", "5") or 5)))
                reviews.append({"id": 1 + max([r["id"] for rs in self.site.reviews.values() for r in rs] or [0]),
                                "nickname": form.get("nickname", ""), "title": form.get("title", ""),
                                "detail": form.get("detail", ""),
                                "ratings": [{"rating_name": "Rating", "percent": 20 * rating, "value": rating}]})
            return self._redirect(f"/{m.group(1)}.html?reviewed=1")
        if path == "/login":
            username = form.get("username", "").strip()
            with self.site.lock:
                ok = username in self.site.users and self.site.users[username]["password"] == form.get("password")
                token = secrets.token_hex(16) if ok else ""
                if ok:
                    self.site.sessions[token] = username
            nxt = form.get("next", "/profile")
            nxt = nxt if nxt.startswith("/") and not nxt.startswith("//") else "/profile"
            if not ok:
                return self._redirect("/login?error=1")
            self._redirect(nxt, f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax")
        elif path == "/profile/edit":
            username, user = self._user()
            if not user:
                return self._redirect("/login?next=/profile/edit")
            name = form.get("name", "").strip()[:100]
            if not name:
                return self._redirect("/profile/edit?error=1")
            with self.site.lock:
                self.site.users[username]["name"] = name
            self._redirect("/profile?saved=1")
        else:
            self._send(404, _page("Not found", "<p>No such page.</p>", None))


if __name__ == "__main__":
    import time
    s = Site()
    print(s.start(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        s.stop()
