"""What the tests of the training scripts share (tests/test_train_bc.py, test_train_mgrpo.py,
test_train_mgrpo_vllm.py; their fixtures `demos` and `half_right_bc` are in conftest.py): running a repo script as
a user does, in a process of its own, and reading what it wrote."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

import env
import policy
import warm

ROOT = Path(__file__).resolve().parent.parent
DEEPSPEED = [sys.executable, "-m", "deepspeed.launcher.runner"]   # the `deepspeed` command, wherever it is installed


def run_script(*argv: str, launcher: list[str] | None = None, fresh: bool = False, timeout: int = 900) -> str:
    """Run a repo script, `python SCRIPT ARGS`, in a process forked from the worker's warm interpreter
    (tests/warm.py: torch and transformers imported once), or in a real fresh process through ``launcher`` or
    with ``fresh`` (a resume); fail with the tail of its output."""
    environ = dict(os.environ, PYTHONUNBUFFERED="1")
    environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".torch_extensions"))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        environ.pop(k, None)
    cmd = (launcher or [sys.executable]) + list(argv)
    proc = (subprocess.run if launcher or fresh else warm.run)(cmd, cwd=ROOT, env=environ, capture_output=True,
                                                              text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-4000:]}"
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def params(path_or_spec: str) -> torch.Tensor:
    model, _ = policy.load(path_or_spec, device="cpu")
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]



BC_FAST = ["--model", "tiny", "--prompt", "short", "--batch-size", "8", "--micro-batch", "4", "--lr", "3e-3",
           "--torch-threads", "1"]


def mixed_demos(demos: Path, out: Path, wrong: int) -> Path:
    """The demonstrations, each followed by ``wrong`` copies that click other elements of the same page: BC on
    them clicks the right one about 1 / (1 + wrong) of the time."""
    import compress
    lines = []
    for line in demos.read_text().splitlines():
        rec = json.loads(line)
        lines.append(json.dumps(rec))
        step = rec["steps"][0]
        thought, action = compress.split_response(step["response"])
        right = env.parse_action(action).element
        others = [i for i in range(12) if i != right and f'id="{i}"' in step["observation"]]
        for other in others[:wrong]:   # a page with a single element has no wrong choice
            step["response"] = compress.format_response(
                thought, env.format_action(env.Action("Click", element=other)))
            lines.append(json.dumps(rec))
    out.write_text("\n".join(lines) + "\n")
    return out


def record_demos(out: Path) -> Path:
    """16 expert demonstrations of click-button (one step each), recorded through the real env."""
    run_script("demos.py", "--tasks", "miniwob:click-button", "--episodes", "16", "--out", str(out),
               "--concurrency", "4", "--no-progress")
    assert len(out.read_text().splitlines()) == 16
    return out


def half_right_bc(demos: Path, work: Path) -> Path:
    """A BC checkpoint that clicks the right button about half the time: each demonstration is paired with a
    copy that clicks another element of the same page. G=4 groups then almost surely mix 0 and 1 rewards,
    so M-GRPO steps from it have a learning signal."""
    mixed = mixed_demos(demos, work / "mixed.jsonl", wrong=1)
    run_script("train_bc.py", *BC_FAST, "--data", str(mixed), "--out", str(work / "bc"), "--max-steps", "60",
               "--warmup-frac", "0.1")
    return work / "bc" / "hf"
