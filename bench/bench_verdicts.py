"""Verdicts that do not depend on load (issue 67, item 3): the same episodes at 1 and at 64 browser contexts.

A deterministic agent, a pure function of (task, page seed, step, observation text), plays ``--pages`` pages of
each of make demo's 8 tasks (``env.VALID_SEEDS``, at most ``--max-steps`` actions each) through
``rollout.Runner``, once at concurrency 1 on the box as it is and once at ``--concurrency`` with its cores kept
busy by ``--busy`` spinning processes. The agent hashes (blake2b) what it sees and picks among the observation's
numbered elements: mostly a Click, a short word typed into an input or a textarea, now and then Scroll Down or
Select Dropdown Option, rarely exit(); so the episodes mix successes and failures, clicks on covered and odd
elements, typing into what is no field. Since the agent is a function of what it sees, the two runs of a page are
identical exactly when the environment answered identically: every observation text, action, action error, the
reward, the end step and the done_reason. Prints the pages that differ (where, and how), the count, episodes a
minute at each concurrency, and the slowest steps (wall seconds of env.step: the action and the observation after
it).

    .venv/bin/python bench/bench_verdicts.py                            # 50 pages x 8 tasks, c1 vs c64 busy
    .venv/bin/python bench/bench_verdicts.py --action-timeout-ms 2000   # the timeout WebEnv had before
    .venv/bin/python bench/bench_verdicts.py --no-verdicts              # the hung-page rows only
    .venv/bin/python bench/bench_verdicts.py --guard-cost 12            # what the hang guard costs a working page

Before the verdicts, the hung-page rows (``--hung 0`` skips them): what a page whose script hangs (bench/hostile.py:
busy on click, after load, on load, a dialog loop) costs, in wall seconds of its reset and of the step that meets
the hang: each kind alone at concurrency 1; ``--hung`` of them among ``--concurrency`` contexts of verdict episodes
on busy cores; and half as many contexts, every one hung.

``play_pages`` (the agent's episodes), ``difference`` and ``busy_cores`` are tests/test_env_verdicts.py's harness
too. Results are recorded by hand in bench/RESULTS.md under "## verdicts".
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from demo_tasks import DEMO_TASKS  # noqa: E402  (bench/, the script's own directory)
import hostile  # noqa: E402
import env  # noqa: E402
from rollout import Job, Runner  # noqa: E402

TASKS = DEMO_TASKS   # make demo's 8 tasks (scripts/demo_common.sh)
WORDS = ("hi", "abc", "Lorem", "42", "yes", "ok")


@dataclasses.dataclass
class Args:
    pages: int = 50                  # pages per task (env.VALID_SEEDS from --seed-start)
    concurrency: int = 64            # contexts of the loaded run (the other runs at 1)
    busy: int = 2                    # spinning processes that keep the cores busy during the loaded run
    max_steps: int = 6               # actions per episode at most (make demo's evaluation: 6)
    seed_start: int = env.VALID_SEEDS.start
    action_timeout_ms: int = 0       # WebEnv's action_timeout_ms; 0 = its default
    in_place: bool = False           # restart a page in place (make demo's --miniwob-in-place) instead of reloading
    hung: int = 8                    # hung pages among the loaded run's episodes (the hung-page rows); 0: none
    hang_cpu_s: float = 0.0          # WebEnv's hang_cpu_s; 0 = its default
    verdicts: bool = True            # --no-verdicts: the hung-page rows only
    guard_cost: int = 0              # N > 0: only what the hang guard costs, N pages a task at 8 contexts, off / on


# ---- the agent: a pure function of (task, page, step, observation) ----

_ELEMENT = re.compile(r'<(\w+) id="(\d+)"([^>]*)>')
_OPTION = re.compile(r"<option\b[^>]*>\s*([^<]+?)\s*</option>")


def hash_response(task_id: str, seed: int, step: int, text: str) -> str:
    """The agent's response at one step: blake2b of (task, page seed, step, observation text) picks the action.
    Of 100: 3 exit(), 10 Scroll Down (of the page, now and then of an element), 7 Select Dropdown Option (an
    option of the page's text on a <select> when there is one, else on any element: an error), 20 Type of a short
    word (into an input or textarea when there is one, else into any element), 60 Click on any element."""
    h = int.from_bytes(hashlib.blake2b(f"{task_id}|{seed}|{step}|{text}".encode(), digest_size=16).digest(), "little")
    kind, h = h % 100, h // 100
    elements = [(int(n), tag.lower(), attrs) for tag, n, attrs in _ELEMENT.findall(text)]
    if kind < 3 or not elements:
        return "exit()"

    def pick(items: list) -> Any:
        nonlocal h
        item, h = items[h % len(items)], h // len(items)
        return item

    if kind < 13:
        el = pick(elements)[0] if pick([0, 0, 1]) else None
        return 'do(action="Scroll Down")' if el is None else f'do(action="Scroll Down", element="{el}")'
    if kind < 20:
        selects = [e for e in elements if e[1] == "select"]
        option = pick(_OPTION.findall(text) or list(WORDS))
        return f'do(action="Select Dropdown Option", argument="{option}", element="{pick(selects or elements)[0]}")'
    if kind < 40:
        fields = [e for e in elements if e[1] == "textarea" or (e[1] == "input" and not re.search(
            r'type="(checkbox|radio|button|submit|reset|file|image|range|color)"', e[2]))]
        return f'do(action="Type", argument="{pick(list(WORDS))}", element="{pick(fields or elements)[0]}")'
    return f'do(action="Click", element="{pick(elements)[0]}")'


async def play(e: env.WebEnv, task: env.Task) -> dict[str, Any]:
    """One episode of the hash agent: what the page showed and answered at each step (observation text, action,
    action error), the reward, the end step and the done_reason; ``seconds`` holds each env.step's wall time (the
    only field that may differ between two runs)."""
    obs = await e.reset(task)
    steps, seconds, stops = [], [], 0
    while True:
        t0 = time.perf_counter()
        res = await e.step(hash_response(task.task_id, task.seed, len(steps), obs.text))
        seconds.append(time.perf_counter() - t0)
        steps.append((obs.text, res.info["action"], res.info["error"]))
        stops += len(res.info.get("hung_scripts", []))
        if res.done:
            return {"steps": steps, "final": res.obs.text, "reward": res.reward, "end_step": len(steps),
                    "done_reason": res.info["done_reason"], "seconds": seconds, "stops": stops}
        obs = res.obs


async def play_pages(pool: env.BrowserPool, tasks: list[env.Task], concurrency: int, *,
                     env_kwargs: dict[str, Any] | None = None, timeout_s: float = 600) -> dict[tuple, dict]:
    """``play`` on every task (its seed and max_steps set) through a ``rollout.Runner`` of ``concurrency``
    contexts; {(task_id, seed): episode}. A failed reset or an episode past ``timeout_s`` is recorded as such."""
    def failed(job: Job, reason: str) -> dict[str, Any]:
        return {"failed": reason, "seconds": []}

    async with Runner(pool, concurrency, timeout_s=timeout_s, env_kwargs=env_kwargs) as runner:
        out = await runner.run([Job(t) for t in tasks], lambda e, job: play(e, job.task), failed)
    return {(t.task_id, t.seed): ep for t, ep in zip(tasks, out)}


def difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Where two episodes of one page part ways, in words; None when they are the same episode."""
    if "failed" in a or "failed" in b:
        return None if a.get("failed") == b.get("failed") else f"failed: {a.get('failed')} / {b.get('failed')}"
    for k, (x, y) in enumerate(zip(a["steps"], b["steps"])):
        for name, u, v in zip(("observation", "action", "error"), x, y):
            if u != v:
                return f"step {k} {name}: {str(u)[-160:]!r} / {str(v)[-160:]!r}"
    for key in ("end_step", "done_reason", "reward", "final"):
        if a[key] != b[key]:
            return f"{key}: {str(a[key])[-160:]!r} / {str(b[key])[-160:]!r}"
    return None


@contextlib.contextmanager
def busy_cores(n: int) -> Iterator[None]:
    """``n`` processes spinning in a busy loop while the block runs (the cores' other work on a shared box)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


# ---- the benchmark ----

HUNG_KINDS = {"busy-click": 'do(action="Click", element="0")', "busy-after": 'do(action="Wait")',
              "dialogs": 'do(action="Click", element="0")', "busy-load": 'do(action="Wait")'}


async def play_hung(e: env.WebEnv, task: env.Task) -> dict[str, Any]:
    """A hostile page (bench/hostile.py): reset, then one step that meets the hang; the wall seconds of both calls,
    the scripts stopped and how the step ended."""
    t0 = time.perf_counter()
    try:
        await e.reset(task)
    except env.EpisodeCrash as crash:
        return {"seconds": [time.perf_counter() - t0], "stops": 0, "end": f"reset_failed: {crash}"[:80]}
    t1 = time.perf_counter()
    res = await e.step(HUNG_KINDS[task.task_id.removeprefix("test/")])
    return {"seconds": [t1 - t0, time.perf_counter() - t1], "stops": len(res.info.get("hung_scripts", [])),
            "end": res.info["done_reason"]}


async def hung_rows(pool: env.BrowserPool, args: Args, tasks: list[env.Task], kwargs: dict[str, Any]) -> None:
    """Seconds a hung page costs: each kind alone at concurrency 1, then ``--hung`` hung pages among
    ``--concurrency`` contexts on busy cores (the rest play verdict episodes), then every context hung."""
    with hostile.serve() as url:
        kinds = [hostile.hostile(url, k) for k in HUNG_KINDS]
        mixes = [(1, 0, kinds), (args.concurrency, args.busy, [kinds[i % len(kinds)] for i in range(args.hung)]
                                 + tasks[:3 * args.concurrency]),
                 (args.concurrency // 2, args.busy, [kinds[i % len(kinds)] for i in range(args.concurrency // 2)])]
        for conc, busy, jobs in mixes:
            with busy_cores(busy):
                async with Runner(pool, conc, timeout_s=600, env_kwargs=kwargs) as runner:
                    out = await runner.run([Job(t) for t in jobs],
                                           lambda e, job: (play_hung if job.task.task_id.startswith("test/")
                                                           else play)(e, job.task),
                                           lambda job, reason: {"failed": reason, "seconds": []})
            hung = [(t.task_id.removeprefix("test/"), ep) for t, ep in zip(jobs, out) if t.task_id.startswith("test/")]
            calls = sorted(sec for _, ep in hung for sec in ep["seconds"])
            print(f"hung pages, c{conc} with {busy} busy processes, {len(hung)} hung of {len(jobs)} episodes: "
                  f"slowest call {calls[-1]:.1f} s, median {calls[len(calls) // 2]:.1f} s; "
                  + "; ".join(f"{k} {'/'.join(f'{s:.1f}' for s in ep['seconds'])} s, {ep.get('stops')} stops, "
                              f"{ep.get('end') or ep.get('failed')}" for k, ep in hung[:len(HUNG_KINDS)]), flush=True)


async def guard_cost(pool: env.BrowserPool, tasks: list[env.Task], kwargs: dict[str, Any]) -> None:
    """The same episodes at 8 contexts with the hang guard off (``hang_cpu_s=0``) and on, taking turns (off, on, on,
    off, off, on): seconds of each run and the mean of each."""
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for on in (False, True, True, False, False, True):
        t0 = time.perf_counter()
        await play_pages(pool, tasks, 8, env_kwargs=kwargs | ({} if on else {"hang_cpu_s": 0.0}))
        seconds[on].append(time.perf_counter() - t0)
        print(f"guard {'on ' if on else 'off'}: {len(tasks)} episodes in {seconds[on][-1]:.1f} s", flush=True)
    print("mean: " + ", ".join(f"guard {'on' if on else 'off'} {sum(v) / len(v):.1f} s" for on, v in seconds.items()))


async def main(args: Args) -> None:
    names = env.load_tasks(TASKS)
    tasks = [dataclasses.replace(t, seed=args.seed_start + i, max_steps=args.max_steps)
             for i in range(args.pages) for t in names]
    kwargs: dict[str, Any] = {"action_timeout_ms": args.action_timeout_ms} if args.action_timeout_ms else {}
    if args.hang_cpu_s:
        kwargs["hang_cpu_s"] = args.hang_cpu_s
    if args.in_place:
        kwargs["families"] = [env.MiniWoBFamily(in_place=True)]
    runs = {}
    async with env.BrowserPool() as pool:
        if args.guard_cost:
            return await guard_cost(pool, [t for t in tasks if t.seed < args.seed_start + args.guard_cost], kwargs)
        if args.hung:
            await hung_rows(pool, args, tasks, kwargs)
        if not args.verdicts:
            return
        for conc, busy in ((1, 0), (args.concurrency, args.busy)):
            with busy_cores(busy):
                t0 = time.perf_counter()
                runs[conc] = await play_pages(pool, tasks, conc, env_kwargs=kwargs)
                minutes = (time.perf_counter() - t0) / 60
            slow = sorted(((sec, task_id.removeprefix("miniwob/"), seed, ep["steps"][k][1])
                           for (task_id, seed), ep in runs[conc].items() for k, sec in enumerate(ep["seconds"])),
                          reverse=True)[:5]
            print(f"c{conc} with {busy} busy processes: {len(tasks)} episodes in {minutes * 60:.0f} s, "
                  f"{len(tasks) / minutes:.0f} episodes a minute; slowest steps: "
                  + "; ".join(f"{sec:.1f} s {task} {seed} {action}" for sec, task, seed, action in slow), flush=True)
    (quiet, loaded) = runs.values()
    diffs = {page: d for page in quiet if (d := difference(quiet[page], loaded[page]))}
    for (task_id, seed), d in sorted(diffs.items()):
        print(f"  {task_id} seed {seed}: {d}")
    rewards = [ep.get("reward", 0) for ep in quiet.values()]
    print(f"{len(diffs)} of {len(tasks)} episodes differ between c1 and c{args.concurrency} "
          f"(action_timeout_ms {args.action_timeout_ms or 'default'}, in_place {args.in_place}; "
          f"quiet run: {sum(r > 0 for r in rewards)} successes, "
          f"{sum(len(ep.get('steps', [])) for ep in quiet.values())} steps; scripts stopped by the hang guard: "
          f"{sum(ep.get('stops', 0) for ep in quiet.values())} at c1, "
          f"{sum(ep.get('stops', 0) for ep in loaded.values())} at c{args.concurrency})")


def parse_args() -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        if f.type == "bool":
            p.add_argument(f"--{f.name.replace('_', '-')}", action=argparse.BooleanOptionalAction, default=f.default)
        else:
            p.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    return Args(**vars(p.parse_args()))


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
