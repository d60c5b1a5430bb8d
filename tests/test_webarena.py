"""WebArena / WebArena-Lite configs and rubrics (env.load_webarena_tasks, env.evaluate) against a tiny
site served on 127.0.0.1 (tests/site.py), in real Chromium through env.BrowserPool / WebEnv.

Covers: placeholder substitution from WA_<SITE> / <SITE>, malformed configs rejected at load with the
task id and field named, every string_match / url_match / program_html rule passing and failing where
it should, judge and helper plumbing, multi-tab start_url, storage_state, and the paper's example
(log out, then edit the profile) as two configs solved by an agent acting only through env.step.

Run: .venv/bin/python -m pytest -q tests/test_webarena.py
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import logging
import re
import secrets
from pathlib import Path

import pytest

import env

pytestmark = pytest.mark.timeout(120)

_spec = importlib.util.spec_from_file_location("webarena_test_site", Path(__file__).with_name("site.py"))
site_mod = importlib.util.module_from_spec(_spec)  # not `import site`: that name is the stdlib's
_spec.loader.exec_module(site_mod)


# ---- fixtures ----

@pytest.fixture(scope="module")
def site():
    s = site_mod.Site()
    s.start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def fresh_site(request):
    """Every test starts from the default users, no sessions, and the site placeholders set."""
    if "site" not in request.fixturenames:
        yield None
        return
    s = request.getfixturevalue("site")
    s.reset()
    mp = pytest.MonkeyPatch()
    for name in env.WEBARENA_SITES:
        mp.delenv(f"WA_{name}", raising=False)
        mp.delenv(name, raising=False)
    mp.setenv("WA_SHOPPING", s.url + "/")          # trailing slash is dropped on substitution
    yield s
    mp.undo()


@pytest.fixture(scope="module")
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


@pytest.fixture(scope="module")
def pool(loop):
    p = env.BrowserPool()
    loop.run_until_complete(asyncio.wait_for(p.__aenter__(), 60))
    yield p
    loop.run_until_complete(asyncio.wait_for(p.__aexit__(None, None, None), 60))


@pytest.fixture
def run(loop):
    """Run a coroutine on the module's event loop, with a timeout."""
    return lambda coro, timeout=60: loop.run_until_complete(asyncio.wait_for(coro, timeout))


def login_state(site, tmp_path: Path, user: str = "alice") -> str:
    """A Playwright storage-state file holding a valid session cookie for ``user``."""
    token = secrets.token_hex(16)
    with site.lock:
        site.sessions[token] = user
    path = tmp_path / f"{user}_state.json"
    path.write_text(json.dumps({"cookies": [{
        "name": site_mod.COOKIE, "value": token, "domain": "127.0.0.1", "path": "/", "expires": -1,
        "httpOnly": True, "secure": False, "sameSite": "Lax"}], "origins": []}))
    return str(path)


def config(**overrides) -> dict:
    """A valid WebArena-style config on the test site; ``eval`` replaced wholesale when given."""
    cfg = {"sites": ["shopping"], "task_id": 1, "require_login": False, "storage_state": None,
           "start_url": "__SHOPPING__/", "geolocation": None, "intent_template": "", "instantiation_dict": {},
           "intent": "What is my name?", "require_reset": False,
           "eval": {"eval_types": ["string_match"], "reference_answers": {"exact_match": "Alice Liddell"},
                    "reference_url": "", "program_html": [], "string_note": "", "url_note": "GOLD in PRED"}}
    cfg.update(overrides)
    return cfg


def load(tmp_path: Path, cfg) -> list[env.Task]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return env.load_webarena_tasks(str(path))


async def open_env(pool, task: env.Task):
    e = await pool.new_env()
    obs = await e.reset(task)
    return e, obs


async def label(e, selector: str) -> str:
    """The observation label of the element matching ``selector`` (stamped by the env in the DOM)."""
    n = await e.page.get_attribute(selector, "data-webagent-id", timeout=5000)
    assert n is not None, f"no label on {selector}"
    return n


# ---- loading ----

def test_load_substitutes_placeholders_and_derives_hosts(site, tmp_path, monkeypatch):
    monkeypatch.setenv("REDDIT", "http://localhost:9999/")            # WebArena's own variable name
    monkeypatch.setenv("GITLAB", "http://gitlab.invalid:8023")
    monkeypatch.setenv("WA_GITLAB", site.url.replace("127.0.0.1", "localhost"))  # WA_ wins
    cfgs = [config(task_id=3, sites=["shopping", "reddit"], start_url="__SHOPPING__/profile |AND| __REDDIT__/f/x",
                   eval={"eval_types": ["url_match", "program_html"], "reference_url": "__GITLAB__/a |OR| __REDDIT__/b",
                         "url_note": "GOLD in PRED",
                         "program_html": [{"url": "__SHOPPING__/profile", "locator": "",
                                           "required_contents": {"must_include": ["__REDDIT__ |OR| x"]}}]}),
            config(task_id="b7", old_task_id=12, intent="  Say hi  ")]
    t3, tb = load(tmp_path, cfgs)
    assert t3.task_id == "3" and tb.task_id == "b7"
    assert t3.site == "shopping+reddit" and tb.site == "shopping"
    assert t3.start_url == f"{site.url}/profile |AND| http://localhost:9999/f/x"
    assert t3.eval["reference_url"] == f"{site.url.replace('127.0.0.1', 'localhost')}/a |OR| http://localhost:9999/b"
    assert t3.eval["program_html"][0]["url"] == f"{site.url}/profile"
    assert t3.eval["program_html"][0]["required_contents"]["must_include"] == ["http://localhost:9999 |OR| x"]
    assert t3.allowed_hosts == ("127.0.0.1", "localhost")
    assert tb.intent == "Say hi" and tb.allowed_hosts == ("127.0.0.1",)
    # one object instead of a list, through the shared entry point
    path = tmp_path / "one.json"
    path.write_text(json.dumps(config(task_id=42)))
    assert [t.task_id for t in env.load_tasks(str(path))] == ["42"]
    assert [t.task_id for t in env.load_tasks(f"webarena:{path}")] == ["42"]          # the family's prefix
    # the webarena family: the results column is the paper's Table 2 site name
    fam = env.family_of(t3)
    assert t3.family == "webarena" and isinstance(fam, env.WebArenaFamily)
    assert [fam.column(t) for t in (t3, tb)] == ["Multi-site", "Shopping"]
    assert fam.column(dataclasses.replace(tb, site="shopping_admin")) == "CMS"


def test_storage_state_path_and_require_login(site, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (t,) = load(tmp_path, config(require_login=True, storage_state="./.auth/shopping_state.json"))
    assert t.require_login and t.storage_state == str(tmp_path / ".auth" / "shopping_state.json")


def test_missing_env_var_is_named(site, tmp_path):
    with pytest.raises(ValueError, match=r"task 5: start_url: placeholder __GITLAB__ needs the environment "
                                         r"variable WA_GITLAB \(or GITLAB\)"):
        load(tmp_path, config(task_id=5, start_url="__GITLAB__/explore"))
    with pytest.raises(ValueError, match=r"task 6: eval\.program_html\[0\]\.url: .*WA_MAP"):
        load(tmp_path, config(task_id=6, eval={"eval_types": ["program_html"], "program_html": [
            {"url": "__MAP__/x", "locator": "", "required_contents": {"must_include": ["a"]}}]}))


PH = {"url": "last", "locator": "", "required_contents": {"must_include": ["a"]}}
BAD_CONFIGS = [  # (overrides, expected message)
    ({"eval": {"eval_types": ["foo"]}}, "task 17: eval.eval_types: unknown type 'foo'"),
    ({"eval": {"eval_types": []}}, "task 17: eval.eval_types: expected a non-empty list"),
    ({"eval": None}, "task 17: eval: expected an object"),
    ({"intent": ""}, "task 17: intent: expected a non-empty string"),
    ({"sites": "  "}, "task 17: sites:"),
    ({"start_url": "shopping/home"}, "task 17: start_url (tab 0): 'shopping/home' is not an absolute"),
    ({"start_url": "__SHOPPING__/ |AND| nope"}, "task 17: start_url (tab 1): 'nope'"),
    ({"require_login": "yes"}, "task 17: require_login: expected true or false"),
    ({"storage_state": 3}, "task 17: storage_state: expected a file path or null"),
    ({"old_task_id": [1]}, "task 17: old_task_id:"),
    ({"eval": {"eval_types": ["string_match"]}}, "task 17: eval.reference_answers: string_match needs"),
    ({"eval": {"eval_types": ["string_match"], "reference_answers": {"contains": ["x"]}}},
     "task 17: eval.reference_answers: unknown key 'contains'"),
    ({"eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": {"x": 1}}}},
     "task 17: eval.reference_answers.must_include: expected a non-empty list"),
    ({"eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["a", {"b": 1}]}}},
     "task 17: eval.reference_answers.must_include[1]: expected a string"),
    ({"eval": {"eval_types": ["string_match"], "reference_answers": {"required_values": ["about 5"]}}},
     "task 17: eval.reference_answers.required_values[0]: 'about 5' is not an inequality"),
    ({"eval": {"eval_types": ["string_match"], "reference_answers": {"must_exclude": ["a |OR| b"]}}},
     "task 17: eval.reference_answers.must_exclude[0]: 'a |OR| b': must_exclude takes no '|OR|'"),
    ({"eval": {"eval_types": ["url_match"], "reference_url": ""}}, "task 17: eval.reference_url: url_match needs"),
    ({"eval": {"eval_types": ["url_match"], "reference_url": "__SHOPPING__/a", "url_note": "PRED in GOLD"}},
     "task 17: eval.url_note: unknown rule 'PRED in GOLD'"),
    ({"eval": {"eval_types": ["program_html"], "program_html": []}}, "task 17: eval.program_html: expected a non-empty"),
    ({"eval": {"eval_types": ["program_html"], "program_html": [{**PH, "locator": "xpath=//h1"}]}},
     "task 17: eval.program_html[0].locator: unknown locator 'xpath=//h1'"),
    ({"eval": {"eval_types": ["program_html"], "program_html": [{**PH, "locator": "func:f(__import__('os'))"}]}},
     "task 17: eval.program_html[0].locator: .*cannot parse the argument"),
    ({"eval": {"eval_types": ["program_html"], "program_html": [{**PH, "url": "func:get_url"}]}},
     "task 17: eval.program_html[0].url: .*is not a helper call"),
    ({"eval": {"eval_types": ["program_html"], "program_html": [{**PH, "url": "/relative"}]}},
     "task 17: eval.program_html[0].url: '/relative' is not an absolute"),
    ({"eval": {"eval_types": ["program_html"], "program_html": [
        {**PH, "required_contents": {"must_include": ["a"], "exact_match": "a"}}]}},
     "task 17: eval.program_html[0].required_contents: expected one of"),
    ({"eval": {"eval_types": ["program_html"], "program_html": [{**PH, "required_contents": {"one_of": ["a"]}}]}},
     "task 17: eval.program_html[0].required_contents: unknown key 'one_of'"),
]


@pytest.mark.parametrize("overrides,message", BAD_CONFIGS, ids=[m.split(": ")[1] + f"#{i}"
                                                              for i, (_, m) in enumerate(BAD_CONFIGS)])
def test_malformed_config_rejected_with_field(site, tmp_path, overrides, message):
    pattern = "^" + ".*".join(re.escape(part) for part in message.split(".*"))
    with pytest.raises(ValueError, match=pattern):
        load(tmp_path, config(task_id=17, **overrides))


def test_malformed_file_level(site, tmp_path):
    with pytest.raises(ValueError, match=r"task #1: task_id: expected an int or a non-empty string"):
        load(tmp_path, [config(), {k: v for k, v in config().items() if k != "task_id"}])
    with pytest.raises(ValueError, match=r"task 1: task_id: duplicate id"):
        load(tmp_path, [config(), config()])
    with pytest.raises(ValueError, match=r"task #0: expected a JSON object"):
        load(tmp_path, ["not a task"])
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(ValueError, match=r"not valid JSON"):
        env.load_webarena_tasks(str(bad))


# ---- string_match (the answer only; no page needed) ----

STRING_CASES = [  # (reference_answers, answer, expected score)
    ({"exact_match": "Alice Liddell"}, ' "alice liddell" ', 1.0),
    ({"exact_match": "Alice Liddell"}, "Alice", 0.0),
    ({"must_include": ["Alice", "wonderland |OR| looking glass"]}, "Alice Through the Looking Glass", 1.0),
    ({"must_include": ["Alice", "wonderland |OR| looking glass"]}, "Alice", 0.0),
    ({"must_include": ["0"]}, "10 items", 0.0),                    # one token: whole-token match
    ({"must_include": ["0"]}, "there are 0 items", 1.0),
    ({"must_include": ["25.99"]}, "It costs $25.99.", 1.0),
    ({"must_exclude": ["bob"]}, "alice", 1.0),
    ({"must_exclude": ["bob"]}, "alice and Bob", 0.0),
    ({"must_exclude": ["bob"]}, "bobby", 1.0),
    ({"one_of": ["alice", "bob"]}, "it is Bob", 1.0),
    ({"one_of": ["alice", "bob"]}, "carol", 0.0),
    ({"required_values": ["> 5", "<= 10 |OR| == 42"]}, "7", 1.0),
    ({"required_values": ["> 5", "<= 10 |OR| == 42"]}, "42", 1.0),
    ({"required_values": ["> 5", "<= 10 |OR| == 42"]}, "11", 0.0),
    ({"required_values": ["== 1000"]}, "1,000", 1.0),
    ({"required_values": ["> 5"]}, "seven", 0.0),
    ({"exact_match": "alice", "must_exclude": ["bob"]}, "alice", 1.0),
    ({"exact_match": "alice", "must_include": ["bob"]}, "alice", 0.0),    # several keys multiply
    ({"must_include": "liddell"}, "Alice Liddell", 1.0),             # a lone string = a one-item list
    ({"fuzzy_match": "N/A"}, "n/a", 1.0),                          # N/A answer: no judge needed
]


@pytest.mark.parametrize("refs,answer,expected", STRING_CASES)
def test_string_match(site, tmp_path, run, refs, answer, expected):
    (task,) = load(tmp_path, config(eval={"eval_types": ["string_match"], "reference_answers": refs}))
    details: dict = {}
    assert run(env.evaluate(task, None, answer, details=details)) == expected
    assert details["scores"] == {"string_match": expected}
    assert bool(details["reasons"]) == (expected == 0.0)


def test_fuzzy_match_and_na_use_the_judge(site, tmp_path, run, caplog):
    (fuzzy,) = load(tmp_path, config(intent="Who am I?", eval={"eval_types": ["string_match"],
                                                               "reference_answers": {"fuzzy_match": ["Alice", "Liddell"]}}))
    calls = []

    def judge(question, reference, answer):
        calls.append((question, reference, answer))
        return 1.0 if "liddell" in answer.lower() else 0.0

    async def async_judge(question, reference, answer):
        await asyncio.sleep(0)
        return judge(question, reference, answer)

    assert run(env.evaluate(fuzzy, None, "You are Alice Liddell", judge=judge)) == 1.0
    assert calls == [("Who am I?", "Alice, Liddell", "You are Alice Liddell")]
    assert run(env.evaluate(fuzzy, None, "You are the queen", judge=async_judge)) == 0.0
    assert run(env.evaluate(fuzzy, None, "", judge=judge)) == 0.0 and len(calls) == 2   # empty: no judge call
    details: dict = {}
    with caplog.at_level(logging.WARNING, logger="env.webarena"):
        assert run(env.evaluate(fuzzy, None, "You are Alice Liddell", details=details)) == 0.0
    assert "needs a judge" in caplog.text and "needs a judge" in details["reasons"][0]

    (na,) = load(tmp_path, config(eval={"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": "N/A"},
                                        "string_note": "There is no such order"}))
    assert run(env.evaluate(na, None, '"N/A"')) == 1.0
    assert run(env.evaluate(na, None, "No such order exists")) == 0.0         # reason given: judge needed
    calls.clear()
    assert run(env.evaluate(na, None, "The order does not exist", judge=lambda q, r, a: 1.0)) == 1.0
    assert run(env.evaluate(na, None, "The order does not exist", judge=lambda q, r, a: calls.append(r) or 0)) == 0.0
    assert calls == ["There is no such order"]


def test_url_matches_rules():
    gold = "http://127.0.0.1:8080/orders/view?id=7&tab=items"
    assert env.url_matches("http://127.0.0.1:8080/orders/view/?tab=items&id=7&page=2#top", gold)
    assert env.url_matches("http://LOCALHOST:8080/orders/view/all?id=7&tab=items", gold)   # gold in pred
    assert not env.url_matches("http://127.0.0.1:8080/orders/view?id=8&tab=items", gold)
    assert not env.url_matches("http://127.0.0.1:8080/orders?id=7&tab=items", gold)
    assert env.url_matches("http://127.0.0.1:8080/b", "http://127.0.0.1:8080/a |OR| http://127.0.0.1:8080/b")
    assert env.url_matches("http://h:80/a/", "http://h/a", "EXACT")
    assert not env.url_matches("http://h/a/b", "http://h/a", "EXACT")
    assert not env.url_matches("http://h/a?x=1", "http://h/a", "EXACT")


# ---- url_match and program_html on real pages ----

def test_url_match_on_the_agents_page(site, tmp_path, pool, run):
    state = login_state(site, tmp_path)
    cases = [("__SHOPPING__/profile", "GOLD in PRED", 1.0), ("__SHOPPING__/profile/", "EXACT", 1.0),
             ("__SHOPPING__/login", "GOLD in PRED", 0.0), ("__SHOPPING__/prof", "EXACT", 0.0),
             ("__SHOPPING__/login |OR| __SHOPPING__/profile", "EXACT", 1.0)]
    tasks = load(tmp_path, [config(task_id=i, require_login=True, storage_state=state, start_url="__SHOPPING__/profile",
                                   eval={"eval_types": ["url_match"], "reference_url": ref, "url_note": rule})
                            for i, (ref, rule, _) in enumerate(cases)])

    async def go():
        e, _ = await open_env(pool, tasks[0])
        try:
            assert e.page.url == f"{site.url}/profile"
            return [await env.evaluate(t, e.page, None) for t in tasks]
        finally:
            await e.close()
    assert run(go()) == [c[2] for c in cases]


def test_program_html_rules(site, tmp_path, pool, run, caplog):
    state = login_state(site, tmp_path)
    prof = "__SHOPPING__/profile"
    name_js = "document.querySelector('#name').textContent"
    targets = [  # (program_html list, expected score)
        ([{"url": "last", "locator": name_js, "required_contents": {"exact_match": "Alice Liddell"}}], 1.0),
        ([{"url": "last", "locator": name_js, "required_contents": {"exact_match": "Alice"}}], 0.0),
        ([{"url": prof, "locator": "", "required_contents": {"must_include": ["alice@example.com", "Bob |OR| Alice"]}}], 1.0),
        ([{"url": "last", "locator": "", "required_contents": {"must_include": ["bob@example.com"]}}], 0.0),
        ([{"url": "last", "locator": "", "required_contents": {"must_exclude": ["bob@example.com"]}}], 1.0),
        ([{"url": prof, "locator": "document.querySelector('#name').textContent.length",   # 13 + 2 chars
           "prep_actions": ["document.querySelector('#name').textContent += '!!'"],
           "required_contents": {"required_values": ["> 14", "< 20"]}}], 1.0),
        ([{"url": "last", "locator": "document.querySelector('#nope').textContent",   # throws -> ""
           "required_contents": {"must_include": ["Alice"]}}], 0.0),
        ([{"url": "__SHOPPING__/login", "locator": "document.querySelector('h1').textContent",
           "required_contents": {"exact_match": "Log in"}},
          {"url": "last", "locator": name_js, "required_contents": {"exact_match": "Alice Liddell"}}], 1.0),
        ([{"url": "last", "locator": "func:api_name(__page__, 'bob')", "required_contents": {"exact_match": "Bob Builder"}}], 1.0),
        ([{"url": "last", "locator": "func:api_name(__page__, 'alice')", "required_contents": {"exact_match": "Bob Builder"}}], 0.0),
        ([{"url": "func:same_page('__last_url__', \"/edit\")", "locator": "document.querySelector('input#name').value",
           "required_contents": {"exact_match": "Alice Liddell"}}], 1.0),
        ([{"url": "last", "locator": "func:not_supplied()", "required_contents": {"exact_match": "x"}}], 0.0),
    ]
    tasks = load(tmp_path, [config(task_id=i, require_login=True, storage_state=state, start_url=prof,
                                   eval={"eval_types": ["program_html"], "program_html": t})
                            for i, (t, _) in enumerate(targets)])
    seen_pages = []

    async def api_name(page, user):                     # an async helper using the context's cookies
        seen_pages.append(page)
        resp = await page.context.request.get(f"{site.url}/api/profile?user={user}", timeout=5000)
        return (await resp.json())["name"]

    def same_page(page, last_url, suffix):              # a sync URL helper
        assert last_url == page.url
        return last_url + suffix
    helpers = {"api_name": api_name, "same_page": same_page}

    async def go():
        e, _ = await open_env(pool, tasks[0])
        try:
            scores = []
            for t in tasks:
                scores.append(await env.evaluate(t, e.page, None, helpers=helpers))
                assert e.page.url == f"{site.url}/profile" and len(e.page.context.pages) == 1  # probes closed
            return scores
        finally:
            await e.close()
    with caplog.at_level(logging.WARNING, logger="env.webarena"):
        assert run(go()) == [t[1] for t in targets]
    assert "helper 'not_supplied' was not supplied" in caplog.text
    assert len(seen_pages) == 2


def test_eval_types_multiply(site, tmp_path, pool, run):
    state = login_state(site, tmp_path)
    ph = [{"url": "last", "locator": "document.querySelector('#email').textContent",
           "required_contents": {"exact_match": "alice@example.com"}}]
    both = {"eval_types": ["string_match", "url_match", "program_html"], "reference_answers": {"must_include": ["Alice"]},
            "reference_url": "__SHOPPING__/profile", "program_html": ph}
    (task,) = load(tmp_path, config(require_login=True, storage_state=state, start_url="__SHOPPING__/profile", eval=both))

    async def go():
        e, _ = await open_env(pool, task)
        try:
            ok, bad = {}, {}
            r_ok = await env.evaluate(task, e.page, "I am Alice", details=ok)
            r_bad = await env.evaluate(task, e.page, "I am Bob", details=bad)
            return r_ok, ok, r_bad, bad
        finally:
            await e.close()
    r_ok, ok, r_bad, bad = run(go())
    assert r_ok == 1.0 and ok["scores"] == {"string_match": 1.0, "url_match": 1.0, "program_html": 1.0}
    assert r_bad == 0.0 and bad["scores"] == {"string_match": 0.0, "url_match": None, "program_html": None}
    assert "missing ['Alice']" in bad["reasons"][0]


def test_env_step_passes_judge_and_helpers(site, tmp_path, pool, run):
    """WebEnv(judge=..., helpers=...) hands both to evaluate() when the agent calls exit()."""
    (task,) = load(tmp_path, config(intent="Who is user bob?", eval={
        "eval_types": ["string_match", "program_html"], "reference_answers": {"fuzzy_match": ["Bob Builder"]},
        "program_html": [{"url": "last", "locator": "func:api_name('bob')", "required_contents": {"must_include": ["Bob"]}}]}))
    judged = []

    def judge(question, reference, answer):
        judged.append((question, reference, answer))
        return float(answer == "It is Bob Builder.")

    async def api_name(page, user):
        resp = await page.context.request.get(f"{site.url}/api/profile?user={user}", timeout=5000)
        return (await resp.json())["name"]

    async def go(answer):
        e = await pool.new_env(judge=judge, helpers={"api_name": api_name})
        try:
            await e.reset(task)
            res = await e.step(f'exit(message="{answer}")')
            return res.reward, res.done
        finally:
            await e.close()
    assert run(go("It is Bob Builder.")) == (1.0, True)
    assert run(go("Bob, I think")) == (0.0, True)
    assert judged == [("Who is user bob?", "Bob Builder", "It is Bob Builder."),
                      ("Who is user bob?", "Bob Builder", "Bob, I think")]


# ---- reset: tabs and storage_state ----

def test_multi_tab_start_url_opens_tabs(site, tmp_path, pool, run):
    (task,) = load(tmp_path, config(start_url="__SHOPPING__/login |AND| __SHOPPING__/"))

    async def go():
        e, obs = await open_env(pool, task)
        try:
            return obs, [p.url for p in e.page.context.pages], e.page.url
        finally:
            await e.close()
    obs, urls, active = run(go())
    assert urls == [f"{site.url}/login", f"{site.url}/"]
    assert len(obs.tabs) == 2 and active == obs.url


def test_storage_state_is_honoured(site, tmp_path, pool, run):
    """Log in through the form with env.step, save the context's storage state, reuse it in a new env."""
    (login_task,) = load(tmp_path, config(task_id="login", start_url="__SHOPPING__/login"))
    saved = tmp_path / "saved_state.json"

    async def login_and_save():
        e, _ = await open_env(pool, login_task)
        try:
            await e.step(await _type(e, "alice", "input[name=username]"))
            await e.step(await _type(e, "wonderland", "input[name=password]"))
            await e.step(await _click(e, "button:has-text('Log in')"))
            assert e.page.url == f"{site.url}/profile"
            await e.page.context.storage_state(path=str(saved))
        finally:
            await e.close()
    run(login_and_save())
    with_state, without = load(tmp_path, [config(task_id=1, require_login=True, storage_state=str(saved),
                                                 start_url="__SHOPPING__/profile"),
                                          config(task_id=2, start_url="__SHOPPING__/profile")])

    async def visit(task):
        e, obs = await open_env(pool, task)
        try:
            return obs.url, obs.text
        finally:
            await e.close()
    url, text = run(visit(with_state))
    assert url == f"{site.url}/profile" and "Alice Liddell" in text
    url, text = run(visit(without))
    assert url.startswith(f"{site.url}/login") and "Alice Liddell" not in text


# ---- the paper's example: log out, then edit the profile (two configs) ----

def paper_tasks(site, tmp_path) -> tuple[env.Task, env.Task]:
    state = login_state(site, tmp_path)
    logout = config(
        task_id="logout", require_login=True, storage_state=state, start_url="__SHOPPING__/profile",
        intent="Log out of my account.",
        eval={"eval_types": ["url_match", "program_html"], "reference_url": "__SHOPPING__/login",
              "url_note": "GOLD in PRED",
              "program_html": [{"url": "__SHOPPING__/profile", "locator": "document.querySelector('h1').textContent",
                                "required_contents": {"exact_match": "Log in"}}]})
    edit = config(
        task_id="edit-profile", require_login=True, storage_state=state, start_url="__SHOPPING__/",
        intent="Change my profile name to 'Alice Kingsleigh'.",
        eval={"eval_types": ["program_html"],
              "program_html": [{"url": "__SHOPPING__/profile", "locator": "document.querySelector('#name').textContent",
                                "required_contents": {"exact_match": "Alice Kingsleigh"}}]})
    path = tmp_path / "paper_example.json"
    path.write_text(json.dumps([logout, edit]))
    a, b = env.load_tasks(str(path))
    return a, b


async def _episode(pool, task, policy) -> tuple[float, list]:
    e, _ = await open_env(pool, task)
    try:
        results = []
        for step in await policy(e):
            results.append(await e.step(step) if isinstance(step, str) else await e.step(await step(e)))
            if results[-1].done:
                break
        assert results[-1].done and results[-1].info["done_reason"] == "exit"
        return results[-1].reward, results
    finally:
        await e.close()


def test_paper_example_logout(site, tmp_path, pool, run):
    logout, _ = paper_tasks(site, tmp_path)

    async def good(e):
        return [await _click(e, "a:has-text('Log out')"), 'exit(message="done")']

    async def wrong(e):   # opens the edit form instead of logging out
        return [await _click(e, "a:has-text('Edit profile')"), 'exit(message="done")']
    reward, steps = run(_episode(pool, logout, good))
    assert reward == 1.0 and steps[0].obs.url == f"{site.url}/login?logged_out=1"
    site.reset()
    logout, _ = paper_tasks(site, tmp_path)
    assert run(_episode(pool, logout, wrong))[0] == 0.0
    site.reset()
    logout, _ = paper_tasks(site, tmp_path)
    assert run(_episode(pool, logout, lambda e: _const(['exit(message="I logged out")'])))[0] == 0.0


async def _const(x):
    return x


def test_paper_example_edit_profile(site, tmp_path, pool, run):
    _, edit = paper_tasks(site, tmp_path)

    def policy(new_name):
        async def plan(e):
            return [await _click(e, "a:has-text('Edit profile')"),
                    # later steps need the new page's labels: resolve them when they run
                    lambda e: _type(e, new_name, "input#name"),
                    lambda e: _click(e, "button:has-text('Save')"),
                    'exit(message="Done, your name is updated.")']
        return plan
    reward, steps = run(_episode(pool, edit, policy("Alice Kingsleigh")))
    assert reward == 1.0 and steps[2].obs.url == f"{site.url}/profile?saved=1"
    site.reset()
    _, edit = paper_tasks(site, tmp_path)
    reward, steps = run(_episode(pool, edit, policy("Alice K.")))
    assert reward == 0.0
    details = steps[-1].info["eval"]   # why it scored 0, beside the reward
    assert details["scores"]["program_html"] == 0.0 and details["reasons"]


async def _type(e, text, selector):
    return f'do(action="Type", argument="{text}", element="{await label(e, selector)}")'


async def _click(e, selector):
    return f'do(action="Click", element="{await label(e, selector)}")'
