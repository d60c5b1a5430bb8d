"""The one episode loop of WebAgent-R1: render -> generate -> step, for RL, evaluation and benchmarks alike,
and the runner that drives many episodes over a pool of browser contexts.

- ``rollout(env, backend, tokenizer, task, cfg)``: one episode. Each step renders the history with dynamic
  context compression (compress.py), generates one response (a backend behind engines/'s interface: the HF
  engine, vLLM or policy.OpenAIBackend) and executes it (env/). Every step is kept as a token-exact ``Sample`` (the prompt ids
  the policy saw + the ids it generated, never re-tokenized), so M-GRPO scores each action under the context it
  was generated in.
- ``Runner``: N episodes over at most ``size`` browser contexts of one ``env.BrowserPool``, with one policy
  for what goes wrong. Each of these ends that episode with a recorded reason while the run goes on:
  * a failed reset (the start page does not load, the browser died twice): ``done_reason "reset_failed: ..."``;
  * a crash during the episode (page, context or browser gone): env's ``done_reason "crash"``;
  * an episode longer than ``timeout_s``: ``"timeout"``, and its browser context is replaced;
  * a prompt that no longer fits ``max_context`` (possible with ``compress=False``): ``"context_overflow: ..."``.
  The first three are the environment's fault, not the policy's: ``Trajectory.env_error`` says so, and
  M-GRPO leaves such trajectories out of their group's statistics. A context overflow is the policy's
  own outcome (it spent its context), scored 0 like running out of steps.
- ``EpisodeConfig``: the prompt and sampling settings of an episode, one small dataclass that each
  script's ``Args`` embeds (its fields are ordinary flags: ``--temperature``, ``--prompt``, ...); ``EnvConfig``
  the same for the environment (``--tasks``, ``--rubric``, ``--browser-endpoint``).

Demonstrations (demos.py) run the scripted experts' episodes through the same ``Runner``.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal, Sequence, TypeVar

from playwright.async_api import Error as PlaywrightError

import compress
import engines
import env as webenv

log = logging.getLogger("webagent.rollout")


@dataclass
class EpisodeConfig:
    """Prompt and sampling settings of an episode (the paper's values as defaults)."""
    prompt: compress.PromptKind = "thinking"
    """system prompt: thinking | plain | short | short_plain (compress.system_prompt)"""
    compress: bool = True
    """dynamic context compression (Sec. 2.3); --no-compress keeps every observation"""
    temperature: float = engines.SAMPLING.temperature
    """sampling temperature (paper: 1.0 in rollouts); 0 = greedy"""
    top_p: float = engines.SAMPLING.top_p
    """nucleus sampling (paper: 1.0)"""
    max_new_tokens: int = engines.SAMPLING.max_new_tokens
    """tokens per response (paper: 1,024)"""
    max_context: int = 16384
    """prompt + response tokens (paper: 16,384); the current observation is truncated to fit"""
    max_obs_chars: int = webenv.MAX_OBS_CHARS
    """observation length cap in characters (env side), the same for demonstrations, RL and evaluation"""
    batch_invariant: bool = True
    """HF backend on a CPU: a response does not depend on the other requests of its batch (``HFBackend``'s
    ``invariance="auto"``: forwards at shapes fixed per request where this machine's kernels allow it, checked at
    start, else a float64 copy of the model; bench/bench_rl_step.py and bench/bench_eval.py: what each costs);
    GPUs: vLLM's VLLM_BATCH_INVARIANT=1 (docs/gpu.md)"""
    episode_timeout: float = 900.0
    """seconds one episode may take; a slower one ends with done_reason timeout and a fresh context"""
    miniwob_in_place: bool = False
    """restart a MiniWoB page in place when its browser context runs the same task again (no page load: ~0.25
    CPU s less per episode); off by default, as some pages keep state across episodes (MiniWoBFamily); make
    demo's 8 tasks give the same observations and rewards either way (tests/test_env_miniwob.py)"""
    action_delay: float = 0.0
    """seconds to wait after every action: the paper's environment latency for a benchmark (VAB sleeps 3 s after each
    browser action; bench/bench_async.py); 0: none"""

    def __post_init__(self):   # a bad setting fails when the flags are read, naming its flag
        checks = {"--max-new-tokens must be >= 1": self.max_new_tokens >= 1,
                  "--temperature must be >= 0 (0: greedy)": self.temperature >= 0,
                  "--top-p must lie in (0, 1]": 0 < self.top_p <= 1}
        if bad := [f"{rule}, not {value}" for (rule, ok), value in
                   zip(checks.items(), (self.max_new_tokens, self.temperature, self.top_p)) if not ok]:
            raise ValueError("; ".join(bad))

    def env_kwargs(self, *families: webenv.TaskFamily) -> dict[str, Any]:
        """The ``BrowserPool.new_env`` options these settings ask for, with ``families`` (a family's options
        for this run, e.g. ``WebArenaFamily(rubric=...)``)."""
        mine = [webenv.MiniWoBFamily(in_place=True)] if self.miniwob_in_place else []
        return {"max_obs_chars": self.max_obs_chars, "families": [*families, *mine]}


@dataclass
class EnvConfig:
    """Which tasks the episodes run, how WebArena-format tasks are scored, and where their browsers run: the
    environment settings eval.py, train_mgrpo.py and demos.py share (flags --tasks, --rubric, --browser-endpoint)."""
    tasks: str = "miniwob:click-button,login-user"
    """task spec for env.load_tasks: "miniwob:a,b", "miniwob:all" or a WebArena config JSON"""
    rubric: Literal["vab", "webarena"] = "vab"
    """WebArena tasks' evaluator: vab (VisualAgentBench's WebArena-Lite evaluators, the paper's) or webarena
    (WebArena's original ones); docs/webarena.md, section Rubrics"""
    browser_endpoint: str = ""
    """Playwright browser servers to run the browsers on instead of Chromium here (ws://HOST:PORT/TOKEN, as
    scripts/browser_server.py prints it; several comma-separated; default $WEBAGENT_BROWSER_ENDPOINT);
    docs/environment.md, section Browsers on other machines"""

    def load_tasks(self) -> list[webenv.Task]:
        """The tasks, after checking the browser endpoints (a malformed one fails here, its token kept out of
        logs)."""
        webenv.browser_endpoints(self.browser_endpoint or None)
        return webenv.load_tasks(self.tasks)

    def pool(self) -> webenv.BrowserPool:
        """The browser pool the episodes' contexts come from."""
        return webenv.BrowserPool(endpoints=self.browser_endpoint or None)

    def families(self) -> list[webenv.TaskFamily]:
        """The task families' options of this run (for ``EpisodeConfig.env_kwargs``)."""
        return [webenv.WebArenaFamily(rubric=self.rubric)]


# ---- records ----

@dataclass
class Sample:
    """One action a_ij with the exact context it was generated in: ``ids = prompt + action``,
    ``mask`` 1 on the action ids (end-of-turn id included); ``logprobs`` the engine's log-probs of the action ids,
    as it drew them (``Generation.logprobs``: the raw distribution), None from a backend that has none (OpenAI)."""
    ids: list[int]
    mask: list[int]
    logprobs: list[float] | None = None


@dataclass
class Trajectory:
    """One episode tau_i: its group, binary reward, per-step samples and a readable log of the steps.
    ``env_error`` marks an episode the environment ended (failed reset, crash, timeout): not the policy's
    outcome, so RL leaves it out of the group statistics."""
    group: int
    task_id: str
    seed: int
    intent: str = ""
    reward: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    done_reason: str | None = None
    env_error: bool = False
    parse_errors: int = 0
    truncated_tokens: int = 0
    seconds: float = 0.0
    eval: dict | None = None     # a rubric's details on exit() (WebArena-format tasks): scores, reasons


@dataclass(frozen=True)
class Job:
    """One episode to run: the task (its seed and max_steps set), the RL group (or eval episode index) it
    belongs to, and where to save a screenshot per step (None: no screenshots). ``noise``: the base of its
    requests' seeds (``request_seed``, with ``sample``, its index among the episodes of one page; RL: ``group_noise``
    and the index in the group): the episode's sampling the same whatever runs beside it (evaluation: common
    random numbers); None: fresh noise from the backend's own generator. ``temperature``: its own, where it is
    not the config's (evaluation runs a page's greedy episode beside its samples)."""
    task: webenv.Task
    group: int = 0
    screenshot_dir: Path | None = None
    noise: int | None = None
    sample: int = 0
    temperature: float | None = None


def group_noise(seed: int, group: int) -> int:
    """The noise base of an RL run's ``group``-th group (counted over the whole run, all ranks and sampling rounds,
    so it names the step and the round); its trajectories' requests are ``request_seed(group_noise(seed, group),
    task, page, index in group, turn)``: a rollout is a function of the weights, the run's seed and where it stands
    in the run, never of its batch or of which browser answered first."""
    return hash63(f"m-grpo|{seed}|{group}")


def request_seed(noise: int, task_id: str, page: int, sample: int, turn: int) -> int:
    """The seed of one request's sampling noise: a hash of (noise base, task, page seed, sample index, turn),
    63 bits. The backend draws token k's noise as the k-th draw of a generator seeded with it, so the noise is a
    function of (task, page, sample, turn, token position) and never of the batch or of other requests: two
    models asked on the same page and sample draw with the same noise, and their paired difference loses it."""
    return hash63(f"{noise}|{task_id}|{page}|{sample}|{turn}")


def hash63(key: str) -> int:
    """63 bits of blake2b of ``key``: a seed no other key shares in practice, the same on every machine."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 1


# ---- one episode ----

async def rollout(env: webenv.WebEnv, backend, tokenizer, task: webenv.Task, cfg: EpisodeConfig, *,
                  group: int = 0, screenshot_dir: Path | None = None, noise: int | None = None,
                  sample: int = 0) -> Trajectory:
    """Run one episode: render -> generate -> step until done; every step becomes a token-exact Sample.

    With ``screenshot_dir``, the page is saved as ``step_<j>.png`` before each action and ``final.png`` at
    the end, and each step records its screenshot's file name. With ``noise``, turn j's request is seeded
    with ``request_seed(noise, task, page, sample, j)`` (``Job``)."""
    traj = Trajectory(group=group, task_id=task.task_id, seed=task.seed)
    start = time.perf_counter()
    try:
        obs = await env.reset(task)
    except webenv.EpisodeCrash as e:   # the start page did not load: this episode only
        traj.done_reason, traj.env_error = f"reset_failed: {e}", True
        traj.seconds = time.perf_counter() - start
        return traj
    traj.intent = obs.intent
    turns: list[compress.Turn] = []
    while True:
        try:
            prompt_ids, n_cut, shown, messages = compress.fit_prompt(
                tokenizer, obs.intent, turns, obs.text, obs.error, max_context=cfg.max_context,
                max_new_tokens=cfg.max_new_tokens, prompt=cfg.prompt, compress=cfg.compress)
        except compress.ContextOverflowError as e:   # the history alone fills the context (--no-compress)
            traj.done_reason = f"context_overflow: {e}"
            traj.seconds = time.perf_counter() - start
            return traj
        traj.truncated_tokens += n_cut
        shot = await _screenshot(env, screenshot_dir, f"step_{len(traj.steps)}.png")
        seed = None if noise is None else request_seed(noise, task.task_id, task.seed, sample, len(traj.steps))
        gen = await backend.generate(prompt_ids, messages=messages, max_new_tokens=cfg.max_new_tokens,
                                     temperature=cfg.temperature, top_p=cfg.top_p, seed=seed)
        traj.samples.append(Sample(*compress.rl_sample(prompt_ids, gen.ids), logprobs=gen.logprobs))
        res = await env.step(gen.text)
        if cfg.action_delay:   # a benchmark of the paper's environment latency (VAB: 3 s after every action)
            await asyncio.sleep(cfg.action_delay)
        info = res.info
        traj.parse_errors += int(bool(info.get("parse_error")))
        traj.steps.append({"url": obs.url, "observation": shown, "error": obs.error, "response": gen.text,
                           "action": info.get("action"), "action_error": info.get("error"), "screenshot": shot,
                           "parse_error": bool(info.get("parse_error")), "finish_reason": gen.finish_reason,
                           "hung_scripts": info.get("hung_scripts", []),
                           "logprob": sum(gen.logprobs) if gen.logprobs is not None else None})
        turns.append(compress.Turn(shown, gen.text, obs.error))
        if res.done:
            traj.reward, traj.done_reason = float(res.reward), info.get("done_reason")
            traj.eval = info.get("eval")
            traj.env_error = traj.done_reason == "crash"
            await _screenshot(env, screenshot_dir, "final.png")
            traj.seconds = time.perf_counter() - start
            return traj
        obs = res.obs


async def _screenshot(env: webenv.WebEnv, out_dir: Path | None, name: str) -> str | None:
    """Save the active page as out_dir/name; a page that cannot be captured (crashed) gives None."""
    if out_dir is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        await env.page.screenshot(path=str(out_dir / name), timeout=10_000)
    except PlaywrightError as e:   # a crashed or closed page: the episode's own step result says why
        log.warning("screenshot %s failed: %s", out_dir / name, e)
        return None
    return name


# ---- many episodes over a pool of contexts ----

R = TypeVar("R")


class Runner:
    """Runs episodes over at most ``size`` browser contexts of ``pool``, reused from one call of ``run`` to
    the next (a MiniWoB context keeps its page between episodes). An episode takes an idle context whose last
    episode had its start page when there is one (its family may restart the page in place:
    ``EpisodeConfig.miniwob_in_place``), else a new one while there are fewer than ``size``, else the idle
    one that has waited longest.

    >>> async with env.BrowserPool() as pool, Runner(pool, size=8) as runner:       # doctest: +SKIP
    ...     trajs = await rollouts(runner, backend, tokenizer, [Job(task, g) for g in range(8)], cfg)
    """

    def __init__(self, pool: webenv.BrowserPool, size: int, *, timeout_s: float | None = None,
                 env_kwargs: dict[str, Any] | None = None) -> None:
        self.pool, self.size, self.timeout_s = pool, max(1, size), timeout_s
        self.env_kwargs = dict(env_kwargs or {})
        self._idle: list[webenv.WebEnv] = []          # the longest idle first
        self._returned = asyncio.Condition()
        self._made = 0

    async def __aenter__(self) -> "Runner":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        while self._idle:
            await self._idle.pop(0).close()

    async def _get_env(self, task: Any) -> webenv.WebEnv:
        start_url = getattr(task, "start_url", None)
        async with self._returned:
            while True:
                same = [e for e in self._idle if e.task is not None and e.task.start_url == start_url]
                if same or (self._idle and self._made >= self.size):
                    env = (same or self._idle)[0]
                    self._idle.remove(env)
                    return env
                if self._made < self.size:
                    self._made += 1
                    break
                await self._returned.wait()
        return await self.pool.new_env(**self.env_kwargs)

    async def _put_env(self, env: webenv.WebEnv) -> None:
        async with self._returned:
            self._idle.append(env)
            self._returned.notify()

    async def run(self, jobs: Sequence[Job], episode: Callable[[webenv.WebEnv, Job], Awaitable[R]],
                  on_failure: Callable[[Job, str], R], on_done: Callable[[Job, R], None] | None = None) -> list[R]:
        """``episode(env, job)`` for every job, at most ``size`` at a time, each on its own context; returns
        the results in job order. An episode that raises ``env.EpisodeCrash`` or runs past ``timeout_s``
        gets ``on_failure(job, reason)`` as its result and its context is replaced; ``on_done(job, result)``
        is called as each episode ends."""
        async def one(job: Job) -> R:
            task, env = job.task, None
            try:
                # what the episode needs to itself (a site replica: env.SitePool), waited for before it
                # takes a context and outside its time limit, given back however it ends; the callbacks get the
                # job as given, the episode the job on its lease
                async with webenv.family_of(task).lease(task) as leased:
                    env = await self._get_env(leased)
                    here = job if leased is task else dataclasses.replace(job, task=leased)
                    result = await asyncio.wait_for(episode(env, here), self.timeout_s)
            except (webenv.EpisodeCrash, asyncio.TimeoutError) as e:
                reason = (f"timeout: the episode took more than {self.timeout_s:.0f}s"
                          if isinstance(e, asyncio.TimeoutError) else f"reset_failed: {e}")
                log.warning("episode of %s seed %s ended: %s", getattr(task, "task_id", "?"),
                            getattr(task, "seed", "?"), reason)
                result = on_failure(job, reason)
                if env is not None:   # whatever state it is in, the next episode gets a fresh context
                    await env.close()
                    env = await self.pool.new_env(**self.env_kwargs)
            finally:
                if env is not None:
                    await self._put_env(env)   # (after a failure: the replacement)
            if on_done is not None:
                on_done(job, result)
            return result

        return list(await asyncio.gather(*(one(j) for j in jobs)))


async def rollouts(runner: Runner, backend, tokenizer, jobs: Sequence[Job], cfg: EpisodeConfig,
                   on_done: Callable[[Job, Trajectory], None] | None = None) -> list[Trajectory]:
    """``rollout`` for every job through ``runner``; a timed-out episode becomes an ``env_error``
    trajectory with done_reason "timeout: ...". Returns the trajectories in job order."""
    def failed(job: Job, reason: str) -> Trajectory:
        return Trajectory(group=job.group, task_id=job.task.task_id, seed=job.task.seed, done_reason=reason,
                          env_error=True)

    def episode(env, job: Job):
        job_cfg = cfg if job.temperature is None else dataclasses.replace(cfg, temperature=job.temperature)
        return rollout(env, backend, tokenizer, job.task, job_cfg, group=job.group,
                       screenshot_dir=job.screenshot_dir, noise=job.noise, sample=job.sample)

    return await runner.run(jobs, episode, failed, on_done)


# ---- what a batch of trajectories did (the metrics of an RL step) ----

def trajectory_stats(trajs: list[Trajectory]) -> dict[str, float]:
    """What a batch of trajectories did (an RL step's ``rollout/*`` metrics): reward, success, response tokens,
    turns, unparsable responses per turn, and the environment's failures (ended episodes, actions that timed
    out, page scripts stopped for hanging: env/hangs.py), counted rather than hidden in the success rate."""
    n = max(len(trajs), 1)
    steps = sum(len(t.steps) for t in trajs)
    return {
        "rollout/reward": sum(t.reward for t in trajs) / n,
        "rollout/success_rate": sum(t.reward > 0 for t in trajs) / n,
        "rollout/response_tokens": sum(sum(s.mask) for t in trajs for s in t.samples) / n,
        "rollout/num_turns": steps / n,
        "rollout/parse_fail_rate": sum(t.parse_errors for t in trajs) / max(steps, 1),
        "rollout/env_errors": float(sum(t.env_error for t in trajs)),
        "rollout/action_timeouts": float(sum(action_timed_out(st) for t in trajs for st in t.steps)),
        "rollout/hung_scripts": float(sum(len(st.get("hung_scripts", ())) for t in trajs for st in t.steps)),
        "rollout/truncated_tokens": float(sum(t.truncated_tokens for t in trajs)),
    }


def action_timed_out(step: dict) -> bool:
    """Whether a step's action ran into its deadline (env's "... failed: timed out ..." error): a verdict the
    page did not give, counted by RL (``rollout/action_timeouts``) and evaluation (``action_timeouts``) alike."""
    return "timed out" in str(step.get("action_error") or "")


def task_counts(trajs: list[Trajectory], tasks: Sequence[webenv.Task]) -> dict[str, float]:
    """This rank's episodes ("task_n/ID") and successes ("task_ok/ID") of every task of the run, rolled out or
    not: the same keys on every rank, as trainlib.distributed.all_reduce_mean needs. A task whose episodes start in several
    ways by seed (``TaskFamily.start_kinds``: the site suite's logged-in and logged-out starts) is counted per
    kind too, as "ID@KIND"."""
    by_id = {t.task_id: (t, webenv.family_of(t)) for t in tasks}
    kinds = {task_id: fam.start_kinds(t) for task_id, (t, fam) in by_id.items()}
    names = [n for task_id, ks in kinds.items() for n in [task_id] + [f"{task_id}@{k}" for k in ks]]
    counts = {f"{k}/{n}": 0.0 for n in names for k in ("task_n", "task_ok")}
    for t in trajs:
        task, fam = by_id[t.task_id]
        kind = kinds[t.task_id] and fam.start_kind(dataclasses.replace(task, seed=t.seed))
        for name in [t.task_id] + ([f"{t.task_id}@{kind}"] if kind else []):
            counts[f"task_n/{name}"] += 1
            counts[f"task_ok/{name}"] += t.reward > 0
    return counts


def task_success(stats: dict[str, float]) -> dict[str, float]:
    """``stats`` with task_counts' keys (averaged over ranks) replaced by "rollout/success/ID", the step's success
    rate of each task it rolled out (dynamics.png plots their moving averages)."""
    out = {k: v for k, v in stats.items() if not k.startswith(("task_n/", "task_ok/"))}
    for k, n in stats.items():
        if k.startswith("task_n/") and n > 0:
            task_id = k[len("task_n/"):]
            out[f"rollout/success/{task_id}"] = stats[f"task_ok/{task_id}"] / n
    return out
