"""Benchmark of env/ on real Chromium, printed in one run:
- env steps/s with 1 and with N contexts stepping concurrently (Click on click-checkboxes boxes);
- median observation extraction ms on MiniWoB pages and on a synthetic ~1 MB page (targets: <= 30 ms, <= 300 ms);
- raw HTML characters / observation characters on both;
- ratio of one env step (parse + click + settle + observation) to a bare Playwright click on the same
  element of the same page (target <= 2x);
- MiniWoB reset ms.
With --sandbox, only the cost of the sandbox proxy on allowed traffic instead: a site on 127.0.0.1 (its own
process, HTTP/1.1 keep-alive, every response no-store) whose pages have 6 subresources; env steps that click
to the next page, and resets, with the context's connections direct (router only, as before the proxy) or
through the SandboxProxy: two envs, one of each, taking turns step by step in one run; per-step wall ms
and this process's CPU ms (the proxy relays in a thread of it).

With --remote, only the cost of a browser behind a Playwright browser server (--browser-endpoint): the same
site and turns, Chromium launched by this process against one behind `playwright run-server` on this machine.

With --before DIR, only this tree's env against the env of another checkout (DIR, e.g. made by
`git worktree add /tmp/before HEAD~1`), for a change that must not cost anything: MiniWoB resets (a fresh
context each, then reused ones) and Click steps, each version in its own process (its own Chromium), the two
taking turns round by round (order alternating); medians per version, ratio, and the paired difference.

Run: .venv/bin/python bench/bench_env.py [--steps 60] [--contexts 8]
     .venv/bin/python bench/bench_env.py --sandbox [--rounds 10] [--sandbox-steps 10]
     .venv/bin/python bench/bench_env.py --remote [--rounds 10] [--sandbox-steps 10]
     .venv/bin/python bench/bench_env.py --before /tmp/before [--rounds 10] [--sandbox-steps 10]
Results are recorded by hand in bench/RESULTS.md under "## env".
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from env import browser  # noqa: E402  (where WebEnv reads proxy_settings: the --sandbox A/B swaps it there)
import env  # noqa: E402


@dataclasses.dataclass
class Args:
    steps: int = 60          # env steps per context for the steps/s figures
    contexts: int = 8        # contexts stepping concurrently for the second steps/s figure
    obs_reps: int = 5        # observation extractions per MiniWoB page
    big_reps: int = 15       # observation extractions of the 1 MB page
    click_reps: int = 40     # bare clicks and env steps for the ratio
    seed: int = 0
    sandbox: bool = False    # run only the sandbox-proxy A/B
    remote: bool = False     # run only the remote-browser A/B (a Playwright browser server against launched Chromium)
    rounds: int = 10         # sandbox A/B: rounds, each = one direct and one proxied episode (order alternating)
    sandbox_steps: int = 10  # sandbox A/B: page-to-page clicks per episode
    before: str = ""         # a checkout whose env this tree's is measured against (see above)


def parse_args() -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        if f.name == "before":
            p.add_argument("--before", default="", metavar="DIR")
        elif isinstance(f.default, bool):
            p.add_argument(f"--{f.name.replace('_', '-')}", action="store_true")
        else:
            p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(p.parse_args()))


# ---- a synthetic ~1 MB page (a long shop/forum-like page: nav, tables, forms, articles, hidden menus) ----

def big_page(target_bytes: int = 1_000_000, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
             "et dolore magna aliqua product price cart order review customer shipping account").split()
    text = lambda n: " ".join(rng.choice(words) for _ in range(n))  # noqa: E731
    parts = ["<!doctype html><html><head><title>Big page</title><style>.hidden{display:none} .card{padding:4px;"
             "border:1px solid #ccc} .row{display:flex;gap:8px} .btn{cursor:pointer}</style></head><body>",
             "<nav>" + "".join(f'<a href="#s{i}">Section {i}</a> ' for i in range(40)) + "</nav>",
             '<form><input name="q" placeholder="Search products"><button type="submit">Search</button>'
             '<select name="sort"><option>Relevance</option><option>Price</option><option>Rating</option></select>'
             '</form>']
    i = 0
    while sum(map(len, parts)) < target_bytes:
        kind = i % 4
        if kind == 0:
            parts.append(f'<section id="s{i}"><h2>{text(4)}</h2>' + "".join(
                f"<p>{text(30)} <a href='/item/{i}-{j}'>{text(2)}</a> {text(10)}</p>" for j in range(4)) + "</section>")
        elif kind == 1:
            parts.append("<table><tr><th>Name</th><th>Price</th><th>Qty</th><th></th></tr>" + "".join(
                f"<tr><td>{text(3)}</td><td>${rng.randint(1, 999)}.99</td><td><input type='number' value='1'>"
                f"</td><td><button>Add to cart</button></td></tr>" for _ in range(8)) + "</table>")
        elif kind == 2:
            parts.append('<div class="row">' + "".join(
                f'<div class="card"><div><span>{text(5)}</span></div><div class="btn" onclick="void 0">'
                f'{text(2)}</div><label><input type="checkbox"> {text(2)}</label></div>' for _ in range(6)) + "</div>")
        else:
            parts.append('<ul class="hidden">' + "".join(f"<li><a href='/m/{j}'>{text(2)}</a></li>"
                                                         for j in range(30)) + "</ul>")
        i += 1
    parts.append("</body></html>")
    return "".join(parts)


# ---- measurements ----

def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


async def observe_timed(e: env.WebEnv) -> tuple[float, int]:
    t = time.perf_counter()
    obs, _ = await e._observe()
    return time.perf_counter() - t, len(obs.text)


async def steps_per_s(pool: env.BrowserPool, n_ctx: int, steps: int) -> float:
    envs = [await pool.new_env(max_repeats=10**6) for _ in range(n_ctx)]
    task = dataclasses.replace(env.load_tasks("miniwob:click-checkboxes")[0], max_steps=10**6)
    for k, e in enumerate(envs):
        await e.reset(dataclasses.replace(task, seed=k))

    async def loop(e: env.WebEnv) -> None:
        for s in range(steps):
            r = await e.step(f'do(action="Click", element="{s % 2}")')     # toggles boxes 0 and 1
            assert not r.done and r.info["error"] is None, r.info
    t = time.perf_counter()
    await asyncio.gather(*(loop(e) for e in envs))
    dt = time.perf_counter() - t
    for e in envs:
        await e.close()
    return n_ctx * steps / dt


# ---- the sandbox proxy's cost on allowed traffic ----

def _serve_site(port_queue: Any) -> None:
    """A small site (own process): /p/<n> links to /p/<n+1> and loads 2 stylesheets, 2 scripts, 2 images."""
    import http.server

    class Site(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path
            if path.startswith("/p/"):
                n = int(path[3:])
                body = ("<!doctype html><html><head><title>page %d</title>" % n
                        + "".join(f"<link rel=stylesheet href='/s{k}.css?{n}'>" for k in range(2))
                        + "".join(f"<script src='/j{k}.js?{n}'></script>" for k in range(2))
                        + "</head><body><a id='next' href='/p/%d'>next page</a>" % (n + 1)
                        + "".join(f"<img src='/i{k}.svg?{n}' width=20 height=20>" for k in range(2))
                        + "<p>" + "lorem ipsum dolor sit amet " * 400 + "</p></body></html>").encode()
                ctype = "text/html"
            elif path.startswith("/s"):
                body, ctype = (".x{color:#123}\n" * 1500).encode(), "text/css"        # ~22 KB
            elif path.startswith("/j"):
                body, ctype = ("var a=1;//" + "x" * 60 + "\n") * 300, "text/javascript"   # ~22 KB
                body = body.encode()
            else:
                body = ("<svg xmlns='http://www.w3.org/2000/svg' width='20' height='20'><rect width='20' "
                        "height='20' fill='#c33'/></svg>").encode()
                ctype = "image/svg+xml"
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site)
    port_queue.put(srv.server_address[1])
    srv.serve_forever()


def _start_site() -> tuple[Any, str]:
    """The benchmark site in its own process: (process, its URL)."""
    import multiprocessing
    q = multiprocessing.get_context("spawn").Queue()
    proc = multiprocessing.get_context("spawn").Process(target=_serve_site, args=(q,), daemon=True)
    proc.start()
    return proc, f"http://127.0.0.1:{q.get(timeout=30)}"


async def take_turns(args: Args, envs: dict[str, "env.WebEnv"], task: "env.Task",
                     setting: Any = contextlib.nullcontext) -> dict[str, dict[str, list[float]]]:
    """Two envs, one per mode, taking turns: per round a reset of each (order alternating), then
    ``args.sandbox_steps`` page-to-page clicks each, step by step; round 0 is a warm-up. ``setting(mode)``: a
    context manager around each reset (what differs between the modes at context creation). Returns wall
    seconds of steps and resets and this process's CPU seconds of steps, per mode."""
    times = {m: {"step": [], "cpu": [], "reset": []} for m in envs}
    order0 = tuple(envs)
    for k in range(args.rounds + 1):
        order = order0 if k % 2 == 0 else order0[::-1]
        for mode in order:
            with setting(mode):
                t = time.perf_counter()
                await envs[mode].reset(task)
                dt = time.perf_counter() - t
            if k:
                times[mode]["reset"].append(dt)
        for s in range(args.sandbox_steps):
            for mode in (order if s % 2 == 0 else order[::-1]):
                e = envs[mode]
                n = await e.page.get_attribute("#next", "data-webagent-id")
                t, c = time.perf_counter(), time.process_time()
                r = await e.step(f'do(action="Click", element="{n}")')
                dt, dc = time.perf_counter() - t, time.process_time() - c
                assert r.info["error"] is None and r.info["blocked_requests"] == 0, r.info
                if k:
                    times[mode]["step"].append(dt)
                    times[mode]["cpu"].append(dc)
        for mode in order:
            ok = await envs[mode].page.evaluate("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
            assert ok, "subresources did not load"
    return times


def print_ab(times: dict[str, dict[str, list[float]]]) -> None:
    (a, d), (b, p) = times.items()
    for key, label in (("step", "click -> next page, wall ms"), ("cpu", "... this process's CPU ms"),
                       ("reset", "reset (new context + first page), wall ms")):
        md, mp = median_ms(d[key]), median_ms(p[key])
        diffs = [(y - x) * 1000 for x, y in zip(d[key], p[key])]
        print(f"  {label:42s} {a} median {md:7.1f} (mean {statistics.mean(d[key]) * 1000:7.1f})   "
              f"{b} median {mp:7.1f} (mean {statistics.mean(p[key]) * 1000:7.1f})   ratio {mp / md:.2f}x   "
              f"paired diff median {statistics.median(diffs):+.1f}")


async def sandbox_ab(args: Args) -> None:
    proc, site = _start_site()
    real_settings = env.proxy_settings
    task = env.Task("bench/site", "bench", "click next", f"{site}/p/0", max_steps=10**6)

    @contextlib.contextmanager
    def setting(mode: str):
        # "direct": the context connects by itself (the request router alone, as before the proxy)
        browser.proxy_settings = real_settings if mode == "proxy" else (lambda port: None)
        try:
            yield
        finally:
            browser.proxy_settings = real_settings
    try:
        async with env.BrowserPool() as pool:
            envs = {m: await pool.new_env(max_repeats=10**6) for m in ("direct", "proxy")}
            times = await take_turns(args, envs, task, setting)
            for e in envs.values():
                await e.close()
    finally:
        proc.terminate()
    print(f"sandbox proxy A/B: {args.rounds} rounds x {args.sandbox_steps} steps per mode, a direct and a proxied "
          f"env taking turns; page = document + 2 css + 2 js + 2 svg (~70 KB, no-store), load "
          f"{os.getloadavg()[0]:.1f}")
    print_ab(times)


async def remote_ab(args: Args) -> None:
    """Chromium launched here against one behind a Playwright browser server on this machine (the protocol's
    own cost, --browser-endpoint): an env of each, taking turns on the benchmark site."""
    proc, site = _start_site()
    server, endpoint = env.start_browser_server()
    try:
        try:
            os.environ.setdefault("WEBAGENT_REMOTE_CHROMIUM", env.find_chromium(None) or "")
        except FileNotFoundError:
            pass
        task = env.Task("bench/site", "bench", "click next", f"{site}/p/0", max_steps=10**6)
        async with env.BrowserPool() as here, env.BrowserPool(endpoints=[endpoint]) as there:
            envs = {"launched": await here.new_env(max_repeats=10**6), "server": await there.new_env(max_repeats=10**6)}
            times = await take_turns(args, envs, task)
            for e in envs.values():
                await e.close()
    finally:
        proc.terminate()
        env.stop_browser_server(server)
    print(f"remote browser A/B: {args.rounds} rounds x {args.sandbox_steps} steps per mode, Chromium launched here "
          f"and one behind `playwright run-server` on this machine, taking turns; same site, load "
          f"{os.getloadavg()[0]:.1f}")
    print_ab(times)


# ---- this tree's env against another checkout's ----

# Run in a subprocess with the checkout as its working directory and first on sys.path; uses only the API both
# versions share. Per round (argv: rounds, steps): resets of click-checkboxes, MiniWoB's first tasks, then Click
# steps on the checkboxes; prints one JSON line per round when stdin says go, so that the versions take turns.
_VERSION_RUN = r"""
import asyncio, dataclasses, json, sys, time
sys.path.insert(0, ".")
import env
async def main(rounds, steps):
    async with env.BrowserPool() as pool:
        e = await pool.new_env(max_repeats=10**6)
        names = ["click-button", "click-checkboxes", "click-link", "enter-text", "login-user", "focus-text"]
        for k in range(rounds + 1):
            sys.stdin.readline()
            resets, stepped = [], []
            for name in names:
                t = time.perf_counter()
                await e.reset(env.miniwob_task(name, seed=k))
                resets.append(time.perf_counter() - t)
            await e.reset(dataclasses.replace(env.miniwob_task("click-checkboxes", seed=k), max_steps=10**6))
            for s in range(steps):
                t = time.perf_counter()
                r = await e.step(f'do(action="Click", element="{s % 2}")')
                stepped.append(time.perf_counter() - t)
                assert r.info["error"] is None and not r.done, r.info
            print(json.dumps({"reset": resets, "step": stepped}), flush=True)
        await e.close()
asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
"""


def versions_ab(args: Args) -> None:
    import json
    import subprocess
    trees = {"before": Path(args.before).resolve(), "after": Path(__file__).resolve().parent.parent}
    if not any((trees["before"] / f).exists() for f in ("env/__init__.py", "env.py")):   # env.py: before env/
        raise SystemExit(f"--before {args.before}: no env/ there (a checkout of this repository is expected)")
    procs = {v: subprocess.Popen([sys.executable, "-c", _VERSION_RUN, str(args.rounds), str(args.sandbox_steps)],
                                 cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for v, tree in trees.items()}
    times: dict[str, dict[str, list[float]]] = {v: {"step": [], "reset": []} for v in trees}
    try:
        for k in range(args.rounds + 1):                     # round 0: warm-up, not counted
            for v in (("before", "after") if k % 2 == 0 else ("after", "before")):
                procs[v].stdin.write("go\n")
                procs[v].stdin.flush()
                line = procs[v].stdout.readline()
                if not line:
                    raise SystemExit(f"the {v} version's run ended early (exit {procs[v].wait()})")
                if k:
                    for key, xs in json.loads(line).items():
                        times[v][key] += xs
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(timeout=120)
    print(f"env versions A/B: {trees['before']} (before) against {trees['after']} (after), {args.rounds} rounds "
          f"of 6 MiniWoB resets + {args.sandbox_steps} Click steps each, one process each taking turns; load "
          f"{os.getloadavg()[0]:.1f}")
    for key, label in (("step", "Click step (parse + click + settle + observe), ms"), ("reset", "MiniWoB reset, ms")):
        b, a = times["before"][key], times["after"][key]
        diffs = [(y - x) * 1000 for x, y in zip(b, a)]
        print(f"  {label:52s} before median {median_ms(b):7.1f}   after median {median_ms(a):7.1f}   ratio "
              f"{statistics.median(a) / statistics.median(b):.2f}x   paired diff median {statistics.median(diffs):+.1f}"
              f" (n={len(diffs)})")


async def main(args: Args) -> None:
    print(f"# env benchmark  cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}  {vars(args)}")
    if args.before:
        versions_ab(args)
        return
    if args.sandbox:
        await sandbox_ab(args)
        return
    if args.remote:
        await remote_ab(args)
        return
    async with env.BrowserPool() as pool:
        print(f"chromium {pool.browser.version}")
        e = await pool.new_env(max_obs_chars=None)

        # -- observation on MiniWoB pages (every solvable task, one seed) --
        names = sorted({t.task_id.removeprefix("miniwob/") for t in env.load_tasks("miniwob:all")})
        obs_times, js_times, raw_chars, obs_chars, reset_times = [], [], [], [], []
        for name in names:
            t0 = time.perf_counter()
            await e.reset(env.miniwob_task(name, seed=args.seed))
            reset_times.append(time.perf_counter() - t0)
            for _ in range(args.obs_reps):
                dt, n = await observe_timed(e)
                obs_times.append(dt)
            js_times.append(await e.page.evaluate(env.EXTRACT_JS, {"keep": list(env.KEPT_ATTRS),
                                                                   "exclude": list(env.MINIWOB_EXCLUDE_IDS)}))
            raw_chars.append(len(await e.page.content()))
            obs_chars.append(n)
        print(f"MiniWoB ({len(names)} pages x {args.obs_reps}): observation median {median_ms(obs_times):.1f} ms "
              f"(p90 {sorted(obs_times)[int(0.9 * len(obs_times))] * 1000:.1f} ms; in-page JS median "
              f"{statistics.median(j['ms'] for j in js_times):.1f} ms)")
        print(f"MiniWoB raw HTML / observation chars: {sum(raw_chars) / sum(obs_chars):.1f}x "
              f"(mean raw {statistics.mean(raw_chars):.0f}, mean obs {statistics.mean(obs_chars):.0f})")
        print(f"MiniWoB reset median {median_ms(reset_times):.0f} ms (fresh page load per episode)")

        # -- observation on a synthetic 1 MB page --
        html = big_page(seed=args.seed)
        with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as f:
            f.write(html)
        big = env.Task("bench/big", "bench", "read the page", Path(f.name).as_uri())
        e_big = await pool.new_env(max_obs_chars=None)
        await e_big.reset(big)
        big_times = []
        for _ in range(args.big_reps):
            dt, n = await observe_timed(e_big)
            big_times.append(dt)
        n_elems = await e_big.page.evaluate("document.getElementsByTagName('*').length")
        raw = len(await e_big.page.content())
        print(f"1 MB page ({len(html) / 1e6:.2f} MB, {n_elems} elements): observation median "
              f"{median_ms(big_times):.0f} ms; raw HTML / observation chars {raw / n:.0f}x "
              f"(obs {n} chars, viewport only)")
        await e_big.close()
        os.unlink(f.name)

        # -- env step vs bare Playwright click on the same element --
        await e.reset(env.miniwob_task("click-checkboxes", seed=args.seed))
        e.max_repeats = 10**6
        e.task = dataclasses.replace(e.task, max_steps=10**6)
        bare, stepped = [], []
        for _ in range(args.click_reps):
            t = time.perf_counter()
            await e.page.locator('[data-webagent-id="0"]').click(timeout=2000)
            bare.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = await e.step('do(action="Click", element="0")')
            stepped.append(time.perf_counter() - t)
            assert r.info["error"] is None and not r.done
        print(f"bare Playwright click median {median_ms(bare):.1f} ms; env step median {median_ms(stepped):.1f} ms; "
              f"ratio {statistics.median(stepped) / statistics.median(bare):.2f}x")
        await e.close()

        # -- throughput --
        s1 = await steps_per_s(pool, 1, args.steps)
        sn = await steps_per_s(pool, args.contexts, args.steps)
        print(f"env steps/s: 1 context {s1:.1f}; {args.contexts} contexts {sn:.1f} (total)")


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
