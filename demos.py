"""Demonstrations for behavior cloning (Sec. 2.2, Eq. 1): the scripted experts' episodes (experts.py) for (task, seed)
jobs, clean or with a demonstrator's mistakes and detours at fixed rates (issue 57), written as the JSONL train_bc.py
reads.

What it does
- (task, seed) jobs through ``rollout.Runner`` (``--concurrency`` contexts of one BrowserPool, the same failure policy
  as RL and evaluation: a page that fails to load or a demonstration longer than 60 s ends that episode with a
  reason), a progress bar, a per-task success table, and the JSONL file (``generate``, ``write_jsonl``,
  ``success_table``, ``main``).
- Each job is ``demonstrate_with``: the expert's clean episode (``experts.demonstrate``); for an episode to which
  ``--mistakes P`` / ``--detours Q`` give an imperfection, the clean demonstration replayed with it on a fresh
  episode of the same page (``replay_imperfect``), and that episode is the one written, marked ``"imperfection"``.
- The imperfection as data, read and tested without a browser:
  - ``Quality``: the rates, and ``Quality.draw(key)``: an episode's imperfection and the generator of its choices,
    both a function of the episode (task and seed), so the same flags write the same data.
  - ``plan_replay(responses, kind, rng)``: the replay as a list of ``Move``: which responses of the clean
    demonstration are sent, where the scroll detour goes, and that the last action moves to another element.
  - ``wrong_element(obs_text, action, rng)``: that other element, picked on the observation the action is taken
    on (the same ``rng``, at the replay's last step).

How the imperfect demonstrator departs from a real one: the errors are drawn, not made; one imperfection at most per
episode, of three kinds (a wrong element, an early submit, a scroll detour), the rest the clean demonstration's.

Seeds: ``--split train`` draws from ``env.DEMO_SEEDS``, ``--split eval`` from ``env.EVAL_SEEDS`` (the tests); no
page is both demonstrated and rolled out, selected on or tested on (docs/training.md, "The pipeline by hand").

Run:
    python demos.py --tasks experts --episodes 100 --out data/demos.jsonl       # every covered task
    python demos.py --tasks miniwob:click-button,login-user --episodes 50 --concurrency 6
    python demos.py --tasks experts --episodes 100 --split eval --out /tmp/x.jsonl   # held-out check
    python demos.py --tasks suite:all,edit-profile@out --episodes 100 --split eval --out /tmp/s.jsonl  # site suite
    python demos.py --tasks miniwob:click-button,login-user --episodes 20 --mistakes 0.5   # an unfiltered log
``--prompt plain`` writes responses for compress's plain prompt instead of <think>/<answer>; ``--thoughts long``
long thoughts (R1-CoT in miniature), the actions and episodes those of the default ``short``.
Output, one JSON line per successful episode (and per imperfect one, marked ``"imperfection": kind``):
    {"task": "miniwob/login-user", "seed": 3, "intent": "Enter the username ...", "reward": 1.0,
     "steps": [{"observation": "<html> ...", "error": null, "url": "http://miniwob.local/...",
                "response": "<think> # Element: ... </think> <answer> do(...) </answer>"}, ...]}
"observation" is the text the action was taken on and "error" the env's message shown with it (tests:
tests/test_experts.py).
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import hashlib
import json
import logging
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import env as webenv
from bc_data import observed_elements
from compress import PromptKind
from env.actions import Action, parse_action
from experts import EXPERTS, SUITE_EXPERTS, Demo, demonstrate, run_demo, solver_of   # the solvers and their harness
from rollout import EnvConfig, Job, Runner

log = logging.getLogger("demos")


# ---- seeds ----

# --split: demonstrations come from env.DEMO_SEEDS (0 .. 99_999; RL and validation have their own ranges), the
# experts' own success checks from the held-out env.EVAL_SEEDS (one definition, in env/tasks.py)
SPLITS = {"train": webenv.DEMO_SEEDS, "eval": webenv.EVAL_SEEDS}

EPISODE_TIMEOUT_S = 60.0      # one demonstration, reset included


# ---- imperfect demonstrators: a clean demonstration replayed with a mistake or a detour ----

@dataclass(frozen=True)
class Quality:
    """How often the demonstrator errs, one imperfection at most per episode, drawn from a hash of the episode
    (task and seed), so the same flags write the same data. ``mistake``: the fraction of episodes with a mistake
    that fails them (kind a), half of them the decisive last action on another element of the observation
    (``wrong-element``), half that action taken before the steps that prepare it (``early-submit``; one-step
    episodes take the first); an unfiltered log keeps them. ``detour``: the fraction with a detour (kind b): a
    Scroll Down and a Scroll Up inserted before a random step, two interactions of the budget spent looking
    around (on a page that does not scroll, the env answers that it is already at the bottom / top); filtering
    by success cannot remove it. The kinds exclude each other (mistake + detour <= 1). Both 0:
    the clean demonstrator."""
    mistake: float = 0.0
    detour: float = 0.0

    def draw(self, key: str) -> tuple[str | None, random.Random]:
        """The imperfection of the episode ``key`` ("task_id/seed"): None, "wrong-element", "early-submit" or
        "detour", and the generator of its choices (which element, which step)."""
        # (blake2b's hex digest, not rollout.hash63: that would draw another log than the one make demo's table and
        # every finding's evidence come from)
        rng = random.Random(hashlib.blake2b(key.encode(), digest_size=8).hexdigest())
        u, half = rng.random(), rng.random() < 0.5
        if u < self.mistake:
            return ("wrong-element" if half else "early-submit"), rng
        return ("detour" if u < self.mistake + self.detour else None), rng


@dataclass(frozen=True)
class Move:
    """One step of an imperfect replay: a response of the clean demonstration, sent as it is (``response``), or an
    action written afresh with the thought "# Element: {what}" (``action``), where ``refused_ok`` lets the env
    refuse it and the replay go on (a scroll on a page that does not scroll), and ``wrong`` says to move it to
    another element of the live observation first (``wrong_element``). E.g. the detour's first step:
    ``Move(action=Action("Scroll Down"), what="none; look further down the page first", refused_ok=True)``."""
    response: str | None = None
    action: Action | None = None
    what: str = ""
    refused_ok: bool = False
    wrong: bool = False


_SCROLL_DETOUR = ((Action("Scroll Down"), "none; look further down the page first"),
                  (Action("Scroll Up"), "none; back up to where I was"))


def plan_replay(responses: list[str], kind: str | None, rng: random.Random) -> list[Move]:
    """The replay of a clean demonstration (its ``responses``, in order) with the imperfection ``kind``
    (``Quality.draw``, whose ``rng`` picks the steps): "early-submit" keeps a random prefix of the steps before the
    last, then the last; "detour" puts the scroll detour before a random step; "wrong-element" sends the last
    action as a ``wrong`` move (an action that names no element stays as it is); None, the clean replay."""
    last = parse_action(responses[-1])
    if kind == "early-submit":
        responses = responses[:rng.randrange(max(len(responses) - 1, 1))] + [responses[-1]]
    detour_at = rng.randrange(len(responses)) if kind == "detour" else -1
    moves = []
    for j, response in enumerate(responses):
        if j == detour_at:
            moves += [Move(action=action, what=what, refused_ok=True) for action, what in _SCROLL_DETOUR]
        if j == len(responses) - 1 and kind == "wrong-element" and last.element is not None:
            moves.append(Move(action=last, wrong=True))
        else:
            moves.append(Move(response=response))
    return moves


def wrong_element(obs_text: str, action: Action, rng: random.Random) -> Action:
    """``action`` on another element of the observation, of the same kind where there is one (a plausible
    slip: the neighbouring button, the other link); ``action`` itself when the observation has no other."""
    shown = observed_elements(obs_text)
    kind = shown.get(action.element, "").split(" ", 1)[0]
    others = sorted(e for e in shown if e != action.element)
    same = [e for e in others if shown[e].split(" ", 1)[0] == kind]
    return dataclasses.replace(action, element=rng.choice(same or others)) if others else action


async def replay_imperfect(env, task, clean: dict, kind: str, rng: random.Random,
                           prompt: str) -> tuple[dict, str | None]:
    """The clean demonstration ``clean`` of ``task`` sent again on a fresh episode of the same page, move by move
    as ``plan_replay`` lays out the imperfection ``kind`` (``Quality.draw``); the steps are recorded from the live
    pages, as ``experts.demonstrate`` records them. Returns (record with ``"imperfection": kind``, failure reason or
    None)."""
    moves = plan_replay([s["response"] for s in clean["steps"]], kind, rng)
    demo = Demo(env, await env.reset(task), prompt=prompt, key=f"{task.task_id}/{task.seed}")

    async def replay(d: Demo) -> None:
        for move in moves:
            if move.response is not None:
                await d.send(move.response)
            elif move.wrong:                   # the slip, on the observation the action is taken on
                wrong = wrong_element(d.obs.text, move.action, rng)
                await d.act(wrong, observed_elements(d.obs.text).get(wrong.element, "another element"))
            else:
                await d.act(move.action, move.what, refused_ok=move.refused_ok)

    reason = await run_demo(demo, replay, kind)
    return {**clean, "reward": demo.reward, "steps": demo.steps, "imperfection": kind}, reason


async def demonstrate_with(env, task, prompt: str = "thinking", thoughts: str = "short",
                           quality: Quality = Quality()) -> tuple[dict, str | None]:
    """One job's episode: the expert's clean one (``experts.demonstrate``: record, failure reason or None); with a
    ``quality`` that gives this episode an imperfection, the clean demonstration replayed with it
    (``replay_imperfect``), and that episode returned, marked ``"imperfection"``."""
    record, reason = await demonstrate(env, task, prompt, thoughts)
    kind, rng = quality.draw(f"{task.task_id}/{task.seed}")
    if reason is None and kind is not None:
        return await replay_imperfect(env, task, record, kind, rng, prompt)
    return record, reason


# ---- command line ----

@dataclass
class Args:
    """Generate behavior-cloning demonstrations with the scripted MiniWoB++ experts."""
    env: EnvConfig = dataclasses.field(default_factory=lambda: EnvConfig(tasks="experts"))
    """the tasks and their browsers (flags --tasks: 'experts', every covered task, or an env.load_tasks spec such
    as 'miniwob:click-button,login-user'; --rubric; --browser-endpoint)"""
    episodes: int = 100
    """episodes (seeds) per task; only successful ones are written"""
    split: Literal["train", "eval"] = "train"
    """seed range: 'train' (env.DEMO_SEEDS, 0..99999) or 'eval' (env.EVAL_SEEDS, 1000000..1999999)"""
    seed_offset: int = 0
    """first seed = start of the split + seed_offset (episode i uses start + seed_offset + i)"""
    out: str = "data/demos.jsonl"
    """output JSONL, one successful trajectory per line"""
    concurrency: int = 6
    """browser contexts running episodes in parallel (one Chromium)"""
    max_obs_chars: int = 0
    """observation length cap passed to the env (0 = the env's default)"""
    chromium: str = ""
    """Chromium executable (empty = env's default)"""
    failures: str = ""
    """optional JSONL of failed episodes (record + reason) for debugging"""
    progress: bool = True
    """show a tqdm progress bar"""
    prompt: PromptKind = "thinking"
    """response format, a compress.system_prompt kind: thinking / short (<think>..</think><answer>..</answer>)
    or plain / short_plain (a '# Element:' line, then the action)"""
    thoughts: Literal["short", "long"] = "short"
    """thoughts: 'short' ('# Element: ...') or 'long' (a reasoning paragraph, then that line: R1-CoT in miniature)"""
    mistakes: float = 0.0
    """an imperfect demonstrator: the fraction of episodes with a mistake that fails them (Quality), written too,
    as an unfiltered log keeps them (train_bc.py --no-only-successes clones them)"""
    detours: float = 0.0
    """an imperfect demonstrator: the fraction of episodes with a detour that spends two interactions (Quality)"""


def expand_tasks(spec: str) -> list:
    """Tasks of ``--tasks``: 'experts' = every MiniWoB task in EXPERTS, else env.load_tasks(spec) (e.g.
    'suite:all'), each of which must have an expert."""
    if spec in ("experts", "miniwob:experts"):
        spec = "miniwob:" + ",".join(EXPERTS)
    tasks = webenv.load_tasks(spec)
    missing = [t.task_id for t in tasks if solver_of(t) is None]
    if missing:
        raise SystemExit(f"no expert for {missing}; covered: {', '.join(EXPERTS)}; "
                         f"suite: {', '.join(SUITE_EXPERTS)}")
    return tasks


async def generate(tasks: list, seeds: list[int], concurrency: int, *, env_kwargs: dict | None = None,
                   pool_kwargs: dict | None = None, progress: bool = True, prompt: str = "thinking",
                   thoughts: str = "short", quality: Quality = Quality()) -> list[tuple[dict, str | None]]:
    """Run every (task, seed) through the experts with ``concurrency`` contexts of one BrowserPool."""
    jobs = [dataclasses.replace(t, seed=s) for t in tasks for s in seeds]
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(jobs), desc="demos", unit="ep", dynamic_ncols=True)
    ok = 0

    def failed(job: Job, reason: str) -> tuple[dict, str]:   # a reset that failed, or a demonstration too long
        return {"task": job.task.task_id, "seed": job.task.seed, "intent": "", "reward": 0.0, "steps": []}, reason

    def done(job: Job, result: tuple[dict, str | None]) -> None:
        nonlocal ok
        if result[1]:
            log.info("%s seed %d failed: %s", job.task.task_id, job.task.seed, result[1])
        ok += result[1] is None
        if bar is not None:
            bar.update(1)
            bar.set_postfix(success=f"{ok}/{bar.n}")

    async with webenv.BrowserPool(**(pool_kwargs or {})) as pool, \
            Runner(pool, concurrency, timeout_s=EPISODE_TIMEOUT_S,
                   env_kwargs=env_kwargs or {}) as runner:
        results = await runner.run([Job(t) for t in jobs],
                                   lambda env, job: demonstrate_with(env, job.task, prompt, thoughts, quality),
                                   failed, done)
    if bar is not None:
        bar.close()
    return sorted(results, key=lambda r: (r[0]["task"], r[0]["seed"]))


def write_jsonl(path: str | Path, records: list[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def success_table(results: list[tuple[dict, str | None]]) -> str:
    per = collections.defaultdict(lambda: [0, 0, 0])    # task -> [successes, episodes, steps of successes]
    for rec, reason in results:
        p = per[rec["task"]]
        p[1] += 1
        if reason is None:
            p[0] += 1
            p[2] += len(rec["steps"])
    lines = [f"{'task':<34} {'success':>9} {'rate':>7} {'steps':>6}"]
    for task, (ok, n, steps) in sorted(per.items()):
        lines.append(f"{task:<34} {ok:>4}/{n:<4} {ok / n:>7.1%} {steps / max(ok, 1):>6.1f}")
    ok, n = sum(p[0] for p in per.values()), sum(p[1] for p in per.values())
    lines.append(f"{'all':<34} {ok:>4}/{n:<4} {ok / max(n, 1):>7.1%}")
    return "\n".join(lines)


def main(args: Args) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    webenv.browser_endpoints(args.env.browser_endpoint or None)    # checked, and their tokens kept out of logs
    log.info("args %s", webenv.redact(str(vars(args))))
    # derived
    split = SPLITS[args.split]
    seeds = [split.start + args.seed_offset + i for i in range(args.episodes)]
    if seeds and seeds[-1] >= split.stop:
        raise SystemExit(f"seeds run past the {args.split} range {split}")
    if min(args.mistakes, args.detours) < 0 or args.mistakes + args.detours > 1:
        raise SystemExit(f"--mistakes and --detours are fractions of episodes, >= 0 and together <= 1, not "
                         f"{args.mistakes} and {args.detours}")
    tasks = expand_tasks(args.env.tasks)
    env_kwargs = {"max_obs_chars": args.max_obs_chars} if args.max_obs_chars else {}
    env_kwargs["families"] = args.env.families()                    # --rubric: how the site suite is scored
    pool_kwargs = {"executable_path": args.chromium} if args.chromium else {}
    if args.env.browser_endpoint:
        pool_kwargs["endpoints"] = args.env.browser_endpoint

    t0 = time.time()
    results = asyncio.run(generate(tasks, seeds, args.concurrency, env_kwargs=env_kwargs,
                                   pool_kwargs=pool_kwargs, progress=args.progress, prompt=args.prompt,
                                   thoughts=args.thoughts, quality=Quality(args.mistakes, args.detours)))
    kept = [rec for rec, reason in results if reason is None or "imperfection" in rec]   # (a log keeps its mistakes)
    write_jsonl(args.out, kept)
    if args.failures:
        write_jsonl(args.failures, [{**rec, "reason": reason} for rec, reason in results if reason])
    reasons = collections.Counter(reason.split(":")[0] for _, reason in results if reason)
    print(success_table(results))
    imperfect = collections.Counter((r["imperfection"], r["reward"] > 0) for r in kept if "imperfection" in r)
    print(f"wrote {len(kept)} trajectories ({sum(len(r['steps']) for r in kept)} steps) to {args.out} "
          f"in {time.time() - t0:.1f}s; failures by kind: {dict(reasons)}"
          + (f"; imperfect (kind, success): {dict(sorted(imperfect.items()))}" if imperfect else ""))
    return 0


if __name__ == "__main__":
    from trainlib.cli import parse_args
    raise SystemExit(main(parse_args(Args)))
