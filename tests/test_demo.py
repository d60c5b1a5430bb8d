"""`make demo`, `make demo-findings` and `make demo-suite` at smoke size, end to end, as the README runs them."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _environ(**extra: str) -> dict:
    environ = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".torch_extensions"))
    return environ


@pytest.mark.timeout(1800)   # ~135 s alone; under `make test` a second worker shares the two cores
def test_demo_scripts_smoke(tmp_path):
    """The three scripts at smoke size. `make demo-suite`'s runs beside `make demo`'s and `make
    demo-findings`' (which reuses the demo's run): each is a chain of single-process stages that leaves part of
    the two cores idle, so side by side they take little more than the longer chain."""
    suite_out = tmp_path / "suite"
    with open(tmp_path / "suite.log", "w") as sink:
        suite = subprocess.Popen(["bash", "scripts/demo_suite.sh"], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                 env=_environ(SUITE_SIZE="smoke", SUITE_OUT=str(suite_out), SUITE_OUT_DEMOS="1"))
    try:
        check_demo_smoke(tmp_path / "demo")
        check_findings_smoke(tmp_path / "demo", tmp_path / "findings")
        suite.wait(timeout=1500)
    finally:
        if suite.poll() is None:
            suite.kill()
    check_suite_smoke(suite_out, suite.returncode, (tmp_path / "suite.log").read_text(errors="replace"))


def check_demo_smoke(out: Path) -> None:
    """`make demo` at smoke size: every stage runs and writes its table, plots and viewer."""
    proc = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=_environ(DEMO_SIZE="smoke", DEMO_OUT=str(out)),
                          capture_output=True, text=True, timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    for stage in ("1/4 demonstrations (log)", "2/4 behavior cloning of assets/tiny-web-base", "3/4 M-GRPO",
                  "4/4 evaluation"):
        assert stage in log
    demos = [json.loads(line) for line in (out / "demos.jsonl").read_text().splitlines()]
    assert {r.get("imperfection") for r in demos} & {"wrong-element", "early-submit"}     # the unfiltered log
    assert "--no-only-successes" in log and "--invalid-penalty" in log                     # cloned as logged
    assert "R1-Zero" not in log                        # a stage of make demo-findings now (r1zero)
    assert "8 tasks x G=8" not in log and "--lr 1e-4 --warmup-steps 4" in log   # smoke size, the demo's settings
    table = (out / "eval" / "results.md").read_text()
    for row in ("| base |", "| bc |", "| rl |", "| rl - bc |"):
        assert row in table and row in log            # the table is printed at the end
    metrics = [json.loads(line) for line in (out / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert "val/success_rate" in metrics[0]           # the in-run check on validation pages (--eval-every)
    results = json.loads((out / "eval" / "results.json").read_text())
    assert results and (out / "eval" / "viewer" / "index.html").exists()
    assert results["decoding"] == "T = 1" and results["samples"] == 2 and "greedy" in results   # both columns
    for png in ("bc/loss.png", "rl/dynamics.png"):
        assert (out / png).stat().st_size > 0


def check_findings_smoke(demo: Path, out: Path) -> None:
    """`make demo-findings` at smoke size on top of the smoke demo's run: every stage writes its results, but
    zero, which runs r1zero's two commands (M-GRPO, then eval.py) from another model (the untrained one)."""
    proc = subprocess.run(["bash", "scripts/demo_findings.sh"], cwd=ROOT, capture_output=True, text=True,
                          env=_environ(DEMO_OUT=str(demo), FINDINGS_SIZE="smoke", FINDINGS_OUT=str(out),
                                       FINDINGS="tts plain cot r1zero filtered"), timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "make demo first" not in log                   # it reused the demo's run
    for results in ("tts", "plain/eval", "cot/eval", "r1zero/eval", "filtered/eval"):
        assert (out / results / "results.json").exists(), results
    r1zero = (out / "r1zero" / "eval" / "results.md").read_text()
    assert "| base |" in r1zero and "| r1-zero |" in r1zero and "| r1-zero - base |" in r1zero
    tts = (out / "tts" / "results.md").read_text()
    assert "| untrained |" in tts and "| rl |" in tts
    cot = [json.loads(line) for line in (out / "cot" / "demos.jsonl").read_text().splitlines()]
    assert all(len(s["response"]) > 150 for r in cot for s in r["steps"])            # long thoughts
    plain = [json.loads(line) for line in (out / "plain" / "demos.jsonl").read_text().splitlines()]
    assert all("<think>" not in s["response"] for r in plain for s in r["steps"])
    log_demos = (out / "filtered" / "demos.jsonl").read_text()
    assert log_demos == (demo / "demos.jsonl").read_text()       # make demo's log, written again by its command
    assert "cloned other demonstrations" not in log
    table = (out / "filtered" / "table" / "results.md").read_text()
    for row in ("| bc-filtered |", "| rl |", "| rl - bc-filtered |", "| bc - bc-filtered |"):
        assert row in table and row in log            # make demo's run joined; the table printed at the end


def check_suite_smoke(out: Path, returncode: int, log: str) -> None:
    """`make demo-suite` at smoke size: suite demonstrations (logged-in starts + log-in + the few logged-out
    ones) -> BC -> M-GRPO on mixed starts -> evaluation split by start type."""
    assert returncode == 0, log[-4000:]
    demos = [json.loads(line) for line in (out / "demos.jsonl").read_text().splitlines()]
    starts = sorted(r["task"] for r in demos)
    assert starts == ["suite/log-in"] * 2 + ["suite/stop-newsletter@in"] * 2 + ["suite/stop-newsletter@out"]
    table = (out / "eval" / "results.md").read_text()
    assert "| stop-newsletter@in | stop-newsletter@out | log-in |" in table
    for row in ("| bc |", "| rl |"):
        assert row in table and row in log
    results = json.loads((out / "eval" / "results.json").read_text())
    assert results and (out / "eval" / "viewer" / "index.html").exists()

