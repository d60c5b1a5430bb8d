"""Adding a task family (env.TaskFamily): a toy family of a few lines, one page served by the context's
router, its page-side status deciding the reward and exit("42") scoring 1, run through a real BrowserPool
in real Chromium. Also: load_tasks dispatches on the family's name, hosts outside family.hosts() are
blocked, and the family's results column.

Run: .venv/bin/python -m pytest -q tests/test_family.py
"""
from __future__ import annotations

import dataclasses

import pytest

import env

PAGE = """<html><head><title>Toy</title></head><body>
<p id="goal"></p>
<button onclick="window.toy = {done: true, score: 1, why: 'won'}">Win</button>
<button onclick="window.toy = {done: true, score: 0, why: 'lost'}">Lose</button>
<script>
  window.toy = {done: false, score: 0, why: null};
  window.startToy = (seed) => (document.getElementById('goal').textContent = 'Press Win, round ' + seed);
</script></body></html>"""


class Toy(env.TaskFamily):
    """docs/environment.md's example: one routed page, a page-side status, and an answer scored on exit()."""
    name = "toy"
    status_js = "() => window.toy"            # read with every observation

    def load(self, body: str) -> list[env.Task]:
        return [env.Task(f"toy/{n}", "toy", "", "http://toy.test/", family="toy") for n in body.split(",")]

    async def setup_context(self, webenv, context, task):
        await context.route("http://toy.test/**", lambda route: route.fulfill(body=PAGE, content_type="text/html"))

    async def start(self, webenv, page, task):
        intent = await page.evaluate("seed => startToy(seed)", task.seed)
        return dataclasses.replace(task, intent=intent)

    def read_status(self, value):
        return env.EpisodeStatus(done=value["done"], reward=float(value["score"]), raw_reward=value["score"],
                                 reason=value["why"])

    async def score_exit(self, webenv, page, task, message, info):
        return float(message == "42")


env.register_family(Toy())


def click(name: str, obs: env.Observation) -> str:
    """The action that clicks the button labelled ``name`` in the observation."""
    n = obs.text.split(f"> {name} </button>")[0].rsplit('<button id="', 1)[1].split('"')[0]
    return f'<think> # Element: the {name} button </think> <answer> do(action="Click", element="{n}") </answer>'


def test_load_tasks_dispatches_to_the_family():
    tasks = env.load_tasks("toy:a,b")
    assert [t.task_id for t in tasks] == ["toy/a", "toy/b"] and all(t.family == "toy" for t in tasks)
    assert env.family_of(tasks[0]).name == "toy" and env.family_of(tasks[0]).column(tasks[0]) == "toy/a"
    assert env.family_of(tasks[0]).hosts(tasks[0]) == ("toy.test:80",)    # the origin of its start URL
    with pytest.raises(ValueError, match="no task family 'nope'"):
        env.family_of(dataclasses.replace(tasks[0], family="nope"))


def test_toy_family_episodes_in_chromium(run, pool):
    task = env.load_tasks("toy:one")[0]

    async def go():
        e = await pool.new_env()
        try:
            obs = await e.reset(dataclasses.replace(task, seed=7))
            fetched = await e.page.evaluate("fetch('http://other.test/x').then(() => 'reached', () => 'blocked')")
            blocked = e.blocked_requests
            lose = await e.step(click("Lose", obs))
            obs2 = await e.reset(dataclasses.replace(task, seed=8))
            win = await e.step(click("Win", obs2))
            await e.reset(task)
            wrong = await e.step('exit(message="41")')
            await e.reset(task)
            right = await e.step('exit(message="42")')
            return obs, fetched, blocked, lose, obs2, win, wrong, right
        finally:
            await e.close()
    obs, fetched, blocked, lose, obs2, win, wrong, right = run(go())
    assert obs.intent == "Press Win, round 7" and obs2.intent == "Press Win, round 8"   # start(), seeded
    assert obs.url == "http://toy.test/" and "<button id=" in obs.text
    assert fetched == "blocked" and blocked == 1                          # other.test is not in hosts()
    assert lose.done and lose.reward == 0.0 and lose.info["done_reason"] == "page_done"
    assert lose.info["reason"] == "lost" and lose.info["raw_reward"] == 0
    assert win.done and win.reward == 1.0 and win.info["done_reason"] == "page_done" and win.info["reason"] == "won"
    assert wrong.done and wrong.reward == 0.0 and wrong.info["done_reason"] == "exit"
    assert right.done and right.reward == 1.0 and right.info["done_reason"] == "exit"
