"""The scripted MiniWoB++ demonstrators (experts.py) through the real env: real Chromium, real pages.

- every covered task is solved on held-out seeds (EVAL_SEEDS, never used for demonstrations), all tasks
  in ONE BrowserPool with several contexts in parallel, and every recorded step is in the policy's format
  (a response env.parse_action reads, naming an element of the observation it was taken on);
- demos.py's CLI writes exactly the trajectory schema train_bc.py reads (here with --prompt plain), and only
  successful episodes (a deliberately broken solver fails on some seeds, and those seeds are missing).

Run: .venv/bin/python -m pytest -q tests/test_experts.py
"""
from __future__ import annotations

import asyncio
import json
import random
import re

import pytest

import compress
import demos
import env
import experts
from trainlib import cli

pytestmark = pytest.mark.timeout(300)

SEEDS_PER_TASK = 2
TEST_SEEDS = [env.EVAL_SEEDS.start + 7_000 + i for i in range(SEEDS_PER_TASK)]
STEP_KEYS = {"observation", "error", "url", "response"}
RECORD_KEYS = {"task", "seed", "intent", "reward", "steps"}


RESPONSE_FORMATS = {
    "thinking": re.compile(r"<think> # Element: .+ </think> <answer> .+ </answer>$"),
    "plain": re.compile(r"# Element: .+\n(do|exit|go_backward|go_forward)\(.*\)$"),
}


def check_record(rec: dict, prompt: str = "thinking") -> None:
    """A successful trajectory record: the schema, and every response is one parseable action (in the
    format of the prompt kind) whose element is a label of the observation it was taken on."""
    assert set(rec) == RECORD_KEYS, rec.keys()
    assert isinstance(rec["task"], str) and rec["task"].startswith("miniwob/")
    assert isinstance(rec["seed"], int) and isinstance(rec["intent"], str) and rec["intent"]
    assert rec["reward"] == 1.0
    assert rec["steps"], "a successful episode has at least one step"
    for step in rec["steps"]:
        assert set(step) == STEP_KEYS, step.keys()
        assert isinstance(step["observation"], str) and step["observation"].startswith("<html>")
        assert step["error"] is None or isinstance(step["error"], str)
        assert step["url"].startswith("http://miniwob.local/")
        assert RESPONSE_FORMATS[prompt].match(step["response"]), step["response"]
        action = env.parse_action(step["response"])
        if action.element is not None:
            assert f'id="{action.element}"' in step["observation"], (rec["task"], rec["seed"], step)


# ---- every covered task, on held-out seeds, in one pool ----

def test_registry_and_seed_ranges():
    assert len(experts.EXPERTS) >= 20
    assert len(experts.MULTI_STEP) >= 6 and experts.MULTI_STEP <= set(experts.EXPERTS)
    train, evals = demos.SPLITS["train"], demos.SPLITS["eval"]
    assert train.stop <= evals.start, "train and eval seed ranges must be disjoint"
    assert all(s in evals for s in TEST_SEEDS)


def test_every_task_solved_on_heldout_seeds():
    tasks = demos.expand_tasks("experts")
    assert len(tasks) == len(experts.EXPERTS)
    results = asyncio.run(demos.generate(tasks, TEST_SEEDS, concurrency=6, progress=False))
    assert len(results) == len(tasks) * len(TEST_SEEDS)
    failed = [(rec["task"], rec["seed"], reason) for rec, reason in results if reason is not None]
    assert not failed, f"expert failures (task, seed, reason): {failed}"
    steps = {}
    for rec, _ in results:
        check_record(rec)
        steps.setdefault(rec["task"], []).append(len(rec["steps"]))
    multi = [t for t, n in steps.items() if max(n) >= 3]
    assert len(multi) >= 6, f"tasks with 3+ actions on these seeds: {multi}"


# ---- the CLI: output schema, only successes written ----

async def _wrong_on_odd_seeds(d: experts.Demo) -> None:
    """A broken click-button expert: on odd seeds it clicks a button other than the asked one (or, with
    only one button, ends without acting)."""
    if d.env.task.seed % 2 == 0:
        await experts.EXPERTS_ORIGINAL["click-button"](d)
        return
    text = experts.quoted(d.intent)[0]
    others = d.page.locator("#area button").filter(has_not_text=experts.exact(text))
    if await others.count():
        await d.click(others.first, "a wrong button")


def test_cli_writes_schema_and_only_successes(tmp_path, monkeypatch):
    """One CLI run: a broken click-button expert (fails on odd seeds) and login-user, responses in the
    plain prompt format; the file holds exactly the successful episodes, the failures file the rest."""
    out, failures = tmp_path / "demos.jsonl", tmp_path / "failed.jsonl"
    monkeypatch.setattr(experts, "EXPERTS_ORIGINAL", dict(experts.EXPERTS), raising=False)
    monkeypatch.setitem(experts.EXPERTS, "click-button", _wrong_on_odd_seeds)
    rc = demos.main(cli.parse_args(demos.Args, [
        "--tasks", "miniwob:click-button,login-user", "--episodes", "4", "--split", "eval", "--out", str(out),
        "--failures", str(failures), "--prompt", "plain", "--concurrency", "4", "--no-progress"]))
    assert rc == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    for rec in recs:
        check_record(rec, prompt="plain")
    seeds = {t: sorted(r["seed"] for r in recs if r["task"] == t) for t in ("miniwob/click-button", "miniwob/login-user")}
    start = env.EVAL_SEEDS.start
    assert seeds["miniwob/login-user"] == [start + i for i in range(4)]
    assert seeds["miniwob/click-button"] == [start, start + 2], "only the successful (even) seeds are kept"
    assert all([env.parse_action(s["response"]).name for s in r["steps"]] == ["Type", "Type", "Click"]
               for r in recs if r["task"] == "miniwob/login-user")
    failed = [json.loads(line) for line in failures.read_text().splitlines()]
    assert sorted(f["seed"] for f in failed) == [start + 1, start + 3]
    assert all(f["task"] == "miniwob/click-button" and f["reason"] for f in failed)


def test_unknown_task_is_refused():
    with pytest.raises(SystemExit, match="no expert"):
        demos.expand_tasks("miniwob:drag-box")


# ---- imperfect demonstrators (demos.py): mistakes that fail, detours that do not ----

def test_imperfect_demonstrators_fail_by_mistake_and_succeed_with_detours():
    """login-user's clean demonstration is Type, Type, Click. With every episode a mistake, each replayed
    episode fails: the decisive Click on another element of the observation (3 steps), or the Click taken early
    (fewer); with every episode a detour, each still succeeds with a Scroll Down and a Scroll Up inserted (5
    steps). Every step is in the policy's format and names an element of the observation it was taken on."""
    tasks = env.load_tasks("miniwob:login-user")
    seeds = [env.EVAL_SEEDS.start + 7_100 + i for i in range(6)]
    clean = {rec["seed"]: rec for rec, _ in asyncio.run(demos.generate(tasks, seeds, 3, progress=False))}
    wrong = asyncio.run(demos.generate(tasks, seeds, 3, progress=False, quality=demos.Quality(mistake=1.0)))
    assert {rec["imperfection"] for rec, _ in wrong} == {"wrong-element", "early-submit"}   # (both, on 6 seeds)
    for rec, reason in wrong:
        assert rec["reward"] == 0.0 and reason, (rec["seed"], reason)
        names = [env.parse_action(s["response"]).name for s in rec["steps"]]
        last = env.parse_action(rec["steps"][-1]["response"])
        want = env.parse_action(clean[rec["seed"]]["steps"][-1]["response"])
        if rec["imperfection"] == "wrong-element":
            assert names == ["Type", "Type", "Click"] and last.element != want.element
        else:
            assert names[-1] == "Click" and len(names) < 3
        for step in rec["steps"]:
            action = env.parse_action(step["response"])
            assert action.element is None or f'id="{action.element}"' in step["observation"]
    detours = asyncio.run(demos.generate(tasks, seeds, 3, progress=False, quality=demos.Quality(detour=1.0)))
    for rec, reason in detours:
        assert reason is None and rec.pop("imperfection") == "detour"
        check_record(rec)
        names = [env.parse_action(s["response"]).name for s in rec["steps"]]
        assert len(names) == 5 and "Scroll Down,Scroll Up" in ",".join(names)
        assert [n for n in names if not n.startswith("Scroll")] == ["Type", "Type", "Click"]


def test_imperfect_rates_are_fixed_per_episode_and_checked():
    """Quality.draw is a function of the episode (the same flags write the same data), its rates hold over many
    episodes, and the CLI refuses rates that are not fractions of episodes."""
    q = demos.Quality(mistake=0.2, detour=0.3)
    kinds = [q.draw(f"miniwob/login-user/{s}")[0] for s in range(4000)]
    assert kinds == [q.draw(f"miniwob/login-user/{s}")[0] for s in range(4000)]
    mistakes = sum(k in ("wrong-element", "early-submit") for k in kinds) / len(kinds)
    assert abs(mistakes - 0.2) < 0.03 and abs(kinds.count("detour") / len(kinds) - 0.3) < 0.03
    assert demos.Quality().draw("miniwob/login-user/1")[0] is None
    with pytest.raises(SystemExit, match="fractions of episodes"):
        demos.main(cli.parse_args(demos.Args, ["--tasks", "miniwob:login-user", "--episodes", "1",
                                               "--mistakes", "0.7", "--detours", "0.5"]))


def test_imperfect_replay_plans_without_a_browser():
    """demos.plan_replay on a clean login-user demonstration (Type, Type, Click): None sends it unchanged;
    "detour" puts a Scroll Down and a Scroll Up (refusals allowed) before one step, not always the same; "early-submit"
    keeps a prefix of the first two steps, then the Click; "wrong-element" turns the Click into a wrong move, which
    wrong_element sends to the other button of the observation (same kind), not to a text field."""
    actions = [env.Action("Type", element=1, argument="ann"), env.Action("Type", element=3, argument="pw"),
               env.Action("Click", element=2)]
    responses = [compress.format_response("# Element: a field or the button", env.format_action(a)) for a in actions]
    obs = ('<html> <button id="0"> Cancel </button> <input id="1" type="text"> <button id="2"> Login </button> '
           '<input id="3" type="password"> </html>')
    assert demos.plan_replay(responses, None, random.Random(0)) == [demos.Move(response=r) for r in responses]
    detours, prefixes = set(), set()
    for seed in range(20):
        detour = demos.plan_replay(responses, "detour", random.Random(seed))
        assert [m.response for m in detour if m.response] == responses and len(detour) == 5
        scrolls = [(m.action.name, m.refused_ok) for m in detour if m.action]
        assert scrolls == [("Scroll Down", True), ("Scroll Up", True)]
        detours.add(next(j for j, m in enumerate(detour) if m.action))
        early = [m.response for m in demos.plan_replay(responses, "early-submit", random.Random(seed))]
        assert early[-1] == responses[-1] and early[:-1] == responses[:len(early) - 1] and len(early) < 3
        prefixes.add(len(early))
        wrong = demos.plan_replay(responses, "wrong-element", random.Random(seed))
        assert wrong[:2] == [demos.Move(response=r) for r in responses[:2]]
        assert wrong[2:] == [demos.Move(action=actions[2], wrong=True)]
        assert demos.wrong_element(obs, actions[2], random.Random(seed)) == env.Action("Click", element=0)
    assert detours == {0, 1, 2} and prefixes == {1, 2}


def test_experts_py_run_as_a_program_says_it_is_not_one(tmp_path):
    """``python experts.py --tasks ... --out f``, the command before demos.py took it over, fails and names
    demos.py instead of exiting 0 with nothing written."""
    import subprocess
    import sys
    from pathlib import Path
    out = subprocess.run([sys.executable, "experts.py", "--tasks", "miniwob:click-button", "--out",
                          str(tmp_path / "d.jsonl")], cwd=Path(__file__).resolve().parent.parent,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "demos.py" in out.stderr and not (tmp_path / "d.jsonl").exists()
