"""Hostile pages for the hang guard (env/hangs.py), served on 127.0.0.1: scripts that hold the main thread on a
click, during the load, after it or forever, dialog loops, and a working page that computes without pause in
short tasks. tests/test_env_hangs.py and bench/bench_verdicts.py's hung-page rows use them."""
from __future__ import annotations

import contextlib
import functools
import http.server
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import env

PAGES = {
    "busy-click": '<button onclick="while (true) {}">busy</button>',
    "busy-load": "<p>loading</p><script>while (true) {}</script><button>after</button>",
    "busy-after": "<button>ok</button><script>setTimeout(() => { while (true) {} }, 300)</script>",
    "busy-always": "<button>ok</button><script>setInterval(() => { while (true) {} }, 50)</script>",
    "dialogs": "".join(f'<button onclick="while (true) {{ {f}(\'again?\') }}">{f}</button>'
                       for f in ("alert", "confirm", "prompt")),
    # a working page that computes all the time, in tasks of 300 ms: busy, never hung
    "chunks": '<button onclick="this.textContent = \'clicked\'">ok</button><script>'
              "setTimeout(function work() { const t = performance.now(); while (performance.now() - t < 300) {} "
              "setTimeout(work, 0); }, 0)</script>",
}


@contextlib.contextmanager
def serve() -> Iterator[str]:
    """Serve PAGES (``<name>.html``) over HTTP on 127.0.0.1 while the block runs; yields the base URL."""
    with tempfile.TemporaryDirectory() as root:
        for name, body in PAGES.items():
            Path(root, f"{name}.html").write_text(
                f"<html><head><title>{name}</title></head><body>{body}</body></html>")

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=root))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


def hostile(url: str, name: str) -> env.Task:
    return env.Task(f"test/{name}", "test", "stay responsive", f"{url}/{name}.html")
