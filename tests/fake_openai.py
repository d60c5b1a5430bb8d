"""A local OpenAI-compatible chat-completions server for tests (prompting baselines, the CoT teacher).

Subclass ``ChatHandler`` and implement ``chat(body)``; run it with ``with serve(Handler) as url:``.
"""
from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator


class ChatHandler(http.server.BaseHTTPRequestHandler):
    """POST /.../chat/completions: ``chat(body)`` answers with ``reply_text`` or ``reply``."""

    def chat(self, body: dict) -> None:
        raise NotImplementedError

    def do_POST(self):  # noqa: N802 (http.server API)
        self.chat(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

    def reply(self, code: int, payload: bytes = b"") -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def reply_text(self, text: str) -> None:
        self.reply(200, json.dumps({"choices": [{"message": {"role": "assistant", "content": text},
                                                 "finish_reason": "stop"}]}).encode())

    def log_message(self, *args):  # keep pytest output clean
        pass


@contextlib.contextmanager
def serve(handler: type[ChatHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free port of 127.0.0.1; yields the base URL (no /v1)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
