"""Waiting on processes a test started (tests/test_vllm.py, test_policy.py, test_train_mgrpo_vllm.py): for the
lines they print, and for them to end."""
import time


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (neither gone nor zombies)."""
    import psutil
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def outliving(pids: list[int], seconds: float = 30) -> list[int]:
    """Those of ``pids`` still running after up to ``seconds`` of waiting for them to end."""
    deadline = time.time() + seconds
    while (running := alive(pids)) and time.time() < deadline:
        time.sleep(0.5)
    return running


def read_until(path, marks: tuple[str, ...], proc, deadline: float) -> dict[str, str]:
    """The lines of a process's log file that start with ``marks``, waited for until all are there."""
    while True:
        text = path.read_text(errors="replace") if path.exists() else ""
        found = {m: ln[len(m):] for ln in text.splitlines() for m in marks if ln.startswith(m)}
        if len(found) == len(marks):
            return found
        assert proc.poll() is None and time.time() < deadline, text[-3000:]
        time.sleep(0.5)
