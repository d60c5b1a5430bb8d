"""``python -m env``: the environment from the command line.

    python -m env [TASK [SEED]]       a task by hand (default miniwob:click-button 0): prints the observation,
                                      then runs actions read from stdin until the episode ends
    python -m env login [--sites S,...] [--out DIR] [--account SITE=USER:PASSWORD]
                                      sign into WebArena's sites and write their storage-state files
    python -m env suite [--port 8090] [--configs FILE ...] [--shared SEED]
                                      serve the site suite (or write its WebArena-format configs)
"""
from __future__ import annotations

import asyncio
import dataclasses
import sys

from . import sitesuite, webarena_helpers
from .browser import BrowserPool
from .tasks import load_tasks


async def run_by_hand(spec: str, seed: int = 0, headless: bool = True) -> None:
    """Open the first task of ``spec``, print the observation, then read actions from stdin until done."""
    task = dataclasses.replace(load_tasks(spec)[0], seed=seed)
    async with BrowserPool(headless=headless) as pool:
        env = await pool.new_env()
        obs = await env.reset(task)
        print(f"intent: {obs.intent}\nurl: {obs.url}\n{obs.text}\n")
        loop = asyncio.get_running_loop()
        while True:
            print("action> ", end="", flush=True)
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            res = await env.step(line)
            print(f"{res.info}\n{res.obs.text}\n")
            if res.done:
                print(f"done: reward={res.reward} reason={res.info['done_reason']}")
                break


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if argv[:1] == ["login"]:
        webarena_helpers._login_cli(argv[1:])
        return 0
    if argv[:1] == ["suite"]:
        return sitesuite.main(argv[1:])
    asyncio.run(run_by_hand(argv[0] if argv else "miniwob:click-button", int(argv[1]) if len(argv) > 1 else 0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
