"""trainlib's run-directory bookkeeping: which checkpoint a resume picks after a save was killed mid-way, and
per-step logs rewound to the resumed step."""
import json

import trainlib


def _ckpt(path, step, complete=True):
    (path / "ds").mkdir(parents=True)
    if complete:   # trainer_state.json is written last
        (path / "trainer_state.json").write_text(json.dumps({"step": step}))


def test_latest_checkpoint_survives_a_save_killed_mid_swap(tmp_path):
    _ckpt(tmp_path / "step_2", 2)
    (tmp_path / "latest").write_text("step_2")
    _ckpt(tmp_path / "step_3.tmp", 3, complete=False)            # killed while writing step 3
    assert trainlib.latest_checkpoint(tmp_path) == tmp_path / "step_2"

    # step 3 saved a second time, killed between moving the old copy aside and moving the new one in
    _ckpt(tmp_path / "step_3.old", 3)
    (tmp_path / "step_3.tmp" / "trainer_state.json").write_text(json.dumps({"step": 3}))
    (tmp_path / "latest").write_text("step_3")
    assert trainlib.latest_checkpoint(tmp_path) == tmp_path / "step_3.tmp"
    (tmp_path / "step_3.tmp").rename(tmp_path / "step_3.tmp2")    # ... or the new copy was never finished
    assert trainlib.latest_checkpoint(tmp_path) == tmp_path / "step_3.old"
    assert trainlib.latest_checkpoint(tmp_path / "nothing") is None


def test_rewind_jsonl_keeps_the_steps_before_the_resume(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in (0, 1, 2, 3, 4)))
    trainlib.rewind_jsonl(log, 2)
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [0, 1, 2]
    trainlib.rewind_jsonl(log, 0)                                   # a fresh run in the same directory
    assert log.read_text() == ""
    trainlib.rewind_jsonl(tmp_path / "absent.jsonl", 3)             # nothing to rewind
