"""Start a Playwright browser server on a browser machine, the way a trainer's BrowserPool needs one, and print
the endpoint to give it (``--browser-endpoint`` / $WEBAGENT_BROWSER_ENDPOINT).

    python scripts/browser_server.py --host 10.0.0.7 --port 3000 --clients 8
    # -> endpoint: ws://10.0.0.7:3000/Yq3...   (the path is a fresh random token: keep it like a password)

The server runs ``playwright run-server --unsafe`` (the pool sends its closed-network launch flags, which only an
unsafe server applies), so whoever can open its endpoint can launch any program on this machine. Three things
keep others out, the first two done here: the endpoint's path is a fresh random token (the server answers 400
to any other path); it listens on the one address you name (default 127.0.0.1, for an SSH tunnel), never on
every interface unless you say ``--host 0.0.0.0``; and that address should be on a private network or behind
``ssh -L`` (docs/environment.md, "Browsers on other machines"). ``--clients``: connections taken at once, one
per trainer process (rank) or eval.py that uses this machine. Needs only Playwright and a Chromium here (no
torch). Ctrl-C stops it and the browsers it launched."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from env.chromium import start_browser_server, stop_browser_server  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1",
                    help="the address to listen on: this machine's address on the private network the trainer "
                         "reaches it by, or 127.0.0.1 behind an SSH tunnel (default)")
    ap.add_argument("--port", type=int, default=3000)
    ap.add_argument("--clients", type=int, default=8,
                    help="connections taken at once: one per trainer rank or eval.py using this machine")
    ap.add_argument("--token-file", default="",
                    help="also write the endpoint to this file (mode 600), for a job script to read")
    args = ap.parse_args()
    proc, endpoint = start_browser_server(args.port, host=args.host, max_clients=args.clients)
    if args.token_file:
        fd = os.open(args.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(endpoint + "\n")
    print(f"endpoint: {endpoint}", flush=True)
    print(f"  trainer: --browser-endpoint {endpoint}   (or WEBAGENT_BROWSER_ENDPOINT; several: comma-separated)",
          flush=True)
    if args.host == "127.0.0.1":
        print(f"  from the trainer through a tunnel: ssh -N -L {args.port}:127.0.0.1:{args.port} THIS_MACHINE, "
              f"then ws://127.0.0.1:{args.port}/<the same token>", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass
    else:
        sys.exit(f"the browser server exited with code {proc.returncode}")
    finally:
        stop_browser_server(proc)          # it and the browsers it launched


if __name__ == "__main__":
    main()
