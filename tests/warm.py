"""A warm interpreter for the suite's script runs: every `python SCRIPT` a test starts for what the script does
paid ~4-7 CPU s of `import torch` and transformers before its first line; here each pytest worker imports them
once, in a zygote, and a run is a process forked from it that then runs the script as a fresh `python` would.

    proc = warm.run([sys.executable, "train_bc.py", ...], cwd=ROOT, env=environ, capture_output=True, text=True)

`run` is `subprocess.run` for commands `python SCRIPT|-m MODULE|-c CODE ...`; anything else, and any run whose
environment differs from the zygote's in a variable read at import (IMPORT_TIME), starts a real fresh process
(`proc.warm` says which). `tests/warm_python` is the same client as an executable, for shell scripts' `$PY`.
WEBAGENT_WARM=0 turns it off. The zygote (`python tests/warm.py serve SOCKET`) imports, runs no torch op (no
thread pool exists when it forks) and imports no project module; per request it forks a monitor, which forks the
run and reports its exit status. The run takes the request's stdin/stdout/stderr (file descriptors passed over
the socket), cwd, environment, argv, signal dispositions (what a fresh child inherits: ignored signals stay
ignored, SIGINT raises KeyboardInterrupt otherwise), sys.path[0], fresh random seeds and a fresh `__main__`; it ends as
the interpreter ends (threads joined, atexit handlers, its own modules torn down, stdio flushed), then os._exit
where a fresh interpreter would tear down the zygote's imports one by one (~1 CPU s, nothing seen outside). What
it shares with the zygote: the modules imported there (their import-time output is not printed again) and the
string hash seed. docs/testing.md,
"How it runs", says which tests go through it and which start fresh processes.
This file imports only the standard library: the executable client loads it with `python -S`."""
from __future__ import annotations

import atexit
import json
import locale
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile

# Variables read when torch, transformers, numpy, DeepSpeed or the interpreter start (thread pools, caches,
# devices, locale, paths): a run whose environment differs from the zygote's in one of them runs fresh.
IMPORT_TIME = re.compile(r"(OMP|GOMP|KMP|MKL|OPENBLAS|BLIS|NUMEXPR|HF|HUGGINGFACE|TRANSFORMERS|TOKENIZERS|PYTORCH|"
                         r"CUDA|NVIDIA|DS|DEEPSPEED|ACCELERATE|TRITON|XDG|LC|LD|MALLOC|USE)_.*|TORCH.*|PYTHON.*|"
                         r"LANG|LANGUAGE|HOME|PATH|TMPDIR|TEMP|TMP")
RUNTIME = {"TORCH_EXTENSIONS_DIR",   # read when an op is built (torch.utils.cpp_extension)
           "PYTHONUNBUFFERED"}       # applied by the run to its own stdio
PRELOAD = ("numpy", "torch", "transformers", "safetensors.torch", "deepspeed")   # WEBAGENT_WARM_PRELOAD="a,b": others
UNINHERITED = {signal.SIGPIPE, signal.SIGXFSZ}   # ignored by every Python, reset by subprocess for its children


CPU = [0.0]   # CPU seconds (user + system) of the runs this process started and saw end (RUSAGE_CHILDREN's part)


# The environment the zygote starts with: this process's when it imported this module, or when tests/conftest.py
# sets it again once every test module is imported (policy.py sets HF_HUB_OFFLINE on import), not one a test has
# changed since.
ENVIRON = dict(os.environ)
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_python")


def import_time(environ) -> dict[str, str]:
    return {k: v for k, v in environ.items() if IMPORT_TIME.fullmatch(k) and k not in RUNTIME}


def enabled() -> bool:
    return os.environ.get("WEBAGENT_WARM", "1") != "0"


# ---------------------------------------------------------------- the client

class Run:
    """A run in a process forked from the zygote (pid, wait, send_signal, returncode, as Popen's)."""

    def __init__(self, conn: socket.socket, pid: int):
        self.conn, self.pid, self.returncode, self.cpu = conn, pid, None, 0.0

    def _read(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        if not select.select([self.conn], [], [], timeout)[0]:
            return
        try:
            msg = self.conn.recv(64)
        except OSError:
            msg = b""
        if not msg.startswith(b"exit "):                # the monitor gone without a word: report it as killed
            self.returncode = -signal.SIGKILL
        else:
            status, cpu = msg.split()[1:]
            self.returncode, self.cpu = os.waitstatus_to_exitcode(int(status)), float(cpu)
            CPU[0] += self.cpu
        self.conn.close()

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                self.conn.send(b"kill %d" % sig)
            except OSError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Zygote:
    """This process's zygote, started on first use."""
    proc: subprocess.Popen | None = None
    socket: str | None = None
    log: str | None = None
    failed = stopping = False


def socket_path() -> str | None:
    """The socket of this process's zygote, started if need be (None if it cannot start)."""
    z = _Zygote
    if z.proc is not None and z.proc.poll() is None:
        return z.socket
    if z.failed:
        return None
    folder = tempfile.mkdtemp(prefix="warm-")
    z.socket, z.log = os.path.join(folder, "socket"), os.path.join(folder, "zygote.log")
    with open(z.log, "w") as log:
        z.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", z.socket], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=log, cwd=folder,
                                  env=dict(ENVIRON, PYTHONUNBUFFERED="1"))   # (each run sets its own)
    ready = z.proc.stdout.readline()
    z.proc.stdout.close()
    if ready != b"ready\n":
        z.proc.wait()
        z.failed = True
        print(f"tests/warm.py: the zygote did not start; running fresh processes:\n{open(z.log).read()[-2000:]}",
              file=sys.stderr)
        return None
    if not z.stopping:
        z.stopping = True
        atexit.register(_stop_zygote)
    return z.socket


def python_environ() -> dict[str, str]:
    """The variables that make a shell script's `$WEBAGENT_PYTHON` (scripts/demo_common.sh's PY) tests/warm_python,
    through this process's zygote; none where it is off."""
    path = socket_path() if enabled() else None
    if path is None:
        return {}
    return {"WEBAGENT_PYTHON": CLIENT, "WEBAGENT_WARM_SOCKET": path, "WEBAGENT_WARM_PYTHON": sys.executable}


def _stop_zygote() -> None:
    import shutil
    if _Zygote.proc is not None and _Zygote.proc.poll() is None:
        _Zygote.proc.stdin.close()                       # its end of the pipe: it exits
        try:
            _Zygote.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _Zygote.proc.kill()
            _Zygote.proc.wait()
    if _Zygote.socket is not None:
        shutil.rmtree(os.path.dirname(_Zygote.socket), ignore_errors=True)


def _python_argv(cmd, interpreter: str) -> list[str] | None:
    """The arguments after `python` when ``cmd`` runs ``interpreter`` in a form the zygote runs, else None."""
    if isinstance(cmd, (str, bytes)):
        return None
    cmd = [os.fspath(c) for c in cmd]
    if not cmd or os.path.realpath(cmd[0]) != os.path.realpath(interpreter) or len(cmd) < 2:
        return None
    if cmd[1] in ("-m", "-c"):
        return cmd[1:] if len(cmd) >= 3 else None
    return None if cmd[1].startswith("-") else cmd[1:]


def _ignored_signals() -> list[int]:
    """The signals a child of this process starts with ignored (subprocess resets SIGPIPE and SIGXFSZ)."""
    out = []
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) == signal.SIG_IGN and sig not in UNINHERITED:
                out.append(int(sig))
        except (OSError, ValueError):
            pass
    return out


def start(cmd, *, cwd=None, env=None, stdin=None, stdout=None, stderr=None, socket_file: str | None = None,
          interpreter: str = sys.executable) -> Run | None:
    """Start ``cmd`` (`python ...`) forked from the zygote; None where it must run fresh (and does not start it).
    stdin/stdout/stderr: None (this process's), a file descriptor or an object with fileno(); stderr may be
    subprocess.STDOUT."""
    argv = _python_argv(cmd, interpreter)
    if argv is None or not enabled():
        return None
    path = socket_file or socket_path()
    if path is None:
        return None
    fds, opened = [], []
    for k, f in enumerate((stdin, stdout, stderr)):
        if f is None:
            f = k
        elif f == subprocess.STDOUT and k == 2:
            f = fds[1]
        elif f == subprocess.DEVNULL:
            f = os.open(os.devnull, os.O_RDWR)
            opened.append(f)
        elif not isinstance(f, int):
            f = f.fileno()
        fds.append(f)
    request = {"argv": argv, "cwd": os.path.abspath(os.fspath(cwd) if cwd is not None else os.getcwd()),
               "env": dict(os.environ if env is None else env), "ignored": _ignored_signals()}
    try:
        conn, answer = _ask(path, request, fds)
        if (answer.startswith(b"refused ") and socket_file is None
                and import_time(request["env"]) == import_time(os.environ)):
            # this process's own environment changed since its zygote started (an import set a variable: vLLM's
            # sets TORCHINDUCTOR_COMPILE_THREADS), and what it starts inherits it: a zygote with it
            global ENVIRON
            _stop_zygote()
            ENVIRON = dict(os.environ)
            path = socket_path()
            if path is not None:
                conn, answer = _ask(path, request, fds)
    finally:
        for f in opened:
            os.close(f)
    if not answer.startswith(b"pid "):                  # refused: an import-time variable differs
        conn.close()
        return None
    return Run(conn, int(answer.split()[1]))


def _ask(path: str, request: dict, fds: list[int]) -> tuple[socket.socket, bytes]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(path)
        socket.send_fds(conn, [json.dumps(request).encode()], fds)
        return conn, conn.recv(1 << 16)
    except OSError:
        return conn, b""


def popen(cmd, *, cwd=None, env=None, stdout=None, stderr=None) -> Run | subprocess.Popen:
    """A run started through the zygote where it can, else subprocess.Popen: both have pid, wait, poll,
    send_signal, kill and returncode."""
    return (start(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr)
            or subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr))


def popen(cmd, *, cwd=None, env=None, stdout=None, stderr=None) -> Run | subprocess.Popen:
    """A run started through the zygote where it can, else subprocess.Popen: both have pid, wait, poll,
    send_signal, kill and returncode."""
    return (start(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr)
            or subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr))


class Completed(subprocess.CompletedProcess):
    warm: bool


def run(cmd, *, cwd=None, env=None, capture_output=False, text=False, timeout=None, check=False, stdin=None,
        stdout=None, stderr=None, **kwargs) -> Completed:
    """subprocess.run through the zygote where it can, else subprocess.run itself; ``.warm`` says which."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    files = [tempfile.TemporaryFile() if f == subprocess.PIPE else None for f in (stdout, stderr)]
    proc = None
    if not kwargs and stdin in (None, subprocess.DEVNULL):
        proc = start(cmd, cwd=cwd, env=env, stdin=stdin, stdout=files[0] or stdout, stderr=files[1] or stderr)
    if proc is None:
        for f in files:
            if f is not None:
                f.close()
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=capture_output, text=text, timeout=timeout,
                              check=check, stdin=stdin, stdout=None if capture_output else stdout,
                              stderr=None if capture_output else stderr, **kwargs)
        done.__class__, done.warm = Completed, False
        return done
    try:
        proc.wait(timeout)
    except BaseException:              # a timeout or this process interrupted: as subprocess.run, kill the run
        proc.kill()
        proc.wait()
        if isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
            raise subprocess.TimeoutExpired(cmd, timeout, *(_read(f, text) for f in files)) from None
        raise
    done = Completed(cmd, proc.returncode, *(_read(f, text) for f in files))
    done.warm = True
    if check:
        done.check_returncode()
    return done


def _read(f, text: bool):
    if f is None:
        return None
    f.seek(0)
    data = f.read()
    f.close()
    if not text:
        return data
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def client_main(argv: list[str]) -> None:
    """tests/warm_python: `python ARGS` through the zygote at WEBAGENT_WARM_SOCKET, its exit status relayed and
    the signals it gets forwarded; the real interpreter (WEBAGENT_WARM_PYTHON) exec'd where it must run fresh."""
    real = os.environ.get("WEBAGENT_WARM_PYTHON") or sys.executable
    path = os.environ.get("WEBAGENT_WARM_SOCKET")
    proc = start([real, *argv], socket_file=path, interpreter=real) if path and os.path.exists(path) else None
    if proc is None:
        os.execv(real, [real, *argv])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, lambda s, _: proc.send_signal(s))
    code = proc.wait()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code & 0xFF)


# ---------------------------------------------------------------- the zygote

def serve(path: str):
    """The zygote's loop. Returns only in a forked run, with its request."""
    import gc
    import importlib
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # a Ctrl-C is for the runs; the zygote ends with its worker
    ready = os.dup(1)
    os.dup2(2, 1)                                    # what the imports print goes to the zygote's log
    base_path, environ = list(sys.path), import_time(os.environ)
    preload = os.environ.get("WEBAGENT_WARM_PRELOAD", ",".join(PRELOAD)).split(",")
    for name in filter(None, preload):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if "transformers" in preload:
        from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM, Qwen2ForCausalLM  # noqa: F401
    # what the imports set themselves (DeepSpeed: PYTORCH_NVML_BASED_CUDA_CHECK=1, read when used): a request may
    # carry it, as a process that imported them before starting the script does
    own = {k: v for k, v in import_time(os.environ).items() if environ.get(k) != v}
    gc.collect()
    gc.freeze()     # the imports' objects: left out of every collection in the runs (and of copy-on-write by them)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    os.write(ready, b"ready\n")
    os.close(ready)
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        readable = select.select([listener, 0], [], [], 1.0)[0]
        _reap()                                          # (waited for, the runs' CPU reaches the worker's rusage)
        if 0 in readable and not os.read(0, 1 << 10):
            sys.exit(0)                                  # the worker is gone or done
        if listener not in readable:
            continue
        conn, _ = listener.accept()
        try:
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 22, 3)
            request = json.loads(msg)
        except (OSError, ValueError):
            conn.close()
            continue
        differ = sorted(k for k in set(environ) | set(import_time(request["env"]))
                        if request["env"].get(k) not in (environ.get(k), own.get(k, environ.get(k))))
        if differ or len(fds) != 3:
            print(f"refused {request['argv'][:2]}: {differ} differ", file=sys.stderr, flush=True)
            conn.send(b"refused " + json.dumps(differ).encode())
        elif os.fork() == 0:
            listener.close()
            if _monitor(conn, fds):
                return request, fds, base_path
        for fd in fds:
            os.close(fd)
        conn.close()


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _monitor(conn: socket.socket, fds: list[int]) -> bool:
    """In the monitor: fork the run (True returned there), tell the client its pid, relay signals to it, and
    report its exit status; SIGKILL it if the client goes away first."""
    pid = os.fork()
    if pid == 0:
        conn.close()
        return True
    for fd in fds:
        os.close(fd)
    try:
        conn.send(b"pid %d" % pid)
        pidfd = os.pidfd_open(pid)
        while True:
            if pidfd in select.select([pidfd, conn], [], [])[0]:
                _, status, usage = os.wait4(pid, 0)
                conn.send(b"exit %d %.3f" % (status, usage.ru_utime + usage.ru_stime))
                break
            msg = conn.recv(64)
            if not msg:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            os.kill(pid, int(msg.split()[1]))
    except OSError:
        pass
    os._exit(0)


def become(request: dict, fds: list[int], base_path: list[str]) -> None:
    """In the run: become `python ARGV` as started fresh with the request's stdio, cwd, environment and signals,
    then run it in a new __main__; its exceptions and SystemExit end the process as they end a fresh one."""
    import builtins
    import io
    import types
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    ignored = set(request["ignored"])
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_IGN if sig in ignored or sig in UNINHERITED else signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    if signal.SIGINT not in ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # the zygote's own stdio objects, fds 0-2 now the run's (loggers made at import hold them), its stdout and
    # stderr unbuffered (PYTHONUNBUFFERED): buffered as a fresh interpreter's unless the run's PYTHONUNBUFFERED says
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdout.reconfigure(line_buffering=not unbuffered and os.isatty(1), write_through=unbuffered)
    sys.stderr.reconfigure(line_buffering=not unbuffered, write_through=unbuffered)
    if "torch" in sys.modules:
        sys.modules["torch"].default_generator.seed()  # as a fresh interpreter's: from entropy
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()            # its global generator, drawn from entropy as at import
    if "multiprocessing.process" in sys.modules:
        sys.modules["multiprocessing.process"].current_process().authkey = os.urandom(32)
    argv = request["argv"]
    sys.orig_argv = [sys.executable, *argv]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    main.__annotations__ = {}
    before = set(sys.modules)
    sys.modules["__main__"] = main
    try:
        if argv[0] == "-c":
            sys.argv, sys.path = ["-c", *argv[2:]], ["", *base_path[1:]]
            code = compile(argv[1], "<string>", "exec")
        elif argv[0] == "-m":
            import runpy
            sys.argv, sys.path = ["-m", *argv[2:]], [os.getcwd(), *base_path[1:]]
            code = None
            runpy._run_module_as_main(argv[1], alter_argv=True)
        else:
            import importlib.machinery
            script = argv[0]
            real = os.path.join(os.path.dirname(script), os.readlink(script)) if os.path.islink(script) else script
            sys.argv, sys.path = list(argv), [os.path.dirname(os.path.abspath(real)), *base_path[1:]]
            main.__file__ = os.path.join(os.getcwd(), script)
            main.__cached__ = None
            main.__loader__ = importlib.machinery.SourceFileLoader("__main__", main.__file__)
            with io.open_code(main.__file__) as f:
                code = compile(f.read(), main.__file__, "exec")
        if code is not None:
            exec(code, main.__dict__)
        status = 0
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next                              # the traceback a fresh interpreter prints: from the script
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        status = -signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1
        del e, tb
    _finalize(before)
    if status < 0:                                       # an uncaught Ctrl-C ends the process by SIGINT, as Python's
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status)


def _exit_status(code) -> int:
    """The exit status a fresh interpreter gives SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finalize(before: set[str]) -> None:
    """The interpreter's exit for what the run made: non-daemon threads joined, atexit handlers, its own modules'
    globals cleared (CPython's order: `_names` first) and their garbage collected (objects' __del__, unclosed
    files flushed), stdio flushed. What the zygote imported is left to os._exit: a fresh interpreter's teardown
    of it takes ~1 CPU s and changes nothing outside the process."""
    import atexit
    import gc
    import threading
    threading._shutdown()
    atexit._run_exitfuncs()
    for name in reversed([n for n in sys.modules if n not in before or n == "__main__"]):
        module = sys.modules.get(name)
        values = getattr(module, "__dict__", None)
        if values is None:
            continue
        for first in (True, False):
            for key in list(values):
                if key != "__builtins__" and (not first or (key.startswith("_") and not key.startswith("__"))):
                    values[key] = None
    gc.collect()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        become(*serve(sys.argv[2]))
    else:
        client_main(sys.argv[1:])
