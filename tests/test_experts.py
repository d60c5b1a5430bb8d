"""The scripted MiniWoB++ demonstrators (experts.py) through the real env: real Chromium, real pages.

- every covered task is solved on held-out seeds (EVAL_SEEDS, never used for demonstrations), all tasks
  in ONE BrowserPool with several contexts in parallel, and every recorded step is in the policy's format
  (a response env.parse_action reads, naming an element of the observation it was taken on);
- the CLI writes exactly the trajectory schema train_bc.py reads (here with --prompt plain), and only
  successful episodes (a deliberately broken solver fails on some seeds, and those seeds are missing).

Run: .venv/bin/python -m pytest -q tests/test_experts.py
"""
from __future__ import annotations

import asyncio
import json
import re

import pytest

import env
import experts

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
    train, evals = experts.SPLITS["train"], experts.SPLITS["eval"]
    assert train.stop <= evals.start, "train and eval seed ranges must be disjoint"
    assert all(s in evals for s in TEST_SEEDS)


def test_every_task_solved_on_heldout_seeds():
    tasks = experts.expand_tasks("experts")
    assert len(tasks) == len(experts.EXPERTS)
    results = asyncio.run(experts.generate(tasks, TEST_SEEDS, concurrency=6, progress=False))
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
    rc = experts.main(["--tasks", "miniwob:click-button,login-user", "--episodes", "4", "--split", "eval",
                       "--out", str(out), "--failures", str(failures), "--prompt", "plain",
                       "--concurrency", "4", "--no-progress"])
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
        experts.expand_tasks("miniwob:drag-box")
