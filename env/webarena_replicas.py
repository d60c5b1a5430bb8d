"""Site replicas for the WebArena family (env/webarena.py): trajectories that change a site never share it.
A site given as replicas with a reset (WA_GITLAB="url1 url2 ...", WA_GITLAB_RESET=...) is leased per trajectory
(SitePool): a task that may change it (program_html, require_reset) holds a replica alone from its reset to its
score, readers share clean ones, and a replica is reset after each writer (docs/webarena.md, "Concurrent
trajectories"). WebArenaFamily.lease (webarena.py) leases through ``site_pool()``, this process's pool from the
environment.

It imports tasks.py, sandbox.py and webarena_helpers.py (site URLs, logins), never env or webarena.py; its public
names are also ``env.<name>``: ``SitePool``, ``site_pool``.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import shlex
import shutil
import signal
import time
import urllib.error
import urllib.request
from typing import Any, AsyncIterator

from .sandbox import host_entry
from .tasks import EpisodeCrash, Task
from .webarena_helpers import _leased_urls, _named_sites, site_urls, webarena_login

_wa_log = logging.getLogger("env.webarena")


# ---- site replicas: trajectories that change a site never share it ----
# M-GRPO runs the G trajectories of a task at once. On one shared site, trajectory 1 creates the repository and
# the program_html check of trajectory 2, which did nothing, then reads it and scores 1: the group's advantages
# are computed from corrupted rewards. A site given as replicas with a reset (WA_GITLAB="http://h:8023
# http://h:8024", WA_GITLAB_RESET="docker restart gitlab-{index}") is leased per trajectory instead: an episode
# that can change the site holds one replica to itself from its reset until it is scored, the replica is reset
# before anyone uses it again, and episodes that only read share the clean replicas nobody is changing.

@dataclasses.dataclass(eq=False)
class Replica:
    """One copy of a site: its URL and who holds it now."""
    site: str
    index: int
    url: str
    readers: int = 0
    writer: bool = False
    clean: bool = False        # reset since its last writer; none is at start (a run that died may have left state)
    resetting: bool = False
    broken: bool = False       # its reset failed every try: never leased again
    resets: int = 0


def rehost(task: Task, moves: dict[str, str]) -> Task:
    """``task`` with every URL at origin ``old`` moved to ``new`` (``moves = {old: new}``, origins such as
    "http://h:8023"): its start tabs, the URLs of its eval (reference_url, program_html) and its allowed hosts."""
    moves = {old: new for old, new in moves.items() if old != new}
    if not moves:
        return task
    pattern = re.compile("|".join(re.escape(o) for o in sorted(moves, key=len, reverse=True)) + r"(?=[/?#\s|'\"),]|$)")

    def sub(obj: Any) -> Any:
        if isinstance(obj, str):
            return pattern.sub(lambda m: moves[m.group(0)], obj)
        if isinstance(obj, list):
            return [sub(v) for v in obj]
        if isinstance(obj, dict):
            return {k: sub(v) for k, v in obj.items()}
        return obj

    hosts = {host_entry(old): host_entry(new) for old, new in moves.items()}
    return dataclasses.replace(task, start_url=sub(task.start_url), eval=sub(task.eval),
                               allowed_hosts=tuple(sorted({hosts.get(h, h) for h in task.allowed_hosts})))


async def run_reset(spec: str, replica: Replica) -> None:
    """Reset ``replica`` as ``spec`` says: an http(s) URL is POSTed to (any 2xx is done), anything else is a
    command run without a shell (``shlex.split``; exit status 0 is done). ``{url}``, ``{index}`` and ``{site}``
    are filled in, e.g. "docker restart gitlab-{index}" or "{url}/__reset". Raises RuntimeError saying why."""
    for key, value in (("{url}", replica.url), ("{index}", str(replica.index)), ("{site}", replica.site)):
        spec = spec.replace(key, value)
    if re.match(r"https?://", spec):
        def post() -> int:
            req = urllib.request.Request(spec, data=b"", method="POST")
            with urllib.request.urlopen(req, timeout=600) as resp:      # noqa: S310 (the user's own URL)
                return resp.status
        try:
            status = await asyncio.to_thread(post)
        except (urllib.error.URLError, OSError) as e:
            raise RuntimeError(f"POST {spec}: {e}") from None
        if not 200 <= status < 300:
            raise RuntimeError(f"POST {spec}: HTTP {status}")
        return
    argv = shlex.split(spec)
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        raise RuntimeError(f"{spec}: {e}") from None
    try:
        out = (await proc.communicate())[0]
    except asyncio.CancelledError:            # a timeout: the command and what it started (docker run ...)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    if proc.returncode != 0:
        tail = out.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise RuntimeError(f"{spec}: exit status {proc.returncode} {tail[0]}".rstrip())


class SitePool:
    """The replicas of the sites a run uses and their leases (see the section's comment), e.g.

    >>> pool = SitePool({"gitlab": ["http://h:8023", "http://h:8024"]},             # doctest: +SKIP
    ...                 {"gitlab": "docker restart gitlab-{index}"})
    >>> async with pool.lease(task, writes=True) as mine:   # mine: the task with its URLs on one replica
    ...     ...                                              # reset, act, score; the replica is reset after

    ``writes``: the episode may change the site (``WebArenaFamily.changes_state``): it waits for a clean
    replica nobody holds and holds it alone; a reader waits for a clean replica no writer holds and shares it
    (readers gather on the replicas already being read, leaving the others to writers). The wait is counted
    (``stats``); a replica is reset in the background as soon as its writer lets go (the lease ends however
    the episode ends: exit, crash, timeout, cancellation), and every replica once before its first lease.
    A reset that fails ``reset_tries`` times takes its replica out of the pool; with none left, a lease raises
    ``EpisodeCrash`` (the episode ends with a recorded reason, the run goes on). Tasks whose sites have no
    replicas here run as they are. One pool per process and event loop (``site_pool``)."""

    def __init__(self, urls: dict[str, list[str]], resets: dict[str, str], *, home: dict[str, str] | None = None,
                 first_index: int = 0, index_step: int = 1, exclusive: bool = False, reset_tries: int = 3,
                 retry_delay_s: float = 5.0, reset_timeout_s: float = 900.0) -> None:
        missing = sorted(site for site in urls if not resets.get(site))
        if missing:
            raise ValueError(f"site replicas need a reset: set WA_{missing[0].upper()}_RESET to a command or a URL "
                             "to POST ({url}, {index} filled in)")
        for site, spec in resets.items():
            try:
                shlex.split(spec)
            except ValueError as e:
                raise ValueError(f"WA_{site.upper()}_RESET: {e}: {spec!r}") from None
        # a replica's index is its place in WA_<SITE>'s full list, the same on every rank ({index} in resets)
        self.replicas = {site: [Replica(site, first_index + k * index_step, url) for k, url in enumerate(us)]
                         for site, us in urls.items() if us}
        self.resets = dict(resets)
        self.exclusive = exclusive
        # where the tasks were loaded (the first URL of WA_<SITE>, on every rank): what a lease moves them from
        self.home = {site: (home or {}).get(site) or reps[0].url for site, reps in self.replicas.items()}
        self.reset_tries, self.retry_delay_s, self.reset_timeout_s = reset_tries, retry_delay_s, reset_timeout_s
        self.stats = {"leases": 0, "wait_s": 0.0, "resets": 0, "reset_failures": 0}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future] = []
        self._tasks: set[asyncio.Task] = set()
        self._logins: dict[tuple, asyncio.Future] = {}    # (file, replicas and their resets) -> its login
        self._login_dirs: dict[tuple, str] = {}           # (file, replicas) -> the newest login's folder

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "SitePool | None":
        """The pool the environment describes, or None: a site takes part when ``WA_<SITE>_RESET`` is set, its
        replicas listed in ``WA_<SITE>`` (space- or comma-separated). Ranks of a launcher (RANK, WORLD_SIZE)
        take every WORLD_SIZE-th replica from their rank on, so no two processes lease the same one (a replica's
        ``{index}`` is its place in the full list). ``WA_LEASE=exclusive``: every episode leases its replicas
        alone and has them reset after it, readers too (an exploring agent may change a site on any task)."""
        environ = dict(os.environ if environ is None else environ)
        rank, world = int(environ.get("RANK", "0") or 0), int(environ.get("WORLD_SIZE", "1") or 1)
        urls, resets, home = {}, {}, {}
        for var, value in sorted(environ.items()):
            if not (var.startswith("WA_") and var.endswith("_RESET") and value.strip()):
                continue
            site = var[3:-6].lower()
            listed = site_urls(environ.get(f"WA_{site.upper()}", ""))
            if len(listed) < world:
                raise ValueError(f"{var} is set but WA_{site.upper()} lists {len(listed)} replica(s) for "
                                 f"{world} rank(s): every rank needs one of its own")
            urls[site], resets[site], home[site] = listed[rank::world], value.strip(), listed[0]
        for var, value in sorted(environ.items()):
            n = len(site_urls(value))
            if (var.startswith("WA_") and var != "WA_EXTRA_ORIGINS" and not var.endswith("_RESET") and n > 1
                    and var[3:].lower() not in resets):
                raise ValueError(f"{var} lists {n} replicas but {var}_RESET is not set: a replica is reset after "
                                 "each episode that may have changed it (a command, or a URL to POST)")
        exclusive = environ.get("WA_LEASE", "by-task").strip() == "exclusive"
        return (cls(urls, resets, home=home, first_index=rank, index_step=world, exclusive=exclusive)
                if urls else None)

    def sites_of(self, task: Task) -> list[str]:
        return [site for site in task.site.split("+") if site in self.replicas]

    def take_stats(self) -> dict[str, float]:
        """The counts since the last call (leases, seconds waited for them, resets, failed resets), zeroed."""
        out, self.stats = self.stats, {k: 0 if k != "wait_s" else 0.0 for k in self.stats}
        return out

    def step_stats(self) -> dict[str, float]:
        """``take_stats`` as an RL step's metrics: ``rollout/lease_wait_s`` (the mean wait for a lease) and
        ``rollout/replica_resets``."""
        taken = self.take_stats()
        return {"rollout/lease_wait_s": taken["wait_s"] / max(taken["leases"], 1),
                "rollout/replica_resets": float(taken["resets"])}

    @contextlib.asynccontextmanager
    async def lease(self, task: Task, writes: bool) -> AsyncIterator[Task]:
        writes = writes or self.exclusive
        sites = self.sites_of(task)
        if not sites:
            yield task
            return
        self._bind()
        start = time.monotonic()
        while (picked := self._pick(sites, writes)) is None:      # check and take with no await between
            for site in sites:
                if all(r.broken for r in self.replicas[site]):
                    raise EpisodeCrash(f"site {site}: every replica failed its reset ({self.resets[site]})")
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        for r in picked:
            r.writer, r.readers = r.writer or writes, r.readers + (not writes)
        self.stats["leases"] += 1
        self.stats["wait_s"] += time.monotonic() - start
        token = _leased_urls.set({**_leased_urls.get(), **{r.site: r.url for r in picked}})
        try:
            leased = rehost(task, {self.home[r.site]: r.url for r in picked})
            if task.storage_state and _named_sites(task.storage_state):
                leased = dataclasses.replace(leased, storage_state=await self._login(task.storage_state, picked))
            yield leased
        finally:
            _leased_urls.reset(token)
            for r in picked:
                if writes:
                    r.writer, r.clean = False, False
                else:
                    r.readers -= 1
            self._start_resets()
            self._notify()

    async def _login(self, path: str, picked: list[Replica]) -> str:
        """A storage-state file like ``path`` (named as ``python -m env login`` names them) signed into the
        leased replicas since their last reset (a reset drops a site's sessions; WebArena's harness signs in
        again before each task too): ``<its folder>/replicas/<site><index>-<resets>/<its name>``, written once
        by ``webarena_login`` with WebArena's default accounts and shared by the leases of those replicas."""
        sites = _named_sites(path)
        mine = [r for r in picked if r.site in sites]
        if not mine:
            return path
        name, where = os.path.basename(path), tuple((r.site, r.index) for r in mine)
        key = (name, where, tuple(r.resets for r in mine))
        out = os.path.join(os.path.dirname(path), "replicas", "_".join(f"{r.site}{r.index}-{r.resets}" for r in mine))
        login = self._logins.get(key)
        if login is None or (login.done() and (login.cancelled() or login.exception() is not None)):
            login = self._logins[key] = asyncio.ensure_future(webarena_login(sites, out))   # in this lease's URLs
            old = self._login_dirs.get((name, where))
            self._login_dirs[(name, where)] = out
            if old and old != out:      # the same replicas before their reset: nobody holds them now
                self._logins = {k: v for k, v in self._logins.items() if k[:2] != (name, where) or k == key}
                shutil.rmtree(old, ignore_errors=True)
        try:
            await asyncio.shield(login)
        except Exception as e:            # a site still starting, no browser, a failed sign-in: this episode only
            raise EpisodeCrash(f"signing into {', '.join(f'{r.site} replica {r.index}' for r in mine)}: {e}") from None
        return os.path.join(out, name)

    def _pick(self, sites: list[str], writes: bool) -> list[Replica] | None:
        picked = []
        for site in sites:
            free = [r for r in self.replicas[site] if r.clean and not r.broken and not r.writer
                    and not (writes and r.readers)]
            if not free:
                return None
            picked.append(min(free, key=lambda r: (-r.readers, r.index)))
        return picked

    def _bind(self) -> None:
        """Follow the running event loop (a script may run several): what the last one left in flight is gone."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._waiters, self._tasks, self._logins = loop, [], set(), {}
            for r in (r for reps in self.replicas.values() for r in reps):
                r.resetting = False
        self._start_resets()

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _start_resets(self) -> None:
        for r in (r for reps in self.replicas.values() for r in reps):
            if not (r.clean or r.broken or r.resetting or r.writer or r.readers):
                r.resetting = True
                task = asyncio.get_running_loop().create_task(self._reset(r))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _reset(self, r: Replica) -> None:
        try:
            for attempt in range(1, self.reset_tries + 1):
                try:
                    await asyncio.wait_for(run_reset(self.resets[r.site], r), self.reset_timeout_s)
                except Exception as e:        # a failed command or POST, a timeout, a malformed URL: try again
                    self.stats["reset_failures"] += 1
                    _wa_log.warning("reset of %s replica %d (%s) failed, try %d of %d: %s", r.site, r.index, r.url,
                                    attempt, self.reset_tries, str(e) or "timed out")
                    if attempt < self.reset_tries:
                        await asyncio.sleep(self.retry_delay_s)
                    continue
                r.clean, r.resets = True, r.resets + 1
                self.stats["resets"] += 1
                return
            r.broken = True
            _wa_log.error("%s replica %d (%s) is left out of the pool: its reset failed %d times", r.site, r.index,
                          r.url, self.reset_tries)
        finally:
            r.resetting = False
            self._notify()


_site_pool: dict[str, Any] = {"key": None, "pool": None}


def site_pool() -> SitePool | None:
    """This process's SitePool, from the environment (``SitePool.from_env``), built again when the variables
    change; None when no site has replicas."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("WA_") or k in ("RANK", "WORLD_SIZE")))
    if _site_pool["key"] != key:
        _site_pool.update(key=key, pool=SitePool.from_env())
    return _site_pool["pool"]
