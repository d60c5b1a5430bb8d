"""trainlib's run-directory bookkeeping (which checkpoint a resume picks after a save was killed mid-way,
per-step logs rewound to the resumed step) and bad input to the training scripts (configs, data, model
specs) failing early with the file and the field named."""
import json
import os
from pathlib import Path

import pytest

import bc_data
import policy
from trainlib import checkpoints, cli, distributed, optim, runlog

ROOT = Path(__file__).resolve().parent.parent


def _ckpt(path, step, complete=True):
    (path / "ds").mkdir(parents=True)
    if complete:   # trainer_state.json is written last
        (path / "trainer_state.json").write_text(json.dumps({"step": step}))


def test_latest_checkpoint_survives_a_save_killed_mid_swap(tmp_path):
    _ckpt(tmp_path / "step_2", 2)
    (tmp_path / "latest").write_text("step_2")
    _ckpt(tmp_path / "step_3.tmp", 3, complete=False)            # killed while writing step 3
    assert checkpoints.latest_checkpoint(tmp_path) == tmp_path / "step_2"

    # step 3 saved a second time, killed between moving the old copy aside and moving the new one in
    _ckpt(tmp_path / "step_3.old", 3)
    (tmp_path / "step_3.tmp" / "trainer_state.json").write_text(json.dumps({"step": 3}))
    (tmp_path / "latest").write_text("step_3")
    assert checkpoints.latest_checkpoint(tmp_path) == tmp_path / "step_3.tmp"
    (tmp_path / "step_3.tmp").rename(tmp_path / "step_3.tmp2")    # ... or the new copy was never finished
    assert checkpoints.latest_checkpoint(tmp_path) == tmp_path / "step_3.old"
    assert checkpoints.latest_checkpoint(tmp_path / "nothing") is None


def test_rewind_jsonl_keeps_the_steps_before_the_resume(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in (0, 1, 2, 3, 4)))
    runlog.rewind_jsonl(log, 2)
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [0, 1, 2]
    runlog.rewind_jsonl(log, 0)                                   # a fresh run in the same directory
    assert log.read_text() == ""
    runlog.rewind_jsonl(tmp_path / "absent.jsonl", 3)             # nothing to rewind


# ---- bad input: a clear error naming the file and the field, before anything heavy loads ----

@pytest.mark.parametrize("text, message", [
    ('{"zero_optimization": {"stage": 3}', "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"zero_optimizaton": {"stage": 3}}', "unknown key 'zero_optimizaton'; did you mean 'zero_optimization'"),
    ('{"zero_optimization": {"stage": 3, "overlap_com": true}}', "zero_optimization: .*overlap_com"),
])
def test_broken_deepspeed_configs_are_named(tmp_path, text, message):
    path = tmp_path / "ds.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        optim.read_ds_config(str(path))
    assert str(path) in str(err.value)
    for name in ("zero0", "zero2", "zero3", "zero3_offload"):     # the shipped configs pass
        optim.read_ds_config(f"configs/{name}.json")


def test_the_scripts_default_deepspeed_config_follows_the_device_and_a_broken_one_exits(tmp_path):
    """train_bc and train_mgrpo: no --ds-config is ZeRO-3 on a GPU, ZeRO-0 on a CPU; a broken file exits with
    its message before any data or model loads."""
    import torch
    assert optim.checked_ds_config("", torch.device("cpu")) == "configs/zero0.json"
    assert optim.checked_ds_config("", torch.device("cuda", 0)) == "configs/zero3.json"
    assert optim.checked_ds_config("configs/zero2.json", torch.device("cpu")) == "configs/zero2.json"
    (tmp_path / "ds.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match="must be a JSON object"):
        optim.checked_ds_config(str(tmp_path / "ds.json"), torch.device("cpu"))


@pytest.mark.parametrize("content, message", [
    ('{"task": "t", "intent": "x", "steps": []}\n{"task": "t", "intent": "x", "steps": [\n', "line 2: not valid JSON"),
    ('{"task": "t", "steps": []}\n', "line 1: trajectory record without an 'intent'"),
    ('{"intent": "x", "steps": "click"}\n', "line 1: 'steps' must be a list"),
    ('{"intent": "x", "steps": [{"observation": "o"}]}\n', "step 0 without a 'response'"),
    ('[{"intent": "x", "steps": []}, 3]', "item 1: a record must be a JSON object"),
    ('{"hello": 1}\n', "neither a trajectory"),
])
def test_broken_demonstration_files_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "demos.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        bc_data.load_records(str(path))
    assert str(path) in str(err.value)


def test_bad_model_specs_say_what_to_give():
    with pytest.raises(ValueError, match="layers='abc': expected a non-negative integer"):
        policy.load("tiny:layers=abc", device="cpu")
    with pytest.raises(ValueError, match="no such directory.*tiny"):
        policy.load("/no/such/checkpoint", device="cpu")


@pytest.mark.parametrize("script", ["train_bc", "train_mgrpo", "eval", "demos"])
def test_every_script_prints_its_help(script, capsys):
    """--help renders every field's docstring (argparse %-formats them: a literal % once crashed train_bc)."""
    import importlib
    with pytest.raises(SystemExit) as done:
        cli.parse_args(importlib.import_module(script).Args, ["--help"])
    assert done.value.code == 0 and "--seed" in capsys.readouterr().out


# ---- the distributed rules that only a GPU cluster would show (issue 23): checked as rules here ----

def test_collectives_go_to_the_device_of_the_backend(monkeypatch):
    """NCCL has no CPU path: a collective under it must use this rank's GPU (gloo accepts anything, so the rule
    itself is checked), and the reductions train_mgrpo uses (trainlib.all_reduce_*) go through it."""
    import torch
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    monkeypatch.setattr(torch.distributed, "get_backend", lambda *a: "nccl")
    assert distributed.collective_device() == torch.device("cuda", 3)
    monkeypatch.setattr(torch.distributed, "get_backend", lambda *a: "gloo")
    assert distributed.collective_device() == torch.device("cpu")

    seen = []
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a: 2)
    monkeypatch.setattr(distributed, "collective_device", lambda: seen.append("asked") or torch.device("cpu"))
    monkeypatch.setattr(torch.distributed, "all_reduce",
                        lambda t, op=None, group=None: seen.append(t.device) or t.mul_(2))
    assert distributed.all_reduce_sum(5) == 10 and distributed.all_reduce_max(1) == 2
    assert distributed.all_reduce_mean({"a": 1.0}) == {"a": 1.0}
    assert seen == ["asked", torch.device("cpu")] * 3


def test_backend_follows_the_models_device_and_waits_longer_than_an_episode(monkeypatch):
    """NCCL only when the models go to CUDA (WEBAGENT_DEVICE=cpu on a GPU box gets gloo), and the collective
    timeout train_mgrpo asks for outlasts its episode timeout (DeepSpeed's default 10 minutes does not)."""
    import datetime

    import deepspeed
    import torch
    import train_mgrpo
    calls = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(deepspeed, "init_distributed", lambda **kw: calls.append(kw))
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *a: 0)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: calls.append(("set_device", i)))
    monkeypatch.setattr(runlog, "machine", lambda: "a GPU machine")   # (no device to name here)
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WEBAGENT_DEVICE", "cpu")
    distributed.init_distributed(timeout_s=2400)
    assert calls == [{"dist_backend": "gloo", "timeout": datetime.timedelta(seconds=2400)}]
    monkeypatch.delenv("WEBAGENT_DEVICE")
    calls.clear()
    distributed.init_distributed()
    assert calls[0]["dist_backend"] == "nccl" and calls[1] == ("set_device", 0)
    timeout = train_mgrpo.Args().episode.episode_timeout
    assert distributed.collective_timeout_s(timeout) >= 2 * timeout > 600     # 600 s: DeepSpeed's default


def test_tasks_per_step_fits_any_world_size():
    from train_mgrpo import tasks_per_step
    assert [tasks_per_step(0, 4, w) for w in (1, 2, 4, 8, 16)] == [4, 4, 4, 8, 16]   # 16 trajectories up to 4 ranks
    assert tasks_per_step(0, 8, 1) == 2 and tasks_per_step(0, 2, 8) == 8 and tasks_per_step(0, 32, 1) == 1
    assert tasks_per_step(6, 4, 2) == 6
    with pytest.raises(SystemExit, match="multiple of the world size 4"):
        tasks_per_step(6, 4, 4)


def test_deepspeed_env_carries_the_site_urls_to_other_nodes(tmp_path):
    """Multi-node: DeepSpeed's pdsh runner forwards only a few prefixes of the launching shell's variables, plus
    the lines of .deepspeed_env, each sent as `export KEY=VALUE;` to the remote shell. scripts/deepspeed_env.sh
    writes that file, readable by its owner alone: the WA_* site URLs, WEBAGENT_*, and names asked for. Read and
    quoted by DeepSpeed's own runner code and run by bash as pdsh runs it, every value comes back unchanged; a
    value DeepSpeed's quoting cannot carry ($, quotes, backslashes) is refused by name."""
    import subprocess
    from deepspeed.launcher.multinode_runner import PDSHRunner
    values = {"WA_SHOPPING": "http://10.0.0.5:7770", "WA_MAP": "http://h:3000/a b?x=1&y=2;'q'",
              "WEBAGENT_DEVICE": "cuda", "WEBAGENT_BROWSER_ENDPOINT": "ws://10.0.0.7:3000/Yq3-_tok", "EXTRA": "kept"}
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("WA_", "WEBAGENT_"))}
    proc = subprocess.run(["bash", str(ROOT / "scripts/deepspeed_env.sh"), "EXTRA"], cwd=tmp_path,
                          env={**environ, **values}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / ".deepspeed_env").stat().st_mode & 0o777 == 0o600       # a browser server's token inside
    runner = PDSHRunner.__new__(PDSHRunner)              # its add_export quotes; get_cmd joins as below
    runner.exports = {}
    for line in (tmp_path / ".deepspeed_env").read_text().splitlines(keepends=True):   # runner.py's reading
        key, val = line.split("=", maxsplit=1)
        runner.add_export(key, val)
    exports = "".join(f"export {k}={v}; " for k, v in runner.exports.items())
    printed = subprocess.run(["bash", "-c", exports + "; ".join(f'printf "%s\\0" "${k}"' for k in values)],
                             capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert printed.stdout.split("\0")[:-1] == list(values.values()), (exports, printed.stderr)
    for bad in ({"NOT_SET_ANYWHERE": None}, {"WA_BAD": "http://h/$HOME"}):
        name, value = next(iter(bad.items()))
        proc = subprocess.run(["bash", str(ROOT / "scripts/deepspeed_env.sh"), name], cwd=tmp_path,
                              env={**environ, **({name: value} if value else {})}, capture_output=True, text=True)
        assert proc.returncode == 2 and name in proc.stderr, proc.stderr


_TWO_RANKS = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch
from trainlib import checkpoints, cli, distributed, optim, runlog
rank, local_rank, world = distributed.init_distributed(timeout_s=2400)
out = {"rank": rank, "world": world, "backend": torch.distributed.get_backend(),
       "device": str(distributed.collective_device()),
       "sum": distributed.all_reduce_sum(rank + 1), "max": distributed.all_reduce_max(rank + 1),
       "fmax": distributed.all_reduce_fmax(-float(rank)), "mean": distributed.all_reduce_mean({"a": float(rank)})}
print("RESULT " + json.dumps(out), flush=True)
torch.distributed.destroy_process_group()
"""


def test_collectives_for_real_in_two_gloo_processes(tmp_path):
    """The gloo halves of the two rules above, in two real processes (NCCL's halves need GPUs): with the models
    on the CPU init_distributed picks gloo, collectives stay on the CPU, and train_mgrpo's reductions add, take
    the max and average across the ranks."""
    import subprocess
    import sys
    script = tmp_path / "ranks.py"
    script.write_text(_TWO_RANKS)
    import warm
    port = str(distributed._free_port())
    logs, procs = [tmp_path / f"rank{r}.log" for r in (0, 1)], []
    for r, log in enumerate(logs):      # each forked from the warm interpreter (tests/warm.py) where it can
        with open(log, "w") as sink:
            procs.append(warm.popen([sys.executable, str(script), str(ROOT)], stdout=sink, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                                             MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WEBAGENT_DEVICE="cpu")))
    for p in procs:
        p.wait(timeout=300)
    outs = [log.read_text() for log in logs]
    assert all(p.returncode == 0 for p in procs), outs[0][-2000:] + outs[1][-2000:]
    res = [json.loads(o.split("RESULT ", 1)[1].splitlines()[0]) for o in outs]
    for r, got in enumerate(res):
        assert (got["rank"], got["world"], got["backend"], got["device"]) == (r, 2, "gloo", "cpu")
        assert (got["sum"], got["max"], got["fmax"], got["mean"]) == (3, 2, 0.0, {"a": 0.5})


def test_machine_names_torch_the_cpu_and_its_kernels():
    """A run's log and results.json name the machine: the same command on another CPU may round differently."""
    import torch
    text = runlog.machine()
    assert text.startswith(f"torch {torch.__version__}, CPU ")
    assert f"({torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores)" in text
    assert ("GPU " in text) == torch.cuda.is_available()
