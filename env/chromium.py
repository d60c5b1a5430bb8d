"""Chromium for the browser pool: where the browser is (``find_chromium``), the flags every launch takes
(``LAUNCH_ARGS``: a closed network), and browsers on other machines: ``start_browser_server`` runs Playwright's
``run-server`` (scripts/browser_server.py), ``browser_endpoints`` reads ``--browser-endpoint`` /
$WEBAGENT_BROWSER_ENDPOINT and keeps the endpoints' secret paths out of logs (``redact_endpoint``)."""
from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import re
import socket
import time
from pathlib import Path
from typing import Any, Sequence

from .tasks import SECRETS, redact

log = logging.getLogger("webagent.env")


# Flags for a closed network: nothing phones home, nothing waits on a network that is not there.
LAUNCH_ARGS = (
    "--disable-gpu", "--disable-quic", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--disable-breakpad", "--disable-domain-reliability",
    "--disable-client-side-phishing-detection", "--dns-prefetch-disable", "--metrics-recording-only",
    "--disable-dev-shm-usage", "--mute-audio", "--password-store=basic", "--use-mock-keychain",
    "--disable-features=Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions,"
    "CertificateTransparencyComponentUpdater,AutofillServerCommunication",
    # No name is resolved by Chromium itself: every context connects through the sandbox proxy (SOCKS5 hands
    # it the host name), which resolves allowed names only. 127.0.0.1 is excluded so that the proxy itself
    # (an IP literal, which the rule would otherwise also map) stays reachable.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    # A scroll by key (a space typed outside a text field, Page Down) jumps instead of gliding for ~150 ms, so that
    # the next observation does not depend on how soon a busy machine reads it.
    "--disable-smooth-scrolling",
)


def start_browser_server(port: int | None = None, *, host: str = "127.0.0.1", token: str | None = None,
                         max_clients: int | None = None) -> tuple[Any, str]:
    """A Playwright browser server on this machine, the way the pool needs one (``python -m playwright
    run-server --unsafe``, its endpoint path a fresh random token unless ``token`` is given; token "" = the
    bare ``/``): (its process, its ``ws://HOST:PORT/TOKEN`` endpoint). ``scripts/browser_server.py`` starts
    one on a browser machine; the tests and benchmarks of ``--browser-endpoint`` start theirs here.
    ``--unsafe`` lets a pool send its launch flags and $WEBAGENT_REMOTE_CHROMIUM, and any client that knows
    the endpoint launch any program: the token is what keeps others out (docs/environment.md). ``max_clients``:
    connections the server takes at once (one per BrowserPool). Stop it with ``stop_browser_server``."""
    import secrets
    import subprocess
    import sys
    import tempfile
    if port is None:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
    token = secrets.token_urlsafe(24) if token is None else token
    cmd = [sys.executable, "-m", "playwright", "run-server", "--port", str(port), "--host", host,
           "--path", "/" + token, "--unsafe"] + (["--max-clients", str(max_clients)] if max_clients else [])
    log = tempfile.NamedTemporaryFile("w+", prefix="run-server-", suffix=".log", delete=False)   # never a full pipe
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if "Listening on" in open(log.name).read():
            return proc, f"ws://{'[' + host + ']' if ':' in host else host}:{port}/{token}"
        time.sleep(0.1)
    stop_browser_server(proc)
    raise RuntimeError("playwright run-server did not start: " + open(log.name).read()[-2000:])


def stop_browser_server(proc: Any) -> None:
    """Kill a ``start_browser_server`` process and the browsers it launched, and wait until every process of its
    group has exited: the Python wrapper can be reaped while its Node server, killed by the same signal, still
    holds the port for a moment (a client then still connected)."""
    import signal
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.time() + 30
    while _group_running(proc.pid) and time.time() < deadline:
        time.sleep(0.02)


def _group_running(pgid: int) -> bool:
    """Whether a thread of group ``pgid`` is still running, from /proc; False where there is no /proc. Threads,
    not processes: a killed multi-threaded process (Node) shows its leader as a zombie while its other threads
    still tear down, and the process's sockets close only when the last of them has exited."""
    for stat in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:                     # exited while we looked
            continue
        state, _ppid, pgrp = text[text.rindex(")") + 2:].split()[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            return True
    return False


def find_chromium(bundled_path: str | None = None) -> str | None:
    """The Chromium to launch: $WEBAGENT_CHROMIUM, else Playwright's bundled browser when its executable
    exists (returns None = Playwright's default), else a system Chromium on PATH or /usr/bin/chromium."""
    env_path = os.environ.get("WEBAGENT_CHROMIUM")
    if env_path:
        if not os.path.exists(env_path):
            raise FileNotFoundError(f"WEBAGENT_CHROMIUM={env_path} does not exist")
        return env_path
    if bundled_path and os.path.exists(bundled_path):
        return None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.path.exists("/usr/bin/chromium"):
        return "/usr/bin/chromium"
    raise FileNotFoundError("no Chromium found: run `.venv/bin/python -m playwright install chromium`, "
                            "install Debian's `chromium`, or set WEBAGENT_CHROMIUM")


_warned_bare: set[str] = set()          # endpoints without a secret path, warned about once each


def browser_endpoints(value: str | Sequence[str] | None = None) -> list[str]:
    """Playwright browser servers to connect to: ``value`` (comma- or space-separated ws:// URLs, or a list),
    else $WEBAGENT_BROWSER_ENDPOINT; [] = launch Chromium here. Each endpoint's path (the server's token) is
    registered as a secret (``tasks.redact``); a bare or short path to another machine is warned about once."""
    if value is None:
        value = os.environ.get("WEBAGENT_BROWSER_ENDPOINT", "")
    items = re.split(r"[\s,]+", value.strip()) if isinstance(value, str) else list(value)
    out = [e for e in items if e]
    for e in out:
        m = re.match(r"wss?://(\[[^\]]*\]|[^/:]*)(:\d+)?(/.*)?$", e)
        if not m:
            raise ValueError(f"browser endpoint {redact(e)!r}: expected a ws:// URL of `playwright run-server`")
        host, path = m.group(1).strip("[]"), (m.group(3) or "/").strip("/")
        if len(path) >= 8:                   # a shorter one is no secret, and redacting it would garble logs
            SECRETS.add(path)
        if len(path) < 16 and not _is_loopback(host) and e not in _warned_bare:
            _warned_bare.add(e)
            log.warning("browser endpoint %s has no secret path: whoever reaches that port can launch any program "
                        "on that machine (the server runs with --unsafe). Start the server with "
                        "scripts/browser_server.py and use the endpoint it prints (docs/environment.md)", redact(e))
    return out


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def redact_endpoint(endpoint: str) -> str:
    """How a browser server's endpoint appears in logs: ``ws://10.0.0.7:3000/<token>``."""
    m = re.match(r"(wss?://[^/]*)/(.+)$", endpoint)
    return f"{m.group(1)}/<token>" if m else endpoint
