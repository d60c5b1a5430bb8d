"""The browser sandbox against hostile pages, in real Chromium (issue 14): a task's site on 127.0.0.1 serves
pages that try every way we know to reach a second local server, which stands in for the trainer's
services (a vLLM server, DeepSpeed's port) on another port of the same host. The second server is a bare
listening socket: it must never see a TCP connection, let alone a byte. Each attempt is counted in
``info["blocked_requests"]`` (by kind in ``info["blocked_kinds"]``).

Enforcement (env/sandbox.py, env/browser.py): the context's request router aborts requests outside the task's
origins; every connection goes through the SandboxProxy (SOCKS5), which checks each one, redirect hops included, against
the same origins before any name is resolved; Chromium resolves no name itself; WebRTC is removed.

One site, one trainer stand-in and one env are shared by the module (the session's BrowserPool)."""
import asyncio
import http.server
import json
import pathlib
import socket
import ssl
import threading
import time
import urllib.parse

import pytest

import env
from env import sandbox, tasks

SECRET = b"TRAINER-SECRET"


class Trainer:
    """A listening socket that records every connection it accepts (and answers like an HTTP server with
    permissive CORS, so a leak would reach the page)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.port = self.sock.getsockname()[1]
        self.connections: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.settimeout(0.5)
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            self.connections.append(data)
            body = SECRET
            with_headers = (b"HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: *\r\nContent-Type: text/html\r\n"
                            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body
            try:
                conn.sendall(with_headers)
            except OSError:
                pass
            conn.close()


def redirect_to(url: str, code: int = 302) -> str:
    return f"/redirect?code={code}&to={urllib.parse.quote(url, safe='')}"


class Site(http.server.BaseHTTPRequestHandler):
    """The task's site: /redirect?code=&to=[&cookie=] answers a redirect (setting a cookie), /page?js= a page
    running that script (with ``done()`` to call when its attempts have settled), /worker.js?js= a worker
    running it, /cookie the Cookie header it got, /big 3 MB, /sse two server-sent events 0.3 s apart, any
    other path a page naming it."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _send(self, code: int, body: bytes = b"", ctype: str = "text/html", headers: dict | None = None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        self.do_GET()

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/redirect":
            headers = {"Location": q["to"]}
            if "cookie" in q:
                headers["Set-Cookie"] = f"{q['cookie']}; Path=/"
            self._send(int(q.get("code", 302)), headers=headers)
        elif url.path == "/cookie":
            self._send(200, (self.headers.get("Cookie") or "").encode(), "text/plain")
        elif url.path == "/big":
            self._send(200, b"x" * 3_000_000, "application/octet-stream")
        elif url.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Connection", "close")
            self.end_headers()
            for k in range(2):
                self.wfile.write(f"data: event{k}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.3)
            self.close_connection = True
        elif url.path == "/page":
            head = q.get("head", "")
            html = (f"<!doctype html><html><head><title>hostile</title>{head}</head><body>"
                    f"<div id='area'>{q.get('body', '')}</div><script>window.__done = false;"
                    f"const done = () => {{ window.__done = true; }};\n{q.get('js', 'done()')}</script>"
                    f"</body></html>")
            self._send(200, html.encode())
        elif url.path == "/worker.js":
            self._send(200, q.get("js", "").encode(), "text/javascript")
        else:
            self._send(200, f"<html><body>page {url.path}</body></html>".encode())


def test_proxy_address_for_browsers_on_other_machines(monkeypatch, caplog, run):
    """The sandbox proxy listens where the pool's browser servers reach it: this machine's address on the route
    to the first server (127.0.0.1 for one on this machine), unless WEBAGENT_PROXY_HOST says otherwise, and on
    that address only (every interface only behind NAT, where it is not this machine's); the browsers' launch
    flags keep that address resolvable. A server on another machine without a secret path is warned about."""
    def bound() -> str:
        proxy = sandbox.sandbox_proxy()
        port = run(proxy.listen(lambda host, port: False))
        try:
            return proxy._servers[port].sockets[0].getsockname()[0]
        finally:
            proxy.close(port)

    monkeypatch.delenv("WEBAGENT_PROXY_HOST", raising=False)
    monkeypatch.setattr(sandbox, "_proxy_host_toward", {})
    assert env.proxy_host() == "127.0.0.1" and env.address_toward("ws://127.0.0.1:3000/") == "127.0.0.1"
    assert bound() == "127.0.0.1"
    try:
        outward = env.address_toward("ws://192.0.2.7:3000/")      # TEST-NET-1: routed, never contacted
    except OSError:
        outward = "127.0.0.1"                                      # a machine with no route: the pool warns
    with caplog.at_level("WARNING", logger="webagent.env"):
        env.BrowserPool(endpoints="ws://192.0.2.7:3000/")
    assert "has no secret path" in caplog.text and "scripts/browser_server.py" in caplog.text
    assert env.proxy_host() == outward and env.proxy_settings(5)["server"] == f"socks5://{outward}:5"
    assert bound() == outward
    monkeypatch.setenv("WEBAGENT_PROXY_HOST", "10.1.2.3")
    assert env.proxy_host() == "10.1.2.3" and bound() == "0.0.0.0"
    rules = [a for a in env.BrowserPool().launch_args() if a.startswith("--host-resolver-rules")]
    assert rules == ["--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE 10.1.2.3"]
    with pytest.raises(ValueError, match="expected a ws:// URL"):
        env.BrowserPool(endpoints="http://h:3000")


def test_allow_list_entries_are_origins():
    """Entries are "host:port" (a URL without a port stands for its scheme's default); the driver-side regex
    and the proxy's check agree; a bare "host" (MiniWoB's routed host) admits every port."""
    allowed = ("127.0.0.1:7770", "x.org:443", "h:80", "miniwob.local", "[::1]:8080")
    assert env.host_entry("http://127.0.0.1:7770/a?b") == "127.0.0.1:7770"
    assert env.host_entry("https://X.org/") == "x.org:443" and env.host_entry("ws://h/s") == "h:80"
    assert env.host_entry("http://[::1]:8080/") == "[::1]:8080" and env.host_entry("file:///tmp/x") == "file"
    assert env.host_entry("localhost:7770") == "" and env.host_entry("/relative") == ""
    cases = {"http://127.0.0.1:7770/a": True, "http://127.0.0.1:7771/a": False, "http://127.0.0.1/": False,
             "http://127.0.0.1:77701/": False, "http://127.0.0.1:7770.evil.test/": False,
             "http://u:p@127.0.0.1:7770/": True, "ws://127.0.0.1:7770/s": True, "https://x.org/": True,
             "http://x.org/": False, "https://x.org:443/": True, "http://h/": True, "http://h:80/": True,
             "https://h/": False, "http://h:81/": False, "http://miniwob.local/a": True,
             "http://miniwob.local:81/a": True, "http://[::1]:8080/": True, "http://[::1]:8081/": False,
             "http://localhost:7770/": False, "data:text/html,x": True, "file:///etc/passwd": False}
    pattern = env.outside_hosts_re(allowed)
    for url, ok in cases.items():
        assert (pattern.match(url) is None) == ok, url
        assert env.url_allowed(allowed, url) == ok, url
        hp = sandbox._host_port(url)
        if hp:
            assert env.origin_allowed(allowed, *hp) == ok, url


@pytest.fixture(scope="module")
def servers():
    trainer = Trainer()
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site)
    site.daemon_threads = True
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{site.server_address[1]}", trainer
    site.shutdown()
    site.server_close()
    trainer.sock.close()


@pytest.fixture(scope="module", params=["local", "remote"])
def wenv(request, run, pool):
    """An env in Chromium launched here, and one in a browser behind a Playwright browser server
    (--browser-endpoint): the sandbox holds through both."""
    p = pool if request.param == "local" else request.getfixturevalue("remote_pool")
    e = run(p.new_env(wait_s=0.3))
    yield e
    run(e.close())


def page_url(site: str, js: str = "done()", body: str = "", head: str = "") -> str:
    return f"{site}/page?" + urllib.parse.urlencode({"js": js, "body": body, "head": head})


async def attempt(e: env.WebEnv, site: str, js: str = "done()", body: str = "", head: str = "") -> env.StepResult:
    """Reset on a hostile page of the site (a WebArena-family task: its origin only), let it run until it
    calls done() (5 s at most), and return the result of one Wait step."""
    task = env.Task("sandbox/probe", "sandbox", "probe", page_url(site, js, body, head))
    assert env.family_of(task).hosts(task) == (env.host_entry(site),)
    await e.reset(task)
    if e.page.url.startswith(site):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if await e.page.evaluate("window.__done === true"):
                    break
            except Exception:               # the page navigated away meanwhile
                break
            await asyncio.sleep(0.05)
    return await e.step('do(action="Wait")')


T = "__T__"       # replaced by the trainer's URL, http://127.0.0.1:<port>

# name -> (page script, body html, head html); each tries to reach T and calls done() when settled
VECTORS: dict[str, tuple[str, str, str]] = {
    # server-side redirects from the task's own origin (the router sees only the first request of a chain)
    "fetch_redirect": (f"fetch('{redirect_to(T + '/secret')}').then(r => r.text()).catch(() => 0).then(done)", "", ""),
    "fetch_redirect_301": (f"fetch('{redirect_to(T + '/a', 301)}').catch(() => 0).then(done)", "", ""),
    "fetch_redirect_303": (f"fetch('{redirect_to(T + '/a', 303)}', {{method: 'POST', body: 'x'}})"
                           ".catch(() => 0).then(done)", "", ""),
    "post_307_redirect": (f"fetch('{redirect_to(T + '/v1/completions', 307)}', {{method: 'POST', "
                          "headers: {'Content-Type': 'application/json'}, body: JSON.stringify({prompt: 'hi'})})"
                          ".catch(() => 0).then(done)", "", ""),
    "post_308_redirect": (f"fetch('{redirect_to(T + '/v1/completions', 308)}', {{method: 'POST', body: 'x'}})"
                          ".catch(() => 0).then(done)", "", ""),
    "fetch_no_cors_redirect": (f"fetch('{redirect_to(T + '/a')}', {{mode: 'no-cors'}}).catch(() => 0).then(done)",
                               "", ""),
    "xhr_redirect": ("const x = new XMLHttpRequest(); x.onloadend = done; "
                     f"x.open('GET', '{redirect_to(T + '/x')}'); x.send();", "", ""),
    "chain_allowed_allowed_outside": (f"fetch('{redirect_to(redirect_to(redirect_to(T + '/chain')))}')"
                                      ".catch(() => 0).then(done)", "", ""),
    "img_redirect": ("setTimeout(done, 300)", f"<img src='{redirect_to(T + '/img.png')}'>", ""),
    "script_redirect": ("setTimeout(done, 300)", f"<script src='{redirect_to(T + '/s.js')}'></script>", ""),
    "iframe_redirect": ("setTimeout(done, 500)", f"<iframe src='{redirect_to(T + '/frame')}'></iframe>", ""),
    "stylesheet_redirect": ("setTimeout(done, 300)", "", f"<link rel=stylesheet href='{redirect_to(T + '/c.css')}'>"),
    "css_background_redirect": ("setTimeout(done, 300)",
                                f"<div style=\"width:9px;height:9px;background:url('{redirect_to(T + '/b.png')}')\">"
                                "</div>", ""),
    "video_redirect": ("setTimeout(done, 300)", f"<video src='{redirect_to(T + '/v.mp4')}' autoplay muted></video>",
                       ""),
    "eventsource_redirect": (f"const es = new EventSource('{redirect_to(T + '/events')}'); "
                             "es.onerror = () => { es.close(); done(); }; setTimeout(done, 1000);", "", ""),
    "worker_fetch_redirect": ("const w = new Worker('/worker.js?js=' + encodeURIComponent("
                              f"\"fetch('{redirect_to(T + '/w')}').catch(() => 0).then(() => postMessage(1))\")); "
                              "w.onmessage = done; setTimeout(done, 1500);", "", ""),
    "worker_import_scripts_redirect": ("const w = new Worker('/worker.js?js=' + encodeURIComponent("
                                       f"\"try {{ importScripts('{redirect_to(T + '/i.js')}') }} catch (e) {{}} "
                                       "postMessage(1)\")); w.onmessage = done; setTimeout(done, 1500);", "", ""),
    "worker_direct_fetch": ("const w = new Worker('/worker.js?js=' + encodeURIComponent("
                            f"\"fetch('{T}/w').catch(() => 0).then(() => postMessage(1))\")); "
                            "w.onmessage = done; setTimeout(done, 1500);", "", ""),
    "sendbeacon_redirect": (f"navigator.sendBeacon('{redirect_to(T + '/beacon', 307)}', 'data'); setTimeout(done, 300)",
                            "", ""),
    # page navigations (should already be blocked by the router)
    "navigation_redirect": (f"location.href = '{redirect_to(T + '/nav')}'", "", ""),
    "navigation_redirect_to_name": (f"location.href = '{redirect_to('http://sandbox-trainer.test:' + '__P__' + '/n')}'",
                                    "", ""),
    "meta_refresh": ("", "", f"<meta http-equiv='refresh' content='0;url={T}/meta'>"),
    "js_location": (f"location.href = '{T}/js'", "", ""),
    "form_post": ("document.forms[0].submit()", f"<form method=post action='{T}/v1/completions'>"
                                                "<input name=prompt value=hi></form>", ""),
    "window_open": (f"window.open('{T}/popup'); setTimeout(done, 300)", "", ""),
    "iframe_direct": ("setTimeout(done, 300)", f"<iframe src='{T}/frame'></iframe>", ""),
    # direct subresources and APIs to the other port
    "fetch_direct": (f"fetch('{T}/secret').catch(() => 0).then(done)", "", ""),
    "fetch_userinfo": (f"fetch('{T.replace('//', '//user:pw@')}/secret').catch(() => 0).then(done)", "", ""),
    "fetch_zero_address": (f"fetch('{T.replace('127.0.0.1', '0.0.0.0')}/secret').catch(() => 0).then(done)", "", ""),
    "fetch_localhost_alias": (f"fetch('{T.replace('127.0.0.1', 'localhost')}/secret').catch(() => 0).then(done)",
                              "", ""),
    "websocket": (f"const ws = new WebSocket('{T.replace('http', 'ws')}/ws'); ws.onerror = ws.onclose = done; "
                  "setTimeout(done, 1000)", "", ""),
    "prefetch_preconnect": ("setTimeout(done, 500)", "",
                            f"<link rel=preconnect href='{T}'><link rel=dns-prefetch href='{T}'>"
                            f"<link rel=prefetch href='{T}/p'>"),
    "img_direct": ("setTimeout(done, 300)", f"<img src='{T}/img.png'>", ""),
    "sendbeacon_direct": (f"navigator.sendBeacon('{T}/beacon', 'data'); setTimeout(done, 300)", "", ""),
}

# Chromium does not follow a beacon's redirect here at all (an allowed 307 target is not requested either), so
# there is no attempt to count; the trainer must still see nothing.
NOT_ATTEMPTED = {"sendbeacon_redirect"}


@pytest.mark.parametrize("name", list(VECTORS))
def test_hostile_page_cannot_reach_another_local_port(run, wenv, servers, name):
    site, trainer = servers
    t = f"http://127.0.0.1:{trainer.port}"
    js, body, head = (s.replace(T, t).replace(urllib.parse.quote(T, safe=""), urllib.parse.quote(t, safe=""))
                      .replace("__P__", str(trainer.port)) for s in VECTORS[name])
    before = len(trainer.connections)
    res = run(attempt(wenv, site, js, body, head), timeout=60)
    time.sleep(0.05)
    assert trainer.connections[before:] == [], f"{name}: the trainer's port got a connection"
    assert SECRET.decode() not in res.obs.text
    if name not in NOT_ATTEMPTED:
        assert res.info["blocked_requests"] >= 1, (name, res.info)


def test_agent_click_on_a_redirecting_link_is_blocked_and_counted(run, wenv, servers):
    """The agent itself follows a link of the site that redirects to the trainer's port: the navigation ends
    on an error page, nothing reaches the trainer, the redirect hop is counted as a blocked connection."""
    site, trainer = servers
    t = f"http://127.0.0.1:{trainer.port}"
    before = len(trainer.connections)

    async def go():
        task = env.Task("sandbox/click", "sandbox", "probe",
                        page_url(site, body=f"<a id='go' href='{redirect_to(t + '/nav')}'>go</a>"))
        await wenv.reset(task)
        n = await wenv.page.get_attribute("#go", "data-webagent-id")
        return await wenv.step(f'do(action="Click", element="{n}")')
    res = run(go())
    assert trainer.connections[before:] == []
    assert SECRET.decode() not in res.obs.text and not res.obs.url.startswith(t)
    assert res.info["blocked_kinds"].get("connection", 0) >= 1, res.info
    assert any(str(trainer.port) in u for u in wenv.blocked_urls)


def test_allowed_redirects_cookies_and_post_bodies_still_work(run, wenv, servers):
    """Through the proxy, allowed traffic is untouched: a redirect chain within the origin lands, a 307 POST
    keeps its body, a cookie set by a redirect response is sent on the next hop, a 3 MB body arrives whole,
    server-sent events stream (the first arrives before the response ends)."""
    site, _ = servers
    sse = ("new Promise(res => { const es = new EventSource('/sse'), got = []; "
           "es.onmessage = e => { got.push(e.data); if (got.length == 2) { es.close(); res(got); } }; "
           "setTimeout(() => res(got), 5000); })")
    js = (f"Promise.all([fetch('{redirect_to(redirect_to('/landed'))}').then(r => r.text()), "
          f"fetch('{redirect_to('/posted', 307)}', {{method: 'POST', body: 'abc'}}).then(r => r.status), "
          "fetch('/redirect?to=%2Fcookie&cookie=hop%3D1').then(r => r.text()), "
          f"fetch('/big').then(r => r.arrayBuffer()).then(b => b.byteLength), {sse}])"
          ".then(v => { window.__v = v; done(); })")

    async def go():
        task = env.Task("sandbox/ok", "sandbox", "probe", page_url(site, js))
        await wenv.reset(task)
        for _ in range(100):
            if await wenv.page.evaluate("window.__done === true"):
                break
            await asyncio.sleep(0.05)
        return await wenv.page.evaluate("window.__v"), wenv.blocked_requests
    v, blocked = run(go())
    assert v == ["<html><body>page /landed</body></html>", 200, "hop=1", 3_000_000, ["event0", "event1"]]
    assert blocked == 0


def test_miniwob_host_is_never_connected_to(run, wenv, servers):
    """The proxy refuses connections to a family's routed host (miniwob.local is served by the context's
    router and never resolved) without counting them; MiniWoB episodes block nothing."""
    wob = env.load_tasks("miniwob:click-button")[0]
    check = wenv.sandbox.proxy_check(("miniwob.local",), ("miniwob.local",))
    assert check("miniwob.local", 80) is None and check("127.0.0.1", 80) is False
    obs = run(wenv.reset(wob))
    assert "<button" in obs.text and wenv.blocked_requests == 0


def test_blocked_names_are_never_resolved(run, tmp_path, servers):
    """Chromium resolves no host name (``--host-resolver-rules``) and opens no connection but to the sandbox
    proxy, which refuses a blocked name before resolving it. Chromium's own net log of a page with a
    preconnect, a fetch and a redirect hop to a blocked name, and of the agent hovering and clicking links to
    it and to the trainer's port, shows no host resolution of the name and no TCP connection to the port.
    (Without the sandbox, plain Playwright routing, the same log shows the name resolved and a TCP connection
    to the port, which the port also accepts: speculative preconnects happen before request routing.)"""
    site, trainer = servers
    log_path = tmp_path / "netlog.json"
    name = "sandbox-blocked-name.test"
    t_name, t_ip = f"http://{name}:{trainer.port}", f"http://127.0.0.1:{trainer.port}"
    js = (f"fetch('{t_name}/f').catch(() => 0).then(() => fetch('{redirect_to(t_name + '/r')}'))"
          ".catch(() => 0).then(done)")
    head = f"<link rel=preconnect href='{t_name}'><link rel=dns-prefetch href='{t_name}'>"
    body = f"<a id='n' href='{t_name}/x'>name</a> <a id='i' href='{t_ip}/y'>ip</a>"
    before = len(trainer.connections)

    async def go():
        pool = env.BrowserPool(args=(f"--log-net-log={log_path}", "--net-log-capture-mode=Everything"))
        await pool.start()
        try:
            e = await pool.new_env(wait_s=0.3)
            await attempt(e, site, js, body, head)
            for link in ("n", "i"):
                n = await e.page.get_attribute(f"#{link}", "data-webagent-id")
                await e.step(f'do(action="Hover", element="{n}")')
                await e.step(f'do(action="Click", element="{n}")')
                await e.step("go_backward()")
            return list(e.blocked_urls)
        finally:
            await pool.close()
    urls = run(go(), timeout=120)
    assert trainer.connections[before:] == []
    assert any(name in u for u in urls) and any(t_ip in u for u in urls), urls
    log = json.loads(log_path.read_text())
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    events = [(types.get(ev["type"], ""), json.dumps(ev.get("params", {}))) for ev in log["events"]]
    assert any(name in p for _, p in events), "the net log recorded the page's attempts"
    assert [(t, p) for t, p in events if "HOST_RESOLVER" in t and name in p] == []
    tcp = [p for t, p in events if t.startswith("TCP_CONNECT")]
    assert tcp, "the net log records TCP connections (to the sandbox proxy)"
    assert [p for p in tcp if f":{trainer.port}" in p] == []


# A service worker that answers every request of its scope with this text (if one ever got registered, the
# next episode's page on the origin would read it instead of the site's).
HIJACK = "HIJACKED-BY-A-WORKER"
SW_JS = ("self.addEventListener('install', e => self.skipWaiting()); "
         "self.addEventListener('activate', e => e.waitUntil(self.clients.claim())); "
         f"self.addEventListener('fetch', e => e.respondWith(new Response('<p>{HIJACK}</p>', "
         "{headers: {'Content-Type': 'text/html'}})));")
SW_URL = "/worker.js?" + urllib.parse.urlencode({"js": SW_JS})
# Ways a page can reach ServiceWorkerContainer.register: the plain call, the prototype's method after trying to
# restore it, a fresh same-origin iframe's copy, an srcdoc iframe's own script, a popup's copy.
SW_REGISTER = {
    "plain": "navigator.serviceWorker.register(u, {scope: '/'})",
    "prototype": ("(delete ServiceWorkerContainer.prototype.register, "
                  "ServiceWorkerContainer.prototype.register.call(navigator.serviceWorker, u, {scope: '/'}))"),
    "iframe": ("(() => { const f = document.createElement('iframe'); document.body.appendChild(f); "
               "return f.contentWindow.navigator.serviceWorker.register(u, {scope: '/'}); })()"),
    "srcdoc": ("new Promise((res, rej) => { const f = document.createElement('iframe'); "
               "f.srcdoc = '<script>parent.__p = navigator.serviceWorker.register(' + JSON.stringify(u) + ')<' + "
               "'/script>'; f.onload = () => parent.__p.then(res, rej); document.body.appendChild(f); })"),
    "popup": ("new Promise((res, rej) => { const w = window.open('about:blank'); if (!w) return rej('no popup'); "
              "w.navigator.serviceWorker.register(u, {scope: '/'}).then(res, rej); })"),
}


@pytest.mark.parametrize("how", list(SW_REGISTER))
def test_service_worker_registration_is_refused(run, wenv, servers, how):
    """A hostile page registering a service worker (which would answer every later request of its origin)
    gets a rejected promise, whichever way it reaches ``register`` (Playwright's own block resolves it to
    undefined, which reads as success); no worker starts and no registration exists."""
    site, _ = servers
    js = (f"const u = {json.dumps(SW_URL)}; "
          f"Promise.resolve().then(() => {SW_REGISTER[how]})"
          ".then(r => { window.__sw = 'resolved: ' + r; }, e => { window.__sw = 'refused: ' + (e.name || e); })"
          ".then(() => setTimeout(done, 300))")

    async def go():
        res = await attempt(wenv, site, js)
        regs = await wenv.page.evaluate("navigator.serviceWorker.getRegistrations().then(r => r.length)")
        return await wenv.page.evaluate("window.__sw"), regs, res.info.get("blocked_kinds", {})
    outcome, regs, kinds = run(go(), timeout=60)
    assert outcome == "refused: SecurityError", outcome
    assert regs == 0 and "service_worker" not in kinds


class ReusingSite(env.TaskFamily):
    """A family on the test site's secure origin (127.0.0.1) whose contexts are reused between episodes, as
    MiniWoB's are (MiniWoB's own origin is not a secure context, so it has no service worker API)."""
    name = "sandbox-reuse"
    reuse_context = True


def test_a_service_worker_that_starts_anyway_ends_with_its_context(run, wenv, servers):
    """The second layer: a worker registered from outside the page's JavaScript (a CDP isolated world, which
    the page-level refusal does not reach) is seen starting, counted as blocked, and its context is not reused,
    so the next episode of a family that reuses contexts is served by the site, with no registration left."""
    site, _ = servers
    env.register_family(ReusingSite())
    first = env.Task("sandbox/sw1", "sandbox", "probe", f"{site}/first", family="sandbox-reuse")
    second = env.Task("sandbox/sw2", "sandbox", "probe", f"{site}/second", family="sandbox-reuse")

    async def go():
        await wenv.reset(first)
        await wenv.reset(first)
        reused = wenv.context                           # the family's contexts are reused ...
        cdp = await reused.new_cdp_session(wenv.page)
        frame = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]
        world = await cdp.send("Page.createIsolatedWorld", {"frameId": frame, "worldName": "outside"})
        got = await cdp.send("Runtime.evaluate", {
            "expression": f"navigator.serviceWorker.register({json.dumps(SW_URL)}, {{scope: '/'}})"
                          ".then(() => 'registered')",
            "contextId": world["executionContextId"], "awaitPromise": True})
        for _ in range(100):
            if wenv.blocked_kinds.get("service_worker"):
                break
            await asyncio.sleep(0.05)
        kinds = dict(wenv.blocked_kinds)
        obs = await wenv.reset(second)
        regs = await wenv.page.evaluate("navigator.serviceWorker.getRegistrations().then(r => r.length)")
        return got["result"].get("value"), kinds, wenv.context is reused, obs.text, regs
    try:
        registered, kinds, same_context, text, regs = run(go(), timeout=60)
    finally:
        tasks._FAMILIES.pop("sandbox-reuse", None)
    assert registered == "registered"
    assert kinds.get("service_worker") == 1, kinds
    assert not same_context and regs == 0
    assert HIJACK not in text and "page /second" in text


class V6Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def serve(server: http.server.HTTPServer) -> http.server.HTTPServer:
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_https_and_ipv6_origins_through_the_proxy(run, servers):
    """Allowed traffic works and nothing else gets out when the task's site is HTTPS (a self-signed
    certificate, TLS tunnelled untouched through the SOCKS proxy) or an IPv6 literal ([::1]), with a trainer
    stand-in on 127.0.0.1 and another on [::1]: the page's fetches, redirect hops, WebSockets and the agent's
    own navigation to the other ports, under every spelling of the addresses, reach neither trainer."""
    _, trainer = servers
    before = len(trainer.connections)
    trainer6 = Trainer("::1")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(str(pathlib.Path(__file__).parent / "selfsigned-localhost.pem"))
    https = serve(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site))
    https.socket = tls.wrap_socket(https.socket, server_side=True)
    v6 = serve(V6Server(("::1", 0), Site))
    sites = {"https": f"https://127.0.0.1:{https.server_address[1]}", "ipv6": f"http://[::1]:{v6.server_address[1]}"}
    t4, t6 = trainer.port, trainer6.port
    outside = [f"http://127.0.0.1:{t4}/a", f"https://127.0.0.1:{t4}/a", f"http://[::1]:{t6}/a",
               f"https://[::1]:{t6}/a", f"http://[0:0:0:0:0:0:0:1]:{t6}/a", f"http://[::ffff:127.0.0.1]:{t4}/a",
               f"http://[::ffff:7f00:1]:{t4}/a", f"http://localhost:{t4}/a", f"http://[::1]:{t4}/a"]
    hostile = " ".join(
        [f"fetch({json.dumps(u)}).catch(() => 0)," for u in outside]
        + [f"fetch({json.dumps(redirect_to(u))}).catch(() => 0)," for u in outside]
        + [f"new Promise(r => {{ const w = new WebSocket({json.dumps(u.replace('http', 'ws', 1))}); "
           "w.onerror = w.onclose = r; setTimeout(r, 1000); }),"
           for u in outside[:3]])
    # the allowed part: a redirect within the origin, a cookie set on a hop, a POST body through a 307
    allowed = (f"fetch({json.dumps(redirect_to(redirect_to('/landed')))}).then(r => r.text()), "
               "fetch('/redirect?to=%2Fcookie&cookie=hop%3D1').then(r => r.text()), "
               f"fetch({json.dumps(redirect_to('/posted', 307))}, {{method: 'POST', body: 'abc'}}).then(r => r.status)")
    js = (f"Promise.all([{allowed}]).then(v => {{ window.__v = v; }}, e => {{ window.__v = String(e); }})"
          f".then(() => Promise.all([{hostile}])).then(done)")

    async def go(pool):
        e = await pool.new_env(wait_s=0.3)
        got = {}
        for kind, site in sites.items():
            res = await attempt(e, site, js)
            value = await e.page.evaluate("window.__v")
            n = 0
            for u in outside[:3]:                          # the agent clicks links to the trainers itself
                link = page_url(site, body=f"<a id=l href='{u}'>go</a>")
                await e.reset(env.Task(f"sandbox/{kind}", "sandbox", "probe", link))
                n = await e.page.get_attribute("#l", "data-webagent-id")
                await e.step(f'do(action="Click", element="{n}")')
            got[kind] = (res.obs.url, value, res.info.get("blocked_requests", 0), e.page.url)
        await e.close()
        return got

    async def with_pool():
        pool = env.BrowserPool(args=("--ignore-certificate-errors",))   # the site's certificate is self-signed
        await pool.start()
        try:
            return await go(pool)
        finally:
            await pool.close()
    try:
        got = run(with_pool(), timeout=180)
    finally:
        for server in (https, v6):
            server.shutdown()
            server.server_close()
        trainer6.sock.close()
    time.sleep(0.1)
    assert trainer.connections[before:] == [] and trainer6.connections == []
    for kind, (url, value, blocked, last_url) in got.items():
        assert url.startswith(sites[kind]), (kind, url)
        assert value == ["<html><body>page /landed</body></html>", "hop=1", 200], (kind, value)
        assert blocked >= len(outside), (kind, blocked)
        assert not any(last_url.startswith(u.rsplit("/", 1)[0]) for u in outside), (kind, last_url)
