"""What WebArena's family and rubrics ask of the sites besides their pages, a part of env/webarena.py's family:
the sites' URLs (placeholders, the replica a leased episode holds), the built-in ``func:`` helper functions of
program_html checks and the call syntax configs name them in, and the sites' logins (``python -m env login``).

It imports tasks.py, sandbox.py and browser.py, never env or the other webarena modules (webarena_rubrics.py,
webarena_replicas.py and webarena.py import it); its public names are also ``env.<name>``: ``webarena_site_url``,
``substitute_placeholders``, ``WEBARENA_SITES``, ``WEBARENA_HELPERS``, ``WEBARENA_ACCOUNTS``, ``LOGIN_SITES``,
``login_files``, ``webarena_login``, ``check_storage_state``, ``check_login_alive``.

- Site URLs come from the environment: WA_<NAME> if set, else WebArena's own <NAME> (SHOPPING, ...); a
  variable listing several replicas gives the first, and an episode leased on a replica (webarena_replicas.py)
  gets that replica's.
- `func:` helpers: the five that the public configs name are built in (WEBARENA_HELPERS, "helper functions"
  below); ``evaluate(..., helpers=)`` adds others or replaces them by name. A call is parsed
  (``parse_helper_call``), never handed to Python's eval.
- Logins come from storage_state files, which ``webarena_login`` (``python -m env login``) writes as
  WebArena's auto_login.py does. A reset with a storage_state that cannot log in (no such file, no valid
  cookie) raises ValueError saying how to make it (check_storage_state); require_login with no storage_state
  runs without one (WebArena-Lite's map tasks: the map has no login).
"""
from __future__ import annotations

import asyncio
import contextvars
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Sequence

from playwright.async_api import Error as PlaywrightError

from .browser import BrowserPool
from .sandbox import host_entry, new_proxied_context
from .tasks import Task
from .tasks import first_line as _first_line

# inside a leased episode (SitePool.lease): site name -> the URL of the replica it holds
_leased_urls: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("leased_urls", default={})

WEBARENA_SITES = ("SHOPPING_ADMIN", "SHOPPING", "REDDIT", "GITLAB", "MAP", "WIKIPEDIA", "HOMEPAGE")
_PLACEHOLDER = re.compile(r"__(SHOPPING_ADMIN|SHOPPING|REDDIT|GITLAB|MAP|WIKIPEDIA|HOMEPAGE)__")
NAV_TIMEOUT_MS = 15_000        # opening a program_html URL (webarena_rubrics.py) or a login's page
CHECK_TIMEOUT_S = 15.0         # one JS locator or helper call


# ---- site URLs and placeholders ----

def webarena_site_url(name: str) -> str | None:
    """URL of WebArena site ``name`` ("SHOPPING", ...) from $WA_<NAME>, else $<NAME>; no trailing slash. A
    variable listing several replicas ("http://h:8023 http://h:8024", ``SitePool``) gives the first; inside
    a leased episode, the replica it leased."""
    leased = _leased_urls.get().get(name.lower())
    if leased:
        return leased
    for var in (f"WA_{name}", name):
        urls = site_urls(os.environ.get(var, ""))
        if urls:
            return urls[0]
    return None


def site_urls(value: str) -> list[str]:
    """The replica URLs a site variable lists (space- or comma-separated), without trailing slashes."""
    return [u.rstrip("/") for u in re.split(r"[\s,]+", value.strip()) if u]


def substitute_placeholders(text: str) -> str:
    """Replace __SHOPPING__-style placeholders by site URLs; ValueError naming the variable if one is unset."""
    def repl(m: re.Match) -> str:
        url = webarena_site_url(m.group(1))
        if url is None:
            raise ValueError(f"placeholder {m.group(0)} needs the environment variable "
                             f"WA_{m.group(1)} (or {m.group(1)}) set to the site's URL")
        return url
    return _PLACEHOLDER.sub(repl, text)


# ---- `func:` calls: a helper's name and arguments as configs write them ----

_FUNC_CALL = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*$", re.S)
_FUNC_ARG = re.compile(r"""\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)"|(-?\d+\.\d+)|(-?\d+)"""
                       r"""|(True|False|None)|(__page__|__last_url__))\s*(,|\Z)""", re.S)
_PAGE_ARG, _LAST_URL_ARG = "__page__", "__last_url__"


class _Bare(str):
    """A bare (unquoted) __page__ / __last_url__ argument, told apart from the same text in quotes."""


def parse_helper_call(text: str) -> tuple[str, list[Any]]:
    """Parse ``name(args)`` from a ``func:`` url/locator (a small parser, no Python eval), e.g.
    ``parse_helper_call("get_name(__page__, 'alice', 2)") == ("get_name", ["__page__", "alice", 2])``."""
    m = _FUNC_CALL.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a helper call like name('arg', 3)")
    name, body = m.group(1), m.group(2).strip()
    args: list[Any] = []
    pos = 0
    while pos < len(body):
        t = _FUNC_ARG.match(body, pos)
        if not t:
            raise ValueError(f"{text!r}: cannot parse the argument at {body[pos:]!r} (allowed: quoted strings, "
                             f"numbers, True/False/None, __page__, __last_url__)")
        sq, dq, num_f, num_i, const, bare = t.group(1, 2, 3, 4, 5, 6)
        if sq is not None or dq is not None:
            args.append(re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e.group(1), e.group(1)),
                               sq if sq is not None else dq))
        elif num_f is not None:
            args.append(float(num_f))
        elif num_i is not None:
            args.append(int(num_i))
        elif const is not None:
            args.append({"True": True, "False": False, "None": None}[const])
        else:
            args.append(_Bare(bare))
        pos = t.end()
    return name, args


# ---- helper functions ----
# The `func:` helpers that WebArena / WebArena-Lite configs name, re-implemented from WebArena's
# evaluation_harness/helper_functions.py (VAB's helper_functions_eval.py has the same five): same names, same
# arguments after the page, same site APIs and page reads. evaluate() uses them unless ``helpers=`` supplies
# its own under the same name. Like every helper here they take the page first; the originals' site URLs
# come from WA_<SITE> / <SITE> and the shopping admin's account from WEBARENA_ACCOUNTS. Where an original
# raises (an HTTP status other than 200, no order at all) these raise too, and the task scores 0.

#: WebArena's default accounts (browser_env/env_config.py ACCOUNTS): ``webarena_login`` signs in with them and
#: the shopping helpers get a Magento admin token with "shopping_site_admin"; change an entry to use others.
WEBARENA_ACCOUNTS = {
    "reddit": {"username": "MarvelsGrantMan136", "password": "test1234"},
    "gitlab": {"username": "byteblaze", "password": "hello1234"},
    "shopping": {"username": "emma.lopez@gmail.com", "password": "Password.123"},
    "shopping_admin": {"username": "admin", "password": "admin1234"},
    "shopping_site_admin": {"username": "admin", "password": "admin1234"},
}


def _short(text: Any, n: int = 200) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n] + f"... [{len(text)} chars]"


def _site(name: str) -> str:
    url = webarena_site_url(name)
    if url is None:
        raise ValueError(f"WebArena site {name} is unknown here: this needs WA_{name} (or {name}) set to its URL")
    return url


def _http_json(url: str, *, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    """(status, parsed JSON) of a GET (or a POST of ``body`` as JSON), without cookies, as the originals'
    ``requests`` calls; a non-JSON body parses to None."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=CHECK_TIMEOUT_S) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, None


def _shopping_get(path: str, params: dict[str, str] | None = None) -> Any:
    """GET ``$SHOPPING/rest/V1/{path}`` as the shopping site's admin (a fresh token per call, as the originals
    do); the JSON, or RuntimeError unless the status is 200."""
    account = WEBARENA_ACCOUNTS["shopping_site_admin"]
    status, token = _http_json(f"{_site('SHOPPING')}/rest/default/V1/integration/admin/token",
                               body={"username": account["username"], "password": account["password"]})
    if status != 200 or not isinstance(token, str):
        raise RuntimeError(f"no Magento admin token for {account['username']!r} (HTTP {status}: {token!r})")
    url = f"{_site('SHOPPING')}/rest/V1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    status, obj = _http_json(url, token=token)
    if status != 200:
        raise RuntimeError(f"GET {url}: HTTP {status}: {_short(obj)}")
    return obj


async def shopping_get_latest_order_url(page: Any) -> str:
    """The customer page of the shop's most recently created order (REST, as the shopping admin), e.g.
    ``"http://shop:7770/sales/order/view/order_id/190/"`` for increment id "000000190"."""
    params = {"searchCriteria[sortOrders][0][field]": "created_at",
              "searchCriteria[sortOrders][0][direction]": "DESC", "searchCriteria[pageSize]": "1"}
    orders = await asyncio.to_thread(_shopping_get, "orders", params)
    return f"{_site('SHOPPING')}/sales/order/view/order_id/{int(orders['items'][0]['increment_id'])}/"


async def _latest_reviews(sku: str) -> list:
    return await asyncio.to_thread(_shopping_get, f"products/{urllib.parse.quote(sku, safe='')}/reviews")


async def shopping_get_sku_latest_review_author(page: Any, sku: str) -> str:
    """The nickname on product ``sku``'s latest review (the last one the reviews API lists); "" if none."""
    reviews = await _latest_reviews(sku)
    return reviews[-1]["nickname"] if reviews else ""


async def shopping_get_sku_latest_review_rating(page: Any, sku: str) -> str:
    """The percent of the latest review's first rating, as a string ("80" = 4 stars); "" if none. Like the
    original it asserts that the first review's first rating is the one named "Rating"."""
    reviews = await _latest_reviews(sku)
    if not reviews:
        return ""
    if reviews[0]["ratings"][0]["rating_name"] != "Rating":
        raise RuntimeError(f"{sku}: the first rating is {reviews[0]['ratings'][0]['rating_name']!r}, not 'Rating'")
    return str(reviews[-1]["ratings"][0]["percent"])


async def reddit_get_post_url(page: Any, url: str) -> str:
    """The post page of a forum URL below it (a comment, a sorted view), other URLs as they are, e.g.
    ``"http://r:9999/f/books/7/-/comment/3"`` -> ``"http://r:9999/f/books/7/"``."""
    parts = urllib.parse.urlparse(url)
    segments = parts.path.split("/")
    if len(segments) < 4 or segments[1] != "f":
        return url
    return f"{parts.scheme}://{parts.netloc}/f/{segments[2]}/{segments[3]}/"


_GITLAB_ROLE_JS = """(account) => {
    const names = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
    const i = names.findIndex((e) => e.outerText === '@' + account);
    return document.querySelectorAll("td.col-max-role span")[i].outerText;
}"""


async def gitlab_get_project_memeber_role(page: Any, account_name: str) -> str:
    """The role ("Developer", ...) shown for ``@account_name`` on a GitLab project_members page; "" when the
    page has no such member or no members table. (The misspelling is WebArena's: configs name it so.)"""
    try:
        return await page.evaluate(_GITLAB_ROLE_JS, account_name)
    except PlaywrightError:
        return ""


#: The helpers evaluate() knows by name; ``evaluate(..., helpers={name: fn})`` adds or replaces entries.
WEBARENA_HELPERS = {fn.__name__: fn for fn in (
    shopping_get_latest_order_url, shopping_get_sku_latest_review_author, shopping_get_sku_latest_review_rating,
    reddit_get_post_url, gitlab_get_project_memeber_role)}


# ---- WebArena logins ----
# After WebArena's browser_env/auto_login.py: the same sign-in pages and fields, the same check that a login
# holds (a page only a signed-in user gets), the same storage-state files (one per site, one per pair of sites
# signed into together, "<a>.<b>_state.json" with the names sorted; reddit is never paired with a shopping
# site, whose cookies share its host). Configs name those files (storage_state "./.auth/gitlab_state.json").

LOGIN_SITES = ("gitlab", "shopping", "shopping_admin", "reddit")


def login_files(sites: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The storage-state files WebArena's auto_login writes for ``sites``: file name -> the sites it is signed
    into, e.g. ``login_files(["reddit", "gitlab"]) == {"gitlab_state.json": ("gitlab",), "reddit_state.json":
    ("reddit",), "gitlab.reddit_state.json": ("gitlab", "reddit")}``."""
    unknown = [s for s in sites if s not in LOGIN_SITES]
    if unknown:
        raise ValueError(f"no login for site(s) {unknown} (sites with a login: {', '.join(LOGIN_SITES)})")
    names = sorted(set(sites))
    combos = [(s,) for s in names] + [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
                                      if not ("reddit" in (a, b) and {a, b} & {"shopping", "shopping_admin"})]
    return {f"{'.'.join(c)}_state.json": c for c in combos}


async def _sign_in(page: Any, site: str, account: dict[str, str]) -> None:
    user, password = account["username"], account["password"]
    if site == "shopping":
        await page.goto(f"{_site('SHOPPING')}/customer/account/login/")
        await page.get_by_label("Email", exact=True).fill(user)
        await page.get_by_label("Password", exact=True).fill(password)
        await page.get_by_role("button", name="Sign In").click()
    elif site == "reddit":
        await page.goto(f"{_site('REDDIT')}/login")
        await page.get_by_label("Username").fill(user)
        await page.get_by_label("Password").fill(password)
        await page.get_by_role("button", name="Log in").click()
    elif site == "shopping_admin":
        await page.goto(_site("SHOPPING_ADMIN"))
        await page.get_by_placeholder("user name").fill(user)
        await page.get_by_placeholder("password").fill(password)
        await page.get_by_role("button", name="Sign in").click()
    else:  # gitlab
        await page.goto(f"{_site('GITLAB')}/users/sign_in")
        await page.get_by_test_id("username-field").fill(user)
        await page.get_by_test_id("password-field").fill(password)
        await page.get_by_test_id("sign-in-button").click()
    await page.wait_for_load_state("load")


async def _signed_in(page: Any, site: str, account: dict[str, str]) -> str | None:
    """None if ``page``'s context is signed into ``site`` (auto_login's is_expired check: a page that stays at
    its URL, or shows a word, only for a signed-in user), else what went wrong."""
    path, word = {"gitlab": ("/-/profile", None), "shopping": ("/wishlist/", None),
                  "shopping_admin": ("/dashboard", "Dashboard"),
                  "reddit": (f"/user/{account['username']}/account", "Delete")}[site]
    url = _site(site.upper()) + path
    await page.goto(url)
    if word is not None:
        return None if word in await page.content() else f"{url} does not show {word!r}"
    return None if page.url == url else f"{url} went to {page.url}"


async def webarena_login(sites: Sequence[str] = LOGIN_SITES, out_dir: str = ".auth", *,
                         accounts: dict[str, dict[str, str]] | None = None, pool: Any = None) -> list[str]:
    """Sign into WebArena ``sites`` (URLs from WA_<SITE> / <SITE>) and write the storage-state files of
    ``login_files(sites)`` into ``out_dir``; returns their paths. ``accounts`` replaces entries of
    WEBARENA_ACCOUNTS (WebArena's default accounts); ``pool`` is a BrowserPool to use (default: a new one).
    A sign-in page without its fields, or a login that does not hold, raises RuntimeError naming the site, e.g.
    ``await webarena_login(["shopping", "reddit"], ".auth")`` -> [".auth/reddit_state.json",
    ".auth/shopping_state.json"] (the two are not paired: they share a host)."""
    files = login_files(sites)
    accounts = {**WEBARENA_ACCOUNTS, **(accounts or {})}
    if pool is None:
        async with BrowserPool() as own:
            return await webarena_login(sites, out_dir, accounts=accounts, pool=own)
    os.makedirs(out_dir, exist_ok=True)
    browser = await pool.get_browser()
    written = []
    for name, combo in files.items():
        # Chromium resolves no names itself (LAUNCH_ARGS): connect through the sandbox proxy, to the sites only
        ctx = await new_proxied_context(browser, tuple(host_entry(_site(site.upper())) for site in combo),
                                        service_workers="block")
        try:
            ctx.set_default_timeout(NAV_TIMEOUT_MS)
            page = await ctx.new_page()
            for site in combo:
                try:
                    await _sign_in(page, site, accounts[site])
                except PlaywrightError as e:        # includes a sign-in field that never shows up
                    waiting = re.search(r"waiting for .*", str(e))
                    raise RuntimeError(f"{site}: cannot sign in at {page.url}: {_first_line(e)}"
                                       + (f" ({waiting.group(0)})" if waiting else "")) from None
            for site in combo:
                problem = await _signed_in(page, site, accounts[site])
                if problem:
                    raise RuntimeError(f"{site}: signing in as {accounts[site]['username']!r} did not hold "
                                       f"({problem}); check the account and WA_{site.upper()}")
            path = os.path.join(out_dir, name)
            state = await ctx.storage_state()
            # which account each site signed in as, for the check at reset (Playwright ignores the extra key)
            state["webagent"] = {"accounts": {site: accounts[site]["username"] for site in combo}}
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(state, f)
            os.replace(tmp, path)
            written.append(path)
        finally:
            await ctx.close()
    return written


def check_storage_state(task: Task) -> None:
    """Raise ValueError when ``task.storage_state`` cannot log the task in: no such file, not a Playwright
    storage state, or (for a ``require_login`` task) no cookie that is still valid. The message says how to make
    it, e.g. "task 436 (shopping): storage_state /w/.auth/shopping_state.json: no such file; make it with
    python -m env login --sites shopping --out /w/.auth"."""
    path = task.storage_state
    if not path:
        return
    fix = f"make it with {_login_command(task)}"
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except FileNotFoundError:
        problem = "no such file"
    except (OSError, ValueError) as e:
        problem = f"unreadable ({_first_line(e)})"
    else:
        cookies = state.get("cookies") if isinstance(state, dict) else None
        if not isinstance(cookies, list):
            problem = "not a Playwright storage state (no 'cookies' list)"
        elif task.require_login and not any(c.get("expires", -1) in (-1, None) or c["expires"] > time.time()
                                            for c in cookies if isinstance(c, dict)):
            problem = "holds no valid cookie (never logged in, or the login expired)"
        else:
            return
    raise ValueError(f"task {task.task_id} ({task.site}): storage_state {path}: {problem}; {fix}")


def _named_sites(path: str) -> list[str]:
    """The sites of a storage-state file named as login_files names them ("gitlab.reddit_state.json"), else []."""
    name = os.path.basename(path)
    stem = name[:-len("_state.json")].split(".") if name.endswith("_state.json") else []
    return stem if stem and set(stem) <= set(LOGIN_SITES) else []


def _state_sites(task: Task) -> list[str]:
    """The WebArena sites a storage-state file signs into: from its name, else the task's sites with a login."""
    return _named_sites(task.storage_state or "") or [s for s in task.site.split("+") if s in LOGIN_SITES]


def _login_command(task: Task) -> str:
    sites = ",".join(_state_sites(task)) or "SITES"
    return f"python -m env login --sites {sites} --out {os.path.dirname(task.storage_state or '') or '.'}"


# storage-state checks of this process: (path, mtime) -> the check's task (its result: a problem or None)
_LOGIN_CHECKS: dict[tuple[str, int], asyncio.Task] = {}


async def check_login_alive(browser: Any, task: Task) -> None:
    """Raise ValueError when ``task.storage_state`` no longer signs in, e.g. the site was reset since
    ``python -m env login`` ran, with the command that renews it. As WebArena's auto_login re-checks a stored
    session (``is_expired``): a fresh context holding only the file's state opens one signed-in-only page per
    site (``_signed_in``). Once per file per process (again when the file changes), for files named as
    ``python -m env login`` names them (the names WebArena's configs use; another file's sites and accounts are
    unknown); sites whose URL is not configured here are not checked. A check that cannot load a page raises
    PlaywrightError (retried by reset)."""
    path = task.storage_state
    if not path or not task.require_login or not _named_sites(path):
        return
    key = (path, os.stat(path).st_mtime_ns)
    check = _LOGIN_CHECKS.get(key)
    if check is None or (check.done() and check.exception() is not None):
        check = _LOGIN_CHECKS[key] = asyncio.ensure_future(_login_problem(browser, path, _named_sites(path)))
    problem = await asyncio.shield(check)
    if problem:
        raise ValueError(f"task {task.task_id} ({task.site}): storage_state {path}: the login no longer holds "
                         f"({problem}); renew it with {_login_command(task)}")


async def _login_problem(browser: Any, path: str, sites: list[str]) -> str | None:
    with open(path, encoding="utf-8") as f:
        recorded = (json.load(f).get("webagent") or {}).get("accounts") or {}
    sites = [s for s in sites if webarena_site_url(s.upper()) is not None]
    if not sites:
        return None
    ctx = await new_proxied_context(browser, tuple(host_entry(_site(s.upper())) for s in sites), timeout=30,
                                    storage_state=path, service_workers="block", accept_downloads=False)
    try:
        ctx.set_default_timeout(NAV_TIMEOUT_MS)
        page = await ctx.new_page()
        for site in sites:
            account = {**WEBARENA_ACCOUNTS[site], "username": recorded.get(site, WEBARENA_ACCOUNTS[site]["username"])}
            problem = await _signed_in(page, site, account)
            if problem:
                return f"{site}: {problem}"
        return None
    finally:
        await ctx.close()


def _login_cli(argv: list[str]) -> None:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m env login", description="Sign into WebArena sites and write the "
                                 "storage-state files their task configs name.")
    ap.add_argument("--sites", default=",".join(LOGIN_SITES), help="comma-separated, from: " + ", ".join(LOGIN_SITES))
    ap.add_argument("--out", default=".auth", help="folder of the *_state.json files (configs say ./.auth)")
    ap.add_argument("--account", action="append", default=[], metavar="SITE=USER:PASSWORD",
                    help="another account than WebArena's default for SITE (repeatable)")
    args = ap.parse_args(argv)
    accounts = {}
    for spec in args.account:
        site, _, cred = spec.partition("=")
        user, sep, password = cred.partition(":")
        if not (site and user and sep):
            ap.error(f"--account {spec!r}: expected SITE=USER:PASSWORD")
        accounts[site] = {"username": user, "password": password}
    sites = [s.strip() for s in args.sites.split(",") if s.strip()]
    try:
        paths = asyncio.run(webarena_login(sites, args.out, accounts=accounts))
    except (ValueError, RuntimeError) as e:
        raise SystemExit(f"login failed: {e}") from None
    print("\n".join(paths))
