"""The security sandbox: a browser context reaches only the origins (host:port) of its task.

Two layers. The request router (``Sandbox``, one per env: Playwright routes that abort, in the driver, every
request outside the allow-list, and count it with its resource type) and the ``SandboxProxy`` (SOCKS5, one
listener per context): every connection of a context goes through it, and it refuses any other host:port
before a name is resolved or a connection opened, which catches what the router never sees (redirect hops,
workers, preconnects). Chromium resolves no name itself (``chromium.LAUNCH_ARGS``); WebRTC is removed and
service-worker registration refused in every frame (``NO_WEBRTC_JS``, ``NO_SERVICE_WORKER_JS``); downloads
are off. The program_html probe (webarena_rubrics.py) and the logins (webarena_helpers.py) get contexts with
the same proxy (``new_proxied_context``).

- Allow-list entries: "host:port", a bare "host" (any port), or "file" (file:// URLs): ``host_entry(url)``,
  ``origin_allowed``, ``url_allowed``, ``outside_hosts_re``.
- ``proxy_host()`` / ``address_toward(url)``: where the proxy listens when the browsers run on other machines
  (docs/environment.md, "Browsers on other machines").
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import socket
import threading
import time
from typing import Any, Sequence
from urllib.parse import urlsplit

from playwright.async_api import Error as PlaywrightError

log = logging.getLogger("webagent.env")


_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def _host_port(url: str) -> tuple[str, int] | None:
    """(host, port) of an http(s)/ws(s) URL, the scheme's default port filled in; None for other URLs."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    return (host, port or _DEFAULT_PORTS[scheme]) if host else None


def host_entry(url: str) -> str:
    """The allow-list entry that admits ``url``: the origin "host:port" of an http(s)/ws(s) URL (the
    scheme's default port filled in), else its scheme ("file"; "" for a relative one), e.g.
    ``host_entry("http://127.0.0.1:7770/a") == "127.0.0.1:7770"``, ``host_entry("https://x.org/") ==
    "x.org:443"``."""
    hp = _host_port(url)
    if hp is None:
        scheme = urlsplit(url.strip()).scheme.lower()
        # "localhost:7770" (no scheme) parses as scheme "localhost": never let that become a bare host entry
        return scheme if scheme == "file" or "://" in url else ""
    host, port = hp
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@functools.lru_cache(maxsize=1024)
def _split_entry(entry: str) -> tuple[str, int | None]:
    """("host", port) of an allow-list entry "host:port" / "[v6]:port"; port None for a bare "host"."""
    e = entry.strip().lower()
    if e.startswith("["):
        host, _, rest = e[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif e.count(":") == 1:
        host, port = e.split(":")
    else:
        host, port = e, ""
    return host, (int(port) if port.isdigit() else None)


def origin_allowed(allowed: Sequence[str], host: str, port: int) -> bool:
    """Is ``host:port`` admitted by an entry of ``allowed`` ("host:port", or a bare "host" = any port)?"""
    host = host.lower().strip("[]")
    for entry in allowed:
        h, p = _split_entry(entry)
        if h == host and (p is None or p == port):
            return True
    return False


def url_allowed(allowed: Sequence[str], url: str) -> bool:
    """May a context with allow-list ``allowed`` request ``url``? data:, blob:, about: always; file: when
    "file" is listed; http(s)/ws(s) when its host:port is (``origin_allowed``); nothing else."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("data", "blob", "about", "chrome-error"):
        return True
    if scheme == "file":
        return "file" in allowed
    hp = _host_port(url)
    return hp is not None and origin_allowed(allowed, *hp)


@functools.lru_cache(maxsize=256)
def outside_hosts_re(allowed: tuple[str, ...]) -> re.Pattern:
    """A regex matching every URL outside `allowed` (entries "host:port", a bare "host" = any port, or
    "file"); a URL without a port has its scheme's default (http/ws 80, https/wss 443). data:, blob: and
    about: URLs are never matched. Matched in Playwright's driver, so allowed requests cost nothing there
    (the sandbox proxy still checks every connection, redirect hops included)."""
    ui = r"(?:[^/?#@]*@)?"
    alts = []
    for entry in allowed:
        if entry == "file":
            continue
        host, port = _split_entry(entry)
        h = ui + (rf"\[{re.escape(host)}\]" if ":" in host else re.escape(host))
        if port is None:
            alts.append(rf"(?:https?|wss?)://{h}(?::\d+)?")
        elif port in (80, 443):
            plain, tls = ("http|ws", "https|wss") if port == 80 else ("https|wss", "http|ws")
            alts.append(rf"(?:{plain})://{h}(?::{port})?|(?:{tls})://{h}:{port}")
        else:
            alts.append(rf"(?:https?|wss?)://{h}:{port}")
    hosts = "|".join(alts) or r"(?!)"
    ok = r"data:|blob:|about:" + (r"|file:" if "file" in allowed else "")
    return re.compile(rf"^(?!(?:{ok})|(?:{hosts})(?:[/?#]|$))", re.I)


# ---- the sandbox proxy: every connection a context opens is checked against its allow-list ----

class SandboxProxy:
    """A SOCKS5 proxy on 127.0.0.1 that every browser context of this process connects through (one listening
    port per context, Playwright's per-context ``proxy``), running in its own thread and event loop so a busy
    trainer loop does not stall page loads.

    Why: Playwright's request router sees only the first request of a redirect chain, so an allowed page's
    own ``/redirect?to=http://127.0.0.1:<port>/`` reached any local service. Through a proxy Chromium opens
    no connection itself: each one, every redirect hop, worker fetch, WebSocket, EventSource, preconnect
    and beacon included, is a SOCKS CONNECT to ``host:port`` that ``check(host, port)`` allows (the bytes are
    then piped both ways untouched: cookies, POST bodies, TLS and streaming responses as they are) or refuses
    before any name is resolved or any connection opened. SOCKS5 hands the host name to the proxy, so
    Chromium does not resolve names either (``--host-resolver-rules`` makes sure of that).
    ``check`` returns True (connect), False (refuse: a blocked attempt) or None (refuse silently: a host the
    context's own router serves, such as miniwob.local, which a speculative preconnect may name)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._loop = asyncio.new_event_loop()
        self._servers: dict[int, Any] = {}
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandbox-proxy", daemon=True)
        self._thread.start()

    async def listen(self, check: Any) -> int:
        """Start a listener whose connections are checked by ``check(host, port)``; returns its port. It listens
        on ``proxy_host()``: 127.0.0.1, or once browsers on other machines use it the address they reach it
        at; on every interface only when that address is not this machine's own (NAT)."""
        bind = proxy_host()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._client(reader, writer, check)

        async def start() -> Any:
            try:
                return await asyncio.start_server(serve, bind, 0)
            except OSError:
                if bind == "127.0.0.1":
                    raise
                return await asyncio.start_server(serve, "0.0.0.0", 0)
        fut = asyncio.run_coroutine_threadsafe(start(), self._loop)
        srv = await asyncio.wait_for(asyncio.wrap_future(fut), 30)
        port = srv.sockets[0].getsockname()[1]
        self._servers[port] = srv
        return port

    def close(self, port: int | None) -> None:
        """Stop listener ``port`` (its open tunnels end with their context)."""
        srv = self._servers.pop(port, None) if port is not None else None
        if srv is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(srv.close)

    async def _client(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, check: Any) -> None:
        up_w = None
        refuse = b"\x05\x02\x00\x01" + bytes(6)          # reply 2: connection not allowed by ruleset
        try:
            hello = await asyncio.wait_for(r.readexactly(2), 10)
            if hello[0] != 5:
                return
            await asyncio.wait_for(r.readexactly(hello[1]), 10)
            w.write(b"\x05\x00")                          # no authentication
            ver, cmd, _, atyp = await asyncio.wait_for(r.readexactly(4), 10)
            if atyp == 1:
                host = socket.inet_ntop(socket.AF_INET, await r.readexactly(4))
            elif atyp == 4:
                host = socket.inet_ntop(socket.AF_INET6, await r.readexactly(16))
            elif atyp == 3:
                host = (await r.readexactly((await r.readexactly(1))[0])).decode("ascii", "replace")
            else:
                w.write(b"\x05\x08\x00\x01" + bytes(6))
                return
            port = int.from_bytes(await r.readexactly(2), "big")
            if ver != 5 or cmd != 1:                      # CONNECT only (no BIND, no UDP ASSOCIATE)
                w.write(b"\x05\x07\x00\x01" + bytes(6))
                return
            try:
                ok = check(host.lower(), port)
            except Exception:                             # a broken check never opens the sandbox
                log.exception("sandbox proxy check failed for %s:%d", host, port)
                ok = False
            if not ok:
                w.write(refuse)
                return
            try:
                up_r, up_w = await asyncio.wait_for(asyncio.open_connection(host, port), 15)
            except (OSError, asyncio.TimeoutError):
                w.write(b"\x05\x05\x00\x01" + bytes(6))   # connection refused
                return
            w.write(b"\x05\x00\x00\x01" + bytes(6))
            pipes = [asyncio.ensure_future(self._pipe(r, up_w)), asyncio.ensure_future(self._pipe(up_r, w))]
            # either side closing ends the tunnel (a browser never half-closes an HTTP connection)
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            for p in pipes:
                p.cancel()
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            for writer in (w, up_w):
                if writer is not None:
                    with contextlib.suppress(Exception):
                        writer.close()

    @staticmethod
    async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await r.read(1 << 16):
                w.write(data)
                await w.drain()


_sandbox_proxy: SandboxProxy | None = None
_sandbox_proxy_lock = threading.Lock()


def sandbox_proxy() -> SandboxProxy:
    """This process's SandboxProxy, started on first use (again in a forked child, whose threads are gone)."""
    global _sandbox_proxy
    with _sandbox_proxy_lock:
        if _sandbox_proxy is None or _sandbox_proxy.pid != os.getpid():
            _sandbox_proxy = SandboxProxy()
        return _sandbox_proxy


_proxy_host_toward: dict[str, str] = {}     # set by a BrowserPool with endpoints: this machine's address toward them


def proxy_host() -> str:
    """Where the sandbox proxy listens and browsers connect to it: $WEBAGENT_PROXY_HOST when set; else, once a
    BrowserPool has browser servers (``--browser-endpoint``), the address this machine uses toward the first
    of them (``address_toward``; 127.0.0.1 for a server on this machine); else 127.0.0.1."""
    return (os.environ.get("WEBAGENT_PROXY_HOST", "").strip() or _proxy_host_toward.get("host") or "127.0.0.1")


def address_toward(url: str) -> str:
    """This machine's address on the route to ``url``'s host (a UDP socket's local address after connect():
    no packet is sent), e.g. "10.0.0.2" toward ws://10.0.0.7:3000/, "127.0.0.1" toward a local server."""
    parts = urlsplit(url)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(parts.hostname or "127.0.0.1"), parts.port or 80))
        host = s.getsockname()[0]
    return "127.0.0.1" if host.startswith("127.") else host


def proxy_toward(endpoint: str) -> None:
    """Browsers run behind ``endpoint`` (a browser server, maybe on another machine): unless an earlier pool
    said so already, the proxy listens at this machine's address toward it from now on (``proxy_host``)."""
    if "host" not in _proxy_host_toward:
        try:
            _proxy_host_toward["host"] = address_toward(endpoint)
        except OSError as e:             # no route to it now: the connection will say so
            log.warning("no route to browser server %s (%s)", urlsplit(endpoint).netloc, e)   # not its token


def proxy_settings(port: int) -> dict[str, str]:
    """Playwright's ``new_context(proxy=...)`` for a SandboxProxy listener. Playwright adds "<-loopback>" to the
    bypass list (Chromium otherwise sends localhost/127.0.0.1 direct); it is given here too, explicitly."""
    return {"server": f"socks5://{proxy_host()}:{port}", "bypass": "<-loopback>"}


async def new_proxied_context(browser: Any, allowed: Sequence[str] | set[str], *, timeout: float | None = None,
                              **kwargs: Any) -> Any:
    """``browser.new_context(**kwargs)`` whose every connection goes through a SandboxProxy listener that
    admits only ``allowed`` (origins, read at each connection: the caller may add to a set), the listener
    closed with the context. For contexts besides the envs' own (the program_html probe, logins)."""
    proxy = sandbox_proxy()
    port = await proxy.listen(lambda host, p: origin_allowed(tuple(allowed), host, p))
    try:
        ctx = await asyncio.wait_for(browser.new_context(proxy=proxy_settings(port), **kwargs), timeout)
    except BaseException:
        proxy.close(port)
        raise
    ctx.on("close", lambda _c: proxy.close(port))
    return ctx


# ---- one env's request router and its count of blocked attempts ----

class Sandbox:
    """The request router of one env's contexts, and its count of what it blocked in the current episode
    (``blocked_requests``; ``blocked_kinds`` per kind: a resource type, "websocket", "connection" or
    "service_worker"; the first 20 ``blocked_urls``). ``allowed`` is the running episode's allow-list.

    >>> sandbox = Sandbox()                                                       # doctest: +SKIP
    >>> sandbox.allowed = ("miniwob.local",)                                      # doctest: +SKIP
    >>> port = await sandbox_proxy().listen(sandbox.proxy_check(sandbox.allowed, ()))  # doctest: +SKIP
    >>> await sandbox.route_requests(context, 10.0)    # before any tab opens     # doctest: +SKIP
    >>> await sandbox.guard_page(context, 10.0)                                   # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.allowed: tuple[str, ...] = ()
        self._lock = threading.Lock()           # the proxy thread counts blocked connections too
        self.new_episode()

    def new_episode(self) -> None:
        """The counts start again from zero."""
        self.blocked_requests = 0
        self.blocked_urls: list[str] = []
        self.blocked_kinds: dict[str, int] = {}
        # host:port -> (when, layer) of its last blocked attempt not yet matched by the other layer's
        self._recent: dict[str, tuple[float, str]] = {}

    async def route_requests(self, context: Any, timeout_s: float) -> None:
        """On a new context, before its family's own routes and its first tab: requests outside
        ``self.allowed`` are aborted and counted. Only those reach Python (a regex matched in the driver), so
        allowed traffic flows without a round trip. A context is never reused for a task with other hosts."""
        await asyncio.wait_for(context.route(outside_hosts_re(self.allowed), self._route_request), timeout_s)

    async def guard_page(self, context: Any, timeout_s: float) -> None:
        """After the family's routes, before the first tab: WebSockets outside ``self.allowed`` are closed and
        counted; WebRTC and service-worker registration are off in every frame."""
        await asyncio.wait_for(context.route_web_socket("**/*", self._route_ws), timeout_s)
        await asyncio.wait_for(context.add_init_script(NO_WEBRTC_JS), timeout_s)
        await asyncio.wait_for(context.add_init_script(NO_SERVICE_WORKER_JS), timeout_s)

    def count(self, url: str, kind: str, origin: str = "") -> None:
        """Count one blocked attempt. A navigation outside the allow-list reaches both layers (Chromium's
        speculative connection at navigation start is refused by the proxy, the request by the router), in
        either order: the second sighting of an origin within 2 s by the other layer is the same attempt,
        counted once under the router's kind (a resource type) rather than as a "connection"."""
        layer = "proxy" if kind == "connection" else "router"
        with self._lock:
            now = time.monotonic()
            if origin:
                seen = self._recent.pop(origin, None)
                if seen is not None and now - seen[0] < 2.0 and seen[1] != layer:
                    if layer == "proxy":
                        return
                    self.blocked_requests -= 1                  # the proxy's count becomes the router's
                    self.blocked_kinds["connection"] -= 1
                    if not self.blocked_kinds["connection"]:
                        del self.blocked_kinds["connection"]
                    with contextlib.suppress(ValueError):
                        self.blocked_urls.remove(origin)
                else:
                    self._recent[origin] = (now, layer)
            self.blocked_requests += 1
            self.blocked_kinds[kind] = self.blocked_kinds.get(kind, 0) + 1
            if len(self.blocked_urls) < 20:
                self.blocked_urls.append(url[:200])

    def proxy_check(self, allowed: tuple[str, ...], routed: tuple[str, ...]) -> Any:
        """The sandbox proxy's check for one context (called in the proxy's thread): True = connect, False =
        refuse and count, None = refuse silently (a host the context's router serves, never connected)."""
        def check(host: str, port: int) -> bool | None:
            if origin_allowed(routed, host, port):
                return None
            if origin_allowed(allowed, host, port):
                return True
            origin = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self.count(origin, "connection", origin)
            return False
        return check

    async def _route_request(self, route: Any) -> None:
        req = route.request
        self.count(req.url, req.resource_type or "other", host_entry(req.url))
        with contextlib.suppress(PlaywrightError):        # the context may close meanwhile
            await route.abort("blockedbyclient")

    async def _route_ws(self, ws: Any) -> None:
        if url_allowed(self.allowed, ws.url):
            ws.connect_to_server()
        else:
            self.count(ws.url, "websocket")
            with contextlib.suppress(PlaywrightError):
                await ws.close()


# WebRTC opens UDP/TCP connections (STUN/TURN) that request routing never sees: a page could reach any host and
# port with it. The agent needs none of it: the constructors are removed in every frame before page scripts run.
NO_WEBRTC_JS = r"""(() => {
  for (const k of ['RTCPeerConnection', 'webkitRTCPeerConnection', 'RTCDataChannel', 'RTCIceCandidate',
                   'RTCSessionDescription', 'RTCRtpSender', 'RTCRtpReceiver', 'RTCRtpTransceiver']) {
    try { delete window[k]; } catch (e) { /* not configurable: leave it */ }
  }
})();"""

# Service workers: Playwright's service_workers="block" replaces register() with a stub that resolves to
# undefined, which a page reads as success; this one refuses, as a browser with workers disabled does.
# Non-configurable, so a page script cannot put the original back from the prototype.
NO_SERVICE_WORKER_JS = r"""(() => {
  const proto = self.ServiceWorkerContainer && ServiceWorkerContainer.prototype;
  if (!proto) return;                                   // not a secure context: no service worker API at all
  const refuse = () => Promise.reject(new DOMException('service workers are disabled in this browser',
                                                       'SecurityError'));
  try { Object.defineProperty(proto, 'register', {value: refuse, writable: false, configurable: false}); }
  catch (e) { /* already locked */ }
})();"""
