"""train_bc.py, run as a user runs it (subprocesses, DeepSpeed on CPU with gloo, the tiny model, demonstrations
recorded by demos.py in real Chromium): under ZeRO-0 and ZeRO-3 and through the two-process `deepspeed`
launcher parameters change and the HF checkpoint reloads with policy.load and generates; --resume continues from
the latest checkpoint, also after a SIGKILL at any point; overfitting one task's demonstrations drives
action-token accuracy to >= 90% (Eq. 1 really trains)."""
import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines import hf_backend
import policy
from trainlib import checkpoints
from training import BC_FAST, DEEPSPEED, ROOT, free_port, metrics, params, run_script


def check_checkpoint(run_dir: Path, last: int = 2) -> None:
    """The HF checkpoint reloads through policy.load and generates; ``latest`` names step ``last``."""
    model, tok = policy.load(str(run_dir / "hf"), device="cpu")
    backend = hf_backend.HFBackend(model, tok, max_new_tokens=8, temperature=0.0)
    gen = asyncio.run(backend.generate(tok.encode("<html> <button id=\"0\"> Ok </button>")))
    assert len(gen.ids) >= 1 and gen.finish_reason in ("stop", "length")
    assert (run_dir / "loss.png").stat().st_size > 0 and (run_dir / "latest").read_text() == f"step_{last}"



def test_bc_zero3_trains_and_saves(demos, tmp_path, monkeypatch):
    """ZeRO-3 (ZeRO-0, the default, is test_bc_overfits_one_task's run). On gloo DeepSpeed builds no op: its
    shared-memory one, a C++ compile, serves only its inference all-reduce (distributed.init_distributed)."""
    out, extensions = tmp_path / "zero3", tmp_path / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
    log = run_script("train_bc.py", *BC_FAST, "--data", str(demos), "--out", str(out), "--max-steps", "2",
                     "--ds-config", "configs/zero3.json")
    assert "shm_comm" not in log and not (extensions.exists() and any(extensions.iterdir())), log[-2000:]
    median, longest = map(int, re.search(r"responses (\d+) tokens at the median, (\d+) at the longest", log).groups())
    assert 0 < median <= longest < 64              # said, so that the generation budget can hold them
    assert not torch.equal(params("tiny"), params(str(out / "hf")))
    check_checkpoint(out)
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["train/grad_norm"] > 0 for r in rows)


def test_bc_two_processes_through_deepspeed_launcher(demos, tmp_path):
    out = tmp_path / "ds2"
    log = run_script("train_bc.py", *BC_FAST, "--data", str(demos), "--out", str(out), "--max-steps", "2",
                     launcher=[*DEEPSPEED, "--num_gpus", "2",
                               "--master_port", str(free_port())])
    assert "micro 4 x accum 1 x world 2" in log
    assert not torch.equal(params("tiny"), params(str(out / "hf")))
    check_checkpoint(out)


def test_bc_killed_at_many_points_always_resumes(demos, tmp_path):
    """SIGKILL a real training process at several points (mid-save, between saves, and while a finished run
    resumed saves its last step a second time), resuming after each: there is always a complete checkpoint
    to resume from, and the metrics hold every step exactly once at the end."""
    import signal
    import time
    out = tmp_path / "kills"
    cmd = [sys.executable, "train_bc.py", *BC_FAST, "--data", str(demos), "--out", str(out), "--max-steps", "6",
           "--save-every", "1", "--resume"]
    environ = dict(os.environ, PYTHONUNBUFFERED="1")
    environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".torch_extensions"))

    def steps_logged() -> list[int]:
        return [r["step"] for r in metrics(out)] if (out / "metrics.jsonl").exists() else []

    def run_until(when) -> int:
        """Run the command, SIGKILL it as soon as when() holds; its exit code (-9 if killed)."""
        proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline:
            if when():
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        return proc.wait()

    kill_points = [
        lambda: (out / "step_2.tmp").exists(),                 # in the middle of saving step 2
        lambda: (out / "step_4.tmp" / "ds").exists(),         # ... of step 4, the optimizer state half written
        lambda: 5 in steps_logged(),                            # between two saves
    ]
    for when in kill_points:
        assert run_until(when) == -signal.SIGKILL
        ckpt = checkpoints.latest_checkpoint(out)
        assert ckpt is not None and (ckpt / "trainer_state.json").exists() and (ckpt / "hf").is_dir()
    assert run_until(lambda: False) == 0                        # to the end
    # a finished run resumed saves step 6 again: killed as the new copy replaces the old one (a window of a
    # few renames, so the kill may also land just after it), a complete step-6 checkpoint survives (the old
    # save removed step_6 first and left `latest` pointing at nothing)
    code = run_until(lambda: (out / "step_6.tmp" / "trainer_state.json").exists())
    assert code in (0, -signal.SIGKILL)
    ckpt = checkpoints.latest_checkpoint(out)
    assert ckpt is not None and json.loads((ckpt / "trainer_state.json").read_text())["step"] == 6
    # --resume continues from the checkpoint `latest` names: as if the run had died after step 4, steps 5 and 6
    # run again and are logged once, the rows before them kept; its save of step 6 replaces what the kills
    # above left (a complete step_6, perhaps a step_6.tmp) and it ends cleanly
    before = metrics(out)
    (out / "latest").write_text("step_4")
    assert run_until(lambda: False) == 0
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[:4] == before[:4] and rows[4]["time"] > before[-1]["time"]
    assert (out / "latest").read_text() == "step_6"
    assert json.loads((out / "step_6" / "trainer_state.json").read_text())["step"] == 6
    policy.load(str(out / "hf"), device="cpu")
    # a run is a function of its command: the same command run once without a kill gives the same losses and
    # bit-identical weights as this run, killed up to four times and resumed five
    once = tmp_path / "once"
    run_script(*cmd[1:cmd.index("--out") + 1], str(once), *cmd[cmd.index("--out") + 2:])
    sha = [hashlib.sha256((d / "hf" / "model.safetensors").read_bytes()).hexdigest() for d in (out, once)]
    assert [r["train/loss"] for r in metrics(once)] == [r["train/loss"] for r in rows] and sha[0] == sha[1]


def test_bc_overfits_one_task(demos, tmp_path):
    """Under ZeRO-0 (the default): parameters change, every step is logged with a gradient, the checkpoint
    reloads, and overfitting one task's demonstrations drives action-token accuracy to >= 90%."""
    out = tmp_path / "overfit"
    run_script("train_bc.py", *BC_FAST, "--data", str(demos), "--out", str(out), "--max-steps", "60",
               "--warmup-frac", "0.1")
    assert not torch.equal(params("tiny"), params(str(out / "hf")))
    check_checkpoint(out, last=60)
    rows = metrics(out)
    assert [r["step"] for r in rows] == list(range(1, 61)) and all(r["train/grad_norm"] > 0 for r in rows)
    acc = [r["train/action_token_acc"] for r in rows]
    assert max(acc[-5:]) >= 0.90, acc


_PIECES_SCRIPT = r"""
import copy, json
import torch
import policy, train_bc
from trainlib import checkpoints, distributed, optim

distributed.init_distributed()
torch.manual_seed(0)
model, tok = policy.build_tiny("tiny:layers=2,hidden=32,heads=2,kv_heads=1,intermediate=64,vocab=300")
g = torch.Generator().manual_seed(1)
lengths = [(12, 4), (30, 3), (9, 5), (21, 2), (17, 6), (40, 4), (11, 3), (26, 5)]   # (tokens, action tokens)
samples = [(torch.randint(1, 300, (n,), generator=g).tolist(), [0] * (n - k) + [1] * k) for n, k in lengths]
batches = [samples[:4], samples[4:]]                 # one step: 2 micro-batches of 4 (grad_accum 2)
out = {"init": torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()}
for size in (0, 1, 3):
    cfg = optim.ds_config("configs/zero0.json", micro_batch=4, grad_accum=2, world_size=1, bf16=False,
                          grad_clip=100.0)
    engine = optim.make_engine(copy.deepcopy(model), cfg, lr=1e-2, weight_decay=0.0,
                               schedule=optim.linear_warmup(0))
    stats = [train_bc.bc_step(engine, batches, tok.pad_token_id, size) for _ in range(2)]
    out[size] = {"stats": stats, "params": torch.cat([p.detach().flatten() for p in engine.module.parameters()]).tolist()}
print("RESULT " + json.dumps(out))
"""


def test_bc_step_in_pieces_is_the_padded_batch_step(tmp_path):
    """A micro-batch run as length-sorted pieces of 1 or 3 samples (--forward-batch) takes the same optimizer
    steps as the whole micro-batch in one right-padded batch: with 2 micro-batches of 4 samples of different
    lengths and action-token counts (each micro-batch's loss a mean over its own action tokens, the two losses
    averaged), two steps of a real DeepSpeed engine end at the same weights and report the same loss, gradient
    norm and accuracy (float rounding apart). Dividing a piece by its own action tokens, or averaging the
    pieces, would weigh the samples otherwise and move the weights elsewhere (and a scale slip shows in the
    gradient norm, which Adam's steps would hide)."""
    script = tmp_path / "pieces.py"
    script.write_text(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + _PIECES_SCRIPT)
    res = json.loads(run_script(str(script), timeout=600).split("RESULT ", 1)[1].splitlines()[0])
    whole = torch.tensor(res["0"]["params"])
    for size in ("1", "3"):
        # Adam moved each weight by up to 2e-2; rounding leaves <= 1.1e-5 between the ways of running it
        assert torch.allclose(torch.tensor(res[size]["params"]), whole, rtol=0, atol=1e-4), size
        for got, want in zip(res[size]["stats"], res["0"]["stats"]):
            for key in ("train/loss", "train/grad_norm", "train/action_token_acc"):
                assert got[key] == pytest.approx(want[key], rel=1e-5), (size, key)
    assert (whole - torch.tensor(res["init"])).abs().max() > 1e-3        # the steps moved the weights
