"""tests/warm.py, the warm interpreter the suite's script runs are forked from: a run is the script as a fresh
`python` runs it (argv, cwd, environment, __main__, sys.path, stdio, signals, exit status, atexit and threads
at exit, fresh random seeds), a spawn-multiprocessing child of it works, an import-time variable that differs
from the zygote's makes it a real fresh process, and tests/warm_python relays exit status and signals."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import training   # (imports policy, which sets HF_HUB_OFFLINE as every test module's worker has it)
import warm

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not warm.enabled(), reason="WEBAGENT_WARM=0: every script run starts fresh")

_REPORT = textwrap.dedent(r"""
    import atexit, json, os, random, signal, sys, threading, time
    import numpy, torch

    def later():          # a non-daemon thread: the interpreter waits for it at exit
        time.sleep(0.3)
        print("thread done", flush=True)

    kept = open(os.environ["OUT_FILE"], "w")    # never closed nor flushed: the exit flushes it
    kept.write("flushed at exit")
    atexit.register(lambda: print("atexit ran", file=sys.stderr))
    import __main__
    print(json.dumps({
        "argv": sys.argv, "cwd": os.getcwd(), "x": os.environ.get("WARM_X"), "name": __name__,
        "file": __main__.__file__, "main_is_this": __main__.__dict__ is globals(), "path0": sys.path[0],
        "orig_argv_tail": sys.orig_argv[1:], "executable": sys.executable,
        "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "sigpipe": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN,
        "sighup_ignored": signal.getsignal(signal.SIGHUP) == signal.SIG_IGN,
        "line_buffering": sys.stdout.line_buffering, "write_through": sys.stdout.write_through,
        "stderr_line_buffering": sys.stderr.line_buffering,
        "random": [random.random(), float(numpy.random.rand()), float(torch.rand(1))],
        "torch_threads": torch.get_num_threads(),
    }))
    print("to stderr", file=sys.stderr)
    threading.Thread(target=later).start()
    sys.exit(int(sys.argv[1]))
""")


def _script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _report(proc) -> dict:
    return json.loads(proc.stdout.splitlines()[0])


def test_a_run_is_the_script_as_a_fresh_python_runs_it(tmp_path):
    script = _script(tmp_path, "report.py", _REPORT)
    work = tmp_path / "work"
    work.mkdir()
    runs = {}
    for how in ("warm", "warm2", "fresh"):
        environ = dict(os.environ, WARM_X=how, OUT_FILE=str(tmp_path / f"{how}.txt"))
        environ.pop("PYTHONUNBUFFERED", None)
        call = warm.run if how.startswith("warm") else subprocess.run
        runs[how] = call([sys.executable, os.path.relpath(script, work), "7"], cwd=work, env=environ,
                         capture_output=True, text=True, timeout=120)
        assert runs[how].returncode == 7, runs[how].stderr
        assert (tmp_path / f"{how}.txt").read_text() == "flushed at exit"
        assert runs[how].stdout.splitlines()[1:] == ["thread done"]
        assert runs[how].stderr.splitlines() == ["to stderr", "atexit ran"]
    assert runs["warm"].warm and runs["warm2"].warm
    got = {how: _report(proc) for how, proc in runs.items()}
    for how in ("warm", "warm2"):
        assert got[how]["x"] == how
        assert {k: v for k, v in got[how].items() if k not in ("x", "random")} == \
               {k: v for k, v in got["fresh"].items() if k not in ("x", "random")}
    assert got["fresh"]["argv"] == ["../report.py", "7"] and got["fresh"]["name"] == "__main__"
    assert got["fresh"]["main_is_this"] and got["fresh"]["cwd"] == str(work) and not got["fresh"]["line_buffering"]
    # each run draws its own seeds (Python's, numpy's, torch's), as fresh interpreters do: none shared with the zygote
    draws = [tuple(g["random"]) for g in got.values()]
    assert all(len(set(column)) == 3 for column in zip(*draws)), draws


def test_stdio_buffering_signals_and_stdin_follow_the_request(tmp_path):
    script = _script(tmp_path, "report.py", _REPORT)
    environ = dict(os.environ, PYTHONUNBUFFERED="1", OUT_FILE=str(tmp_path / "o.txt"))
    proc = warm.run([sys.executable, str(script), "0"], env=environ, capture_output=True, text=True, timeout=120)
    assert proc.warm and proc.returncode == 0
    assert _report(proc)["write_through"] and not _report(proc)["stderr_line_buffering"]
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)       # ignored here: ignored in a child, as subprocess's
    try:
        proc = warm.run([sys.executable, str(script), "0"], env=environ, capture_output=True, text=True, timeout=120)
    finally:
        signal.signal(signal.SIGHUP, old)
    assert proc.warm and _report(proc)["sighup_ignored"]
    read = _script(tmp_path, "read.py", "import sys; print(repr(sys.stdin.read()))")
    proc = warm.run([sys.executable, str(read)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert proc.warm and proc.stdout == "''\n"


def test_exit_statuses_and_tracebacks_are_a_fresh_interpreters(tmp_path):
    cases = {
        "raise ValueError('boom')": (1, "ValueError: boom"),
        "import sys; sys.exit('a message')": (1, "a message"),
        "import sys; sys.exit(None)": (0, ""),
        "import sys; sys.exit(300)": (300 & 0xFF, ""),
        "raise KeyboardInterrupt": (-signal.SIGINT, "KeyboardInterrupt"),
    }
    for k, (code, (status, err)) in enumerate(cases.items()):
        script = _script(tmp_path, f"s{k}.py", f"print('out')\n{code}\n")
        runs = [warm.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60),
                subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)]
        assert runs[0].warm
        for proc in runs:
            assert (proc.returncode, proc.stdout) == (status, "out\n"), (code, proc.stderr)
            assert err in proc.stderr
        assert runs[0].stderr == runs[1].stderr, code       # the same traceback: from the script, no warm.py frame
    proc = warm.run([sys.executable, "-c", "import sys; print(sys.argv, __name__); sys.exit(4)", "a"],
                    capture_output=True, text=True)
    assert proc.warm and (proc.returncode, proc.stdout) == (4, "['-c', 'a'] __main__\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("import sys; print(__name__, sys.argv[1:], sys.path[0])")
    proc = warm.run([sys.executable, "-m", "pkg.mod", "b"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.warm and proc.stdout == f"__main__ ['b'] {tmp_path}\n", proc.stderr


_SPAWN = textwrap.dedent("""
    import multiprocessing, os, sys

    def square(x):
        return x * x

    if __name__ == "__main__":
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            print(pool.map(square, [1, 2, 3]), os.getpid())
""")


def test_a_spawned_multiprocessing_child_of_a_run_works(tmp_path):
    """vLLM's engine starts so: the child re-imports the script by its path (__main__.__file__) as __mp_main__."""
    script = _script(tmp_path, "spawn.py", _SPAWN)
    proc = warm.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.warm and proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[1, 4, 9] ")


def test_an_import_time_variable_that_differs_runs_fresh(tmp_path):
    script = _script(tmp_path, "env.py", "import os; print(os.environ.get('OMP_NUM_THREADS'))")
    for name, value, warmed in (("OMP_NUM_THREADS", "1", False), ("HF_HOME", str(tmp_path), False),
                                ("TORCH_EXTENSIONS_DIR", str(tmp_path), True), ("WARM_ANYTHING", "1", True)):
        proc = warm.run([sys.executable, str(script)], env=dict(os.environ, **{name: value}), capture_output=True,
                        text=True, timeout=60)
        assert proc.returncode == 0 and proc.warm is warmed, name
    assert proc.stdout.split()[0] == str(os.environ.get("OMP_NUM_THREADS"))
    # DeepSpeed's and torch's op builds find their cache where the run's TORCH_EXTENSIONS_DIR says, read when used
    ext = _script(tmp_path, "ext.py", "from torch.utils import cpp_extension; "
                                      "print(cpp_extension._get_build_directory('probe', False))")
    proc = warm.run([sys.executable, str(ext)], env=dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path / "ext")),
                    capture_output=True, text=True, timeout=60)
    assert proc.warm and proc.stdout == f"{tmp_path / 'ext' / 'probe'}\n", proc.stderr
    assert not warm.run([sys.executable, "-u", str(script)], capture_output=True).warm     # a flag: fresh too
    assert not warm.run(["bash", "-c", "true"]).warm


def test_the_suites_script_runs_go_warm(tmp_path):
    """run_script's runs inherit what this worker's imports set in its environment (policy.py: HF_HUB_OFFLINE,
    TRANSFORMERS_OFFLINE; DeepSpeed: PYTORCH_NVML_BASED_CUDA_CHECK): the zygote, started with the suite's
    environment after collection and knowing what its own imports set, forks them rather than refusing them (which
    would leave the whole suite on fresh processes, silently)."""
    import deepspeed  # noqa: F401
    script = _script(tmp_path, "work.py", "import torch; print(float(torch.ones(1000, 1000).sum()))")
    before = warm.CPU[0]
    assert training.run_script(str(script)).startswith("1000000.0")
    assert warm.CPU[0] > before


_CHANGED = textwrap.dedent("""
    import os, sys
    os.environ.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    sys.path.insert(0, sys.argv[1])
    import warm
    script = [sys.executable, "-c", "import os; print(os.environ.get('TORCHINDUCTOR_COMPILE_THREADS'))"]
    first = warm.run(script, capture_output=True, text=True)
    zygote = warm._Zygote.proc.pid
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"          # as `import vllm` does in a worker
    second = warm.run(script, capture_output=True, text=True)
    renewed = warm._Zygote.proc.pid
    one_off = warm.run(script, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True)
    print(first.warm, first.stdout.strip(), second.warm, second.stdout.strip(), renewed != zygote, one_off.warm,
          one_off.stdout.strip(), warm._Zygote.proc.pid == renewed)
""")


def test_a_worker_whose_environment_changed_gets_a_new_zygote():
    """An import in the worker that sets an import-time variable (vLLM's) changes what every process it starts
    inherits: the next run starts a new zygote with it rather than leaving the rest of the suite to fresh
    processes; a one-off environment runs fresh and keeps the zygote. (A zygote importing nothing, for speed.)"""
    proc = subprocess.run([sys.executable, "-c", _CHANGED, str(Path(__file__).parent)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, WEBAGENT_WARM_PRELOAD=""))
    assert proc.stdout.split() == ["True", "None", "True", "1", "True", "False", "1", "True"], proc.stderr


def test_a_timeout_kills_the_run(tmp_path):
    script = _script(tmp_path, "sleep.py", "import os, time; print(os.getpid(), flush=True); time.sleep(600)")
    with pytest.raises(subprocess.TimeoutExpired) as err:
        warm.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1)
    pid = int(err.value.stdout.split()[0])
    deadline = time.time() + 10
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}")


_SIGNALLED = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: (print("got SIGTERM", flush=True), sys.exit(5)))
    print("ready", os.getpid(), flush=True)
    time.sleep(60)
""")


def test_warm_python_relays_the_exit_status_and_forwards_signals(tmp_path):
    """The executable client the smoke scripts' $PY points at: a shell's `$PY script` runs warm, the script's
    output goes where the shell's goes, its status comes back, SIGTERM reaches it, and a SIGKILLed client takes
    its run along."""
    environ = dict(os.environ, **warm.python_environ())
    python = environ["WEBAGENT_PYTHON"]
    script = _script(tmp_path, "exit.py", "import os, sys; print('pid', os.getppid() != int(sys.argv[1])); "
                                          "sys.exit(3)")
    proc = subprocess.run(["bash", "-c", f'"$WEBAGENT_PYTHON" {script} $$; echo "status $?"'], env=environ,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout == "pid True\nstatus 3\n", proc.stderr       # forked from the zygote, not the shell
    log = tmp_path / "log"
    for sig, status in ((signal.SIGTERM, 5), (signal.SIGKILL, -signal.SIGKILL)):
        with open(log, "w") as sink:
            client = subprocess.Popen([python, str(_script(tmp_path, "sig.py", _SIGNALLED))], env=environ,
                                      stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while "ready" not in log.read_text():
            assert client.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.05)
        pid = int(log.read_text().split()[1])
        client.send_signal(sig)
        assert client.wait(timeout=30) == status
        if sig == signal.SIGTERM:
            assert log.read_text() == f"ready {pid}\ngot SIGTERM\n"
        deadline = time.time() + 10
        while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{pid}")               # the run too, SIGKILLed by its monitor
    proc = subprocess.run([python, "-c", "import os; print(os.environ['OMP_NUM_THREADS'])"], capture_output=True,
                          text=True, env=dict(environ, OMP_NUM_THREADS="3"), timeout=60)
    assert proc.stdout == "3\n"                                     # refused by the zygote: exec'd fresh
