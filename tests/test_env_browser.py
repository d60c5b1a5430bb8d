"""WebEnv and BrowserPool mechanics in real Chromium on MiniWoB pages: 8 parallel contexts stay isolated,
requests outside the task's hosts are blocked and counted, new tabs / Switch Tab / go_backward /
go_forward, scrolling, and faults (killed browser, closed context, crashed page) end the episode with a
reason while the next reset works."""
import asyncio
import dataclasses
import functools
import http.server
import os
import re
import signal
import threading
from pathlib import Path

import pytest
from playwright.async_api import Error as PlaywrightError

import env
from env import load_tasks, miniwob


def task(name: str, seed: int = 0, **kw) -> env.Task:
    return dataclasses.replace(load_tasks(f"miniwob:{name}")[0], seed=seed, **kw)


async def inject(e: env.WebEnv, html: str) -> env.StepResult:
    """Test setup: add HTML to the page's #area, then one Wait step so the observation labels it."""
    await e.page.evaluate("h => document.querySelector('#area').insertAdjacentHTML('beforeend', h)", html)
    return await e.step('do(action="Wait")')


async def label(e: env.WebEnv, selector: str) -> int:
    # 30 s, not 2: eight pages of a Chromium beside the other test worker's engines once took > 2 s to answer
    return int(await e.page.locator(selector).first.get_attribute("data-webagent-id", timeout=30_000))


def test_eight_parallel_contexts_are_isolated(run, pool):
    async def go():
        envs = [await pool.new_env() for _ in range(8)]
        try:
            obs = await asyncio.gather(*(e.reset(task("click-button", seed=i)) for i, e in enumerate(envs)))
            for i, e in enumerate(envs):
                await e.page.evaluate("i => { document.cookie = 'who=' + i; localStorage.setItem('who', i); }", i)
            seen = [await e.page.evaluate("[document.cookie, localStorage.getItem('who')]") for e in envs]

            async def solve(e, o):
                target = re.findall(r'"([^"]*)"', o.intent)[0]
                n = await label(e, f'#area button:text-is("{target}")')
                return await e.step(f'do(action="Click", element="{n}")')
            results = await asyncio.gather(*(solve(e, o) for e, o in zip(envs, obs)))
            return seen, results
        finally:
            for e in envs:
                await e.close()
    seen, results = run(go())
    assert seen == [[f"who={i}", str(i)] for i in range(8)]
    assert all(r.reward == 1.0 and r.info["done_reason"] == "page_done" for r in results)


def test_resets_queue_for_page_load_slots(run, pool, monkeypatch):
    """Many envs resetting at once load at most ``max_concurrent_resets`` pages at a time (64 at once on a
    2-core box all missed their navigation timeout), and every reset still succeeds."""
    in_flight, peak = 0, 0
    real = env.WebEnv._reset_once

    async def counted(self, *a, **kw):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await real(self, *a, **kw)
        finally:
            in_flight -= 1
    monkeypatch.setattr(env.WebEnv, "_reset_once", counted)
    monkeypatch.setattr(pool, "reset_slots", asyncio.Semaphore(2))

    async def go():
        envs = [await pool.new_env() for _ in range(6)]
        try:
            return await asyncio.gather(*(e.reset(task("click-link", seed=i)) for i, e in enumerate(envs)))
        finally:
            for e in envs:
                await e.close()
    obs = run(go())
    assert peak == 2 and len({o.intent for o in obs}) > 1 and all('id="0"' in o.text for o in obs)


def test_requests_outside_allowed_hosts_are_blocked_and_counted(run, pool):
    async def go():
        e = await pool.new_env()
        try:
            await e.reset(task("click-button", 1))
            fetched = await e.page.evaluate(
                "fetch('http://example.com/x').then(() => 'reached', () => 'blocked')")
            await inject(e, '<a id="ext" href="http://example.com/">outside</a>'
                            '<a id="ws" href="#">ws</a>')
            r = await e.step(f'do(action="Click", element="{await label(e, "#ext")}")')
            return fetched, r, e.blocked_urls
        finally:
            await e.close()
    fetched, r, urls = run(go())
    assert fetched == "blocked"
    assert r.info["blocked_requests"] >= 2 and "example.com" not in r.obs.url
    assert all("example.com" in u for u in urls)
    wob = task("click-button")
    assert env.family_of(wob).hosts(wob) == ("miniwob.local",)
    wa = env.Task("t", "shopping", "x", "http://127.0.0.1:7770/a |AND| http://localhost:9999/b")
    assert env.family_of(wa).hosts(wa) == ("127.0.0.1:7770", "localhost:9999")


def test_new_tab_becomes_active_switch_tab_and_history(run, pool):
    async def go():
        e = await pool.new_env()
        try:
            start = await e.reset(task("click-button", 2))
            await inject(e, '<a id="pop" href="/miniwob/click-link.html" target="_blank">popup</a>'
                            '<a id="same" href="/miniwob/enter-text.html">same tab</a>')
            popup = await e.step(f'do(action="Click", element="{await label(e, "#pop")}")')
            back_to_0 = await e.step('do(action="Switch Tab", argument="0")')
            nav = await e.step(f'do(action="Click", element="{await label(e, "#same")}")')
            back = await e.step("go_backward()")
            fwd = await e.step("go_forward()")
            return start, popup, back_to_0, nav, back, fwd
        finally:
            await e.close()
    start, popup, back_to_0, nav, back, fwd = run(go())
    assert popup.info["error"] is None, popup.info
    assert popup.obs.url.endswith("/miniwob/click-link.html") and popup.obs.active_tab == 1
    assert len(popup.obs.tabs) == 2 and popup.obs.text.startswith("Tabs (* = current): [0] ")
    assert "[1]* Click Link Task" in popup.obs.text
    assert back_to_0.obs.active_tab == 0 and back_to_0.obs.url == start.url
    assert nav.obs.url.endswith("/miniwob/enter-text.html")
    assert back.obs.url == start.url and back.info["error"] is None
    assert fwd.obs.url.endswith("/miniwob/enter-text.html")


def test_scroll_moves_two_thirds_of_the_viewport_and_a_key_jumps(run, pool):
    async def go():
        e = await pool.new_env(viewport=(800, 600))
        try:
            await e.reset(task("click-button", 3))
            await e.page.evaluate("document.body.insertAdjacentHTML('beforeend', "
                                  "'<div style=\"height:3000px\"></div><button id=far>far away</button>')")
            first = await e.step('do(action="Wait")')
            down = await e.step('do(action="Scroll Down")')
            y = await e.page.evaluate("window.scrollY")
            up = await e.step('do(action="Scroll Up")')
            await e.page.keyboard.press("PageDown")                       # a scroll by key: no animation
            by_key = [await e.page.evaluate("window.scrollY")]
            await e.page.wait_for_timeout(300)
            return first, down, y, up, by_key + [await e.page.evaluate("window.scrollY")]
        finally:
            await e.close()
    first, down, y, up, by_key = run(go())
    assert y == 400
    assert by_key[0] == by_key[1] > 0             # read at once, where it ends (smoothly: 0, then 525 after it)
    assert "[more content below: scroll to see it]" in first.obs.text
    assert "more content above and below" in down.obs.text
    assert "<button" not in down.obs.text                     # the task's buttons scrolled out of view
    assert up.info["error"] is None


def test_killed_browser_ends_episode_and_pool_relaunches(run):
    async def go():
        async with env.BrowserPool() as p:
            e = await p.new_env()
            await e.reset(task("click-button", 4))
            pid = p.browser_pid()
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            r = await e.step('do(action="Click", element="0")')
            again = await e.step('do(action="Click", element="0")')
            fresh = await p.new_env()
            obs = await fresh.reset(task("click-button", 4))
            obs2 = await e.reset(task("login-user", 1))           # the crashed env works again too
            return r, again, obs, obs2, p.launches, pid, p.browser_pid()
    r, again, obs, obs2, launches, pid, new_pid = run(go(), timeout=120)
    assert r.done and r.reward == 0.0 and r.info["done_reason"] == "crash"
    assert r.info["reason"] and r.info["error"].startswith("the browser failed")
    assert again.done and again.info["done_reason"] == "crash"
    assert "okay" in obs.text or "<button" in obs.text
    assert obs2.intent.startswith("Enter the username")
    assert launches == 2 and new_pid not in (None, pid)


def _driver_pids() -> set[int]:
    """Playwright driver processes (node ... cli.js run-driver) that are children of this test process."""
    out = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd = (proc / "cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                continue
            if ppid == os.getpid() and b"playwright" in cmd and b"run-driver" in cmd:
                out.add(int(proc.name))
    return out


def test_killed_playwright_driver_is_restarted(run):
    """The driver process dying leaves the browser object reading as connected; the pool notices when a
    context cannot be made, starts a new driver and browser, and the next reset works."""
    async def go():
        others_drivers = _driver_pids()                       # the session pool's, left alone
        async with env.BrowserPool() as p:
            e = await p.new_env()
            await e.reset(task("click-button", 4))
            (pid,) = _driver_pids() - others_drivers
            os.kill(pid, signal.SIGKILL)
            r = await e.step('do(action="Click", element="0")')
            obs = await e.reset(task("click-button", 5))
            others = [await (await p.new_env()).reset(task("focus-text", k)) for k in range(2)]
            return r, obs, others, p.launches, _driver_pids() - others_drivers - {pid}
    r, obs, others, launches, new_driver = run(go(), timeout=120)
    assert r.done and r.info["done_reason"] == "crash"
    assert obs.intent and all(o.intent for o in others)
    assert launches == 2 and len(new_driver) == 1


def test_closed_context_and_crashed_page_end_episode(run, pool):
    async def go():
        e = await pool.new_env()
        try:
            await e.reset(task("click-button", 5))
            await e.context.close()
            closed = await e.step('do(action="Click", element="0")')
            await e.reset(task("click-button", 5))
            cdp = await e.context.new_cdp_session(e.page)
            try:
                await asyncio.wait_for(cdp.send("Page.crash"), 5)
            except (PlaywrightError, asyncio.TimeoutError):
                pass                                   # the crash may drop the reply
            crashed = await e.step('do(action="Click", element="0")')
            ok = await e.reset(task("click-button", 5))
            return closed, crashed, ok
        finally:
            await e.close()
    closed, crashed, ok = run(go())
    assert closed.done and closed.info["done_reason"] == "crash" and "closed" in closed.info["reason"]
    assert crashed.done and crashed.info["done_reason"] == "crash" and "crash" in crashed.info["reason"]
    assert ok.intent and "<button" in ok.text


@pytest.fixture(scope="module")
def pages_url():
    """The miniwob package's pages over plain HTTP on 127.0.0.1: static pages for a WebArena-family task
    (only the miniwob family serves http://miniwob.local/)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    handler = functools.partial(Quiet, directory=str(miniwob._miniwob_html_dir()))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_multi_tab_start_url_and_storage_state(run, pool, tmp_path, pages_url):
    state = tmp_path / "state.json"
    state.write_text('{"cookies": [{"name": "session", "value": "abc", "domain": "127.0.0.1", "path": "/", '
                     '"expires": -1, "httpOnly": false, "secure": false, "sameSite": "Lax"}], "origins": []}')
    t = env.Task("test/two-tabs", "test", "look at both tabs",
                 f"{pages_url}/miniwob/click-button.html |AND| {pages_url}/miniwob/enter-text.html",
                 storage_state=str(state))

    async def go():
        e = await pool.new_env()
        try:
            obs = await e.reset(t)
            cookie = await e.page.evaluate("document.cookie")
            switched = await e.step('do(action="Switch Tab", argument="1")')
            return obs, cookie, switched
        finally:
            await e.close()
    obs, cookie, switched = run(go())
    assert obs.active_tab == 0 and len(obs.tabs) == 2 and obs.url.endswith("click-button.html")
    assert obs.text.startswith("Tabs (* = current): [0]* Click Button Task [1] Enter Text Task\n<html>")
    assert obs.intent == "look at both tabs"
    assert cookie == "session=abc"
    assert switched.obs.active_tab == 1 and switched.obs.url.endswith("enter-text.html")


def test_iframe_elements_are_labelled_and_actionable(run, pool):
    async def go():
        e = await pool.new_env()
        try:
            obs = await e.reset(task("flight.AA", 1))
            frame = e.page.frame_locator('[data-webagent-frame="0"]')
            n = int(await frame.locator('input[placeholder="City or airport"]').nth(1).get_attribute("data-webagent-id"))
            r = await e.step(env.format_action(env.Action("Type", element=n, argument="Boston")))
            return obs, n, r
        finally:
            await e.close()
    obs, n, r = run(go())
    assert "Find flights" in obs.text                       # the iframe's content is in the observation
    assert r.info["error"] is None
    assert re.search(rf'<input id="{n}" type="text" placeholder="City or airport" value="Boston"', r.obs.text)


def test_miniwob_in_place_restart(run, pool):
    async def go():
        e = await pool.new_env(families=[env.MiniWoBFamily(in_place=True)])
        try:
            a = await e.reset(task("click-checkboxes", 3))
            await e.page.evaluate("window.__marker = 1")
            b = await e.reset(task("click-checkboxes", 3))           # same task: no reload
            kept = await e.page.evaluate("window.__marker === 1")
            c = await e.reset(task("enter-text", 3))                 # another task: a page load
            gone = await e.page.evaluate("window.__marker === undefined")
            return a, b, kept, gone, c
        finally:
            await e.close()
    a, b, kept, gone, c = run(go())
    assert kept and gone
    assert a.intent == b.intent and a.text == b.text
    assert c.intent.startswith("Enter")


def test_long_text_is_typed(run, pool):
    text = "x" * 90 + " the end"
    async def go():
        e = await pool.new_env()
        try:
            await e.reset(task("enter-text", 1))
            r = await e.step(env.format_action(env.Action("Type", element=0, argument=text)))
            return r, await e.page.input_value("#tt")
        finally:
            await e.close()
    r, value = run(go())
    assert value == text and r.info["error"] is None


def test_dialogs_are_accepted_and_reported(run, pool):
    async def go():
        e = await pool.new_env()
        try:
            await e.reset(task("click-button", 6))
            await inject(e, '<button id="ask" onclick="this.textContent = confirm(\'Delete it?\') ? \'yes\' : \'no\'">'
                            'ask</button>')
            r = await e.step(f'do(action="Click", element="{await label(e, "#ask")}")')
            return r, await e.page.text_content("#ask")
        finally:
            await e.close()
    r, text = run(go())
    assert text == "yes" and r.info["dialogs"] == ["confirm: Delete it?"] and r.info["error"] is None


def test_context_is_recycled_after_max_context_episodes(run, pool):
    """A kept MiniWoB context is replaced after max_context_episodes episodes: Playwright holds every request,
    response and route of a context until it closes, so a long run on one context grows without bound."""
    async def go():
        e = await pool.new_env(max_context_episodes=2)
        contexts = []
        for seed in range(5):
            await e.reset(task("click-button", seed))
            contexts.append(e.context)
        await e.close()
        return contexts
    c = run(go(), timeout=120)
    assert c[0] is c[1] and c[1] is not c[2] and c[2] is c[3] and c[3] is not c[4]


def test_webrtc_cannot_reach_around_the_allow_list(run, pool):
    """STUN/TURN traffic never passes request routing, so a page could send UDP to any host and port with
    WebRTC; the constructors are gone in every frame (a fresh iframe included) and nothing is sent."""
    import socket
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(3)
    stun = f"stun:127.0.0.1:{udp.getsockname()[1]}"
    js = """async (stun) => {
      const out = [];
      const f = document.createElement('iframe'); document.body.appendChild(f);
      for (const PC of [window.RTCPeerConnection, window.webkitRTCPeerConnection, f.contentWindow.RTCPeerConnection]) {
        try { const pc = new PC({iceServers: [{urls: stun}]}); pc.createDataChannel('d');
              await pc.setLocalDescription(await pc.createOffer()); out.push('opened'); }
        catch (e) { out.push(e.name); }
      }
      return out; }"""

    async def go():
        e = await pool.new_env()
        await e.reset(task("click-button", 2))
        out = await e.page.evaluate(js, stun)
        await e.close()
        return out
    try:
        assert run(go()) == ["TypeError"] * 3
        with pytest.raises(socket.timeout):
            udp.recvfrom(2048)
    finally:
        udp.close()


def test_browser_servers_spread_contexts_run_episodes_and_heal_a_lost_connection(run, monkeypatch):
    """--browser-endpoint with two real Playwright browser servers: new contexts go to them in turn; a server
    that dies ends its episode as a crashed browser does, the next reset runs on the other one, and once the
    server is back the pool connects to it again."""
    from conftest import start_browser_server, stop_browser_server
    try:
        monkeypatch.setenv("WEBAGENT_REMOTE_CHROMIUM", env.find_chromium(None))
    except FileNotFoundError:
        pass
    servers = [start_browser_server() for _ in range(2)]
    (first, endpoint), _ = servers

    async def go():
        async with env.BrowserPool(endpoints=[s[1] for s in servers], server_retry_s=0) as p:
            envs = [await p.new_env() for _ in range(2)]
            for e in envs:
                obs = await e.reset(task("click-button", 4))
                assert "<button" in obs.text
            spread = sorted(len(b.contexts) for b in p.remote.values())
            on_first = next(e for e in envs if e._browser is p.remote[endpoint])
            stop_browser_server(first)                              # the connection is lost
            crashed = await on_first.step('do(action="Click", element="0")')
            obs = await on_first.reset(task("login-user", 1))        # on the server that is left
            alone = list(p.remote) == [servers[1][1]]
            port, token = endpoint.rsplit(":", 1)[1].split("/")
            servers[0] = start_browser_server(int(port), token=token)
            fresh = await p.new_env()
            obs2 = await fresh.reset(task("click-button", 5))
            return spread, crashed, obs, alone, obs2, sorted(p.remote) == sorted(s[1] for s in servers), p.launches
    try:
        spread, crashed, obs, alone, obs2, both, connections = run(go(), timeout=240)
    finally:
        for proc, _ in servers:
            stop_browser_server(proc)
    assert spread == [1, 1]
    assert crashed.done and crashed.info["done_reason"] == "crash"
    assert obs.intent.startswith("Enter the username") and alone
    assert "<button" in obs2.text and both and connections == 3


def test_experts_write_demonstrations_through_a_browser_server(tmp_path):
    """demos.py --browser-endpoint: the scripted demonstrations run in the server's browser."""
    import subprocess
    import sys
    from conftest import start_browser_server, stop_browser_server
    environ = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        environ["WEBAGENT_REMOTE_CHROMIUM"] = env.find_chromium(None)
    except FileNotFoundError:
        pass
    server, endpoint = start_browser_server()
    try:
        out = tmp_path / "demos.jsonl"
        proc = subprocess.run([sys.executable, "demos.py", "--tasks", "miniwob:click-button", "--episodes", "2",
                               "--browser-endpoint", endpoint, "--out", str(out)], cwd=Path(__file__).parents[1],
                              env=environ, capture_output=True, text=True, timeout=300)
    finally:
        stop_browser_server(server)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and f"at {env.redact_endpoint(endpoint)}" in log, log[-3000:]
    token = endpoint.rsplit("/", 1)[1]
    assert len(token) >= 32 and token not in log and token not in out.read_text()
    assert len(out.read_text().splitlines()) == 2


def test_browser_server_admits_only_its_secret_path(run, caplog, monkeypatch, tmp_path):
    """scripts/browser_server.py, as docs/environment.md starts one: the server is behind a random path, printed
    and written to --token-file (mode 600); a pool that connects to the bare ws://host:port/ or to another path
    gets no browser (the server answers 400), the right path runs an episode, the token is in no error or log
    line (Playwright's errors quote URLs), and SIGTERM stops the server."""
    import signal
    import socket
    import subprocess
    import sys
    from playwright.async_api import Error as PlaywrightError
    try:
        monkeypatch.setenv("WEBAGENT_REMOTE_CHROMIUM", env.find_chromium(None))
    except FileNotFoundError:
        pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token_file = tmp_path / "endpoint"
    server = subprocess.Popen([sys.executable, "scripts/browser_server.py", "--port", str(port), "--clients", "2",
                               "--token-file", str(token_file)], cwd=Path(__file__).parents[1],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = server.stdout.readline()
        assert first.startswith("endpoint: ws://127.0.0.1:"), first + server.stdout.read()
        endpoint = first.split()[1]
        assert token_file.read_text().strip() == endpoint and token_file.stat().st_mode & 0o777 == 0o600
        base, token = endpoint.rsplit("/", 1)
        wrong = base + "/" + token[::-1]

        async def go(endpoint: str):
            async with env.BrowserPool(endpoints=[endpoint]) as p:
                e = await p.new_env()
                return await e.reset(task("click-button", 4))
        refused = []
        for bad in (base + "/", wrong):
            with pytest.raises(PlaywrightError) as err:
                run(go(bad), timeout=120)
            refused.append(str(err.value))
        with caplog.at_level("INFO", logger="webagent.env"):
            obs = run(go(endpoint), timeout=120)
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
    assert code == 0
    assert all("no browser server answered" in r and "400" in r for r in refused), refused
    assert token[::-1] not in refused[1] and "/<token>" in refused[1]
    assert "<button" in obs.text and len(token) >= 32
    assert f"at {base}/<token>" in caplog.text and token not in caplog.text + "".join(refused)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0                      # the server is gone
