"""rollout.py against real Chromium and real MiniWoB++ pages: the episode loop's samples, and the runner's one
policy for what goes wrong (failed reset, crash, timeout, context overflow), each ending only its episode."""
from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest

import compress
import env as webenv
import engines
import policy
from rollout import EpisodeConfig, Job, Runner, Trajectory, rollout, rollouts

CLICK_OK = '<think> # Element: a button </think> <answer> do(action="Click", element="0") </answer>'
WAIT = '<think> wait </think> <answer> do(action="Wait") </answer>'


@pytest.fixture(scope="module")
def tokenizer():
    spec = policy.TinySpec()
    return policy.build_tokenizer(policy.tiny_corpus(), vocab_size=spec.vocab, template=spec.template)


class Scripted:
    """A backend that answers every prompt with the same response (tokenized like a model's output), and can
    do something to the page first (``before``: an async callable) or hang (``delay_s``)."""

    def __init__(self, tokenizer, text: str, *, delay_s: float = 0.0, before=None):
        self.tokenizer, self.text, self.delay_s, self.before = tokenizer, text, delay_s, before
        self.calls = 0

    async def generate(self, prompt_ids, *, messages=None, max_new_tokens=None, temperature=None, top_p=None,
                       seed=None):
        self.calls += 1
        if self.before is not None:
            await self.before()
        await asyncio.sleep(self.delay_s)
        ids = self.tokenizer(self.text, add_special_tokens=False)["input_ids"]
        return engines.Generation(ids=ids, logprobs=None, text=self.text, finish_reason="stop")


def click_button(seed: int, max_steps: int = 3) -> webenv.Task:
    return dataclasses.replace(webenv.load_tasks("miniwob:click-button")[0], seed=seed, max_steps=max_steps)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]   # nothing listens there once the socket is closed


def test_rollout_samples_are_token_exact(run, pool, tokenizer):
    cfg = EpisodeConfig(prompt="short", max_new_tokens=32)
    backend = Scripted(tokenizer, WAIT)
    env = run(pool.new_env())
    traj = run(rollout(env, backend, tokenizer, click_button(3), cfg, group=5))
    run(env.close())
    assert traj.group == 5 and traj.intent and not traj.env_error
    assert traj.done_reason == "max_steps" and len(traj.steps) == len(traj.samples) == 3
    for s in traj.samples:   # prompt ids + the generated ids, mask exactly on the generated ones
        gen = tokenizer(WAIT, add_special_tokens=False)["input_ids"]
        assert s.ids[-len(gen):] == gen and s.mask == [0] * (len(s.ids) - len(gen)) + [1] * len(gen)
    # the second prompt holds the first response, and the first observation only as the placeholder
    second = tokenizer.decode(traj.samples[1].ids)
    assert WAIT in second and compress.PLACEHOLDER in second


def test_runner_failure_policy(run, pool, tokenizer):
    """Four episodes at once: a page that never loads, a browser tab that dies mid-episode, a generation that
    hangs past the timeout, and a normal one. Each gets its reason; the runner goes on and its contexts work."""
    port = closed_port()
    unreachable = webenv.Task("local/dead", "local", "open the page", f"http://127.0.0.1:{port}/",
                              eval={"eval_types": ["string_match"], "reference_answers": {"exact_match": "x"}},
                              max_steps=2)

    cfg = EpisodeConfig(prompt="short", max_new_tokens=32)

    async def episode(env: webenv.WebEnv, job: Job):
        backend = {0: Scripted(tokenizer, CLICK_OK),
                   1: Scripted(tokenizer, WAIT, before=lambda: env.page.close()),   # the tab dies
                   2: Scripted(tokenizer, WAIT, delay_s=60),                         # generation hangs
                   3: Scripted(tokenizer, CLICK_OK)}[job.group]
        return await rollout(env, backend, tokenizer, job.task, cfg, group=job.group)

    def failed(job: Job, why: str) -> Trajectory:
        return Trajectory(job.group, job.task.task_id, job.task.seed, done_reason=why, env_error=True)

    async def scenario():
        async with Runner(pool, size=4, timeout_s=20.0) as runner:
            jobs = [Job(unreachable, 0), Job(click_button(11), 1), Job(click_button(12), 2), Job(click_button(13), 3)]
            trajs = await runner.run(jobs, episode, failed)
            # afterwards every context of the runner still runs a normal episode
            again = await rollouts(runner, Scripted(tokenizer, CLICK_OK), tokenizer,
                                   [Job(click_button(13), g) for g in range(4)], cfg)
        return trajs, again

    trajs, again = run(scenario(), timeout=120)
    reset, crash, timeout, normal = trajs
    assert reset.env_error and reset.done_reason.startswith("reset_failed") and not reset.samples
    assert crash.env_error and crash.done_reason == "crash"
    assert timeout.env_error and timeout.done_reason.startswith("timeout")
    assert not normal.env_error and normal.done_reason == "page_done"
    assert [t.done_reason for t in again] == ["page_done"] * 4 and not any(t.env_error for t in again)


def test_runner_gives_an_episode_the_context_that_last_had_its_page(run, pool):
    """With in-place restarts on, each context keeps its page; a second round of the same tasks in another
    order takes, per episode, the context that ran its task (the page is still there, marked), not the one
    that waited longest (whose page would be loaded again)."""
    tasks = [click_button(31), dataclasses.replace(webenv.load_tasks("miniwob:click-link")[0], seed=31)]

    async def episode(env, job):
        t = job.task
        await env.reset(t)
        seen = await env.page.evaluate("window.__ran || null")          # what this page ran before
        await env.page.evaluate("(name) => { window.__ran = name; }", t.task_id)
        if seen is None and t is tasks[1]:
            await asyncio.sleep(1.0)      # the first round's second context is idle last: FIFO would mismatch
        return seen

    async def scenario():
        async with Runner(pool, size=2, env_kwargs=EpisodeConfig(miniwob_in_place=True).env_kwargs()) as runner:
            first = await runner.run([Job(t) for t in tasks], episode, lambda job, why: why)
            second = await runner.run([Job(t) for t in tasks[::-1]], episode, lambda job, why: why)
        return first, second

    first, second = run(scenario(), timeout=120)
    assert first == [None, None]
    assert second == [t.task_id for t in tasks[::-1]]


def test_context_overflow_ends_the_episode_not_the_run(run, pool, tokenizer):
    """--no-compress keeps every observation: once the history alone fills max_context, that episode ends
    with its reason (a policy outcome, reward 0), and the next episode runs normally."""
    backend = Scripted(tokenizer, WAIT)
    cfg = EpisodeConfig(prompt="short", compress=False, max_new_tokens=32, max_context=900)

    async def scenario():
        async with Runner(pool, size=1) as runner:
            return await rollouts(runner, backend, tokenizer,
                                  [Job(click_button(21, max_steps=30)), Job(click_button(22, max_steps=1))], cfg)

    long, short = run(scenario(), timeout=120)
    assert long.done_reason.startswith("context_overflow") and not long.env_error and long.reward == 0.0
    assert 1 <= len(long.steps) < 30
    assert short.done_reason == "max_steps" and len(short.steps) == 1


def test_scripts_embed_one_episode_config_as_plain_flags(capsys):
    """The shared EpisodeConfig's fields are ordinary flags of each script, with the script's own defaults;
    Literal fields refuse other values at parse time, naming the choices."""
    import eval as ev
    import train_mgrpo
    from trainlib import cli
    rl = cli.parse_args(train_mgrpo.Args, ["--temperature", "0.7", "--prompt", "short", "--no-compress",
                                           "--zero-std", "keep", "--max-turns", "6", "--invalid-penalty", "0.1"])
    assert rl.episode == EpisodeConfig(prompt="short", compress=False, temperature=0.7)
    assert rl.credit == train_mgrpo.Credit(zero_std="keep", invalid_penalty=0.1) and rl.max_turns == 6
    assert cli.parse_args(ev.Args, []).episode.temperature == 1.0          # evaluation: the paper's T = 1
    assert cli.args_dict(rl)["temperature"] == 0.7 and "episode" not in cli.args_dict(rl)
    for bad in (["--prompt", "verbose"], ["--zero-std", "drop"], ["--backend", "tgi"]):
        with pytest.raises(SystemExit):
            cli.parse_args(train_mgrpo.Args, bad)
        assert "invalid choice" in capsys.readouterr().err


def test_action_delay_waits_after_every_action(run, pool, tokenizer):
    """``--action-delay`` (the paper's environment latency for bench/bench_async.py: VAB waits 3 s after every
    browser action): each turn's request comes at least that long after the previous turn's action."""
    calls = []

    async def note():
        calls.append(asyncio.get_running_loop().time())
    backend = Scripted(tokenizer, WAIT, before=note)
    env = run(pool.new_env())
    run(rollout(env, backend, tokenizer, click_button(4), EpisodeConfig(prompt="short", max_new_tokens=32,
                                                                        action_delay=0.4)))
    run(env.close())
    assert len(calls) == 3 and min(b - a for a, b in zip(calls, calls[1:])) >= 0.4, calls
