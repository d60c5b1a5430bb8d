"""`make demo`, `make demo-findings` and `make demo-suite` at smoke size, end to end, as the README runs them."""
import json
import os
import subprocess
from pathlib import Path

import pytest

import warm

ROOT = Path(__file__).resolve().parent.parent


def _environ(**extra: str) -> dict:
    """The scripts' environment: their Python stages ($PY, scripts/demo_common.sh) forked from this worker's warm
    interpreter through tests/warm_python (tests/warm.py), each as `.venv/bin/python STAGE` runs it."""
    environ = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    environ.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".torch_extensions"))
    environ.update(warm.python_environ())
    return environ


@pytest.mark.timeout(1800)   # ~135 s alone; under `make test` a second worker shares the two cores
def test_demo_scripts_smoke(tmp_path):
    """The three scripts at smoke size. `make demo-suite`'s runs beside `make demo`'s and `make
    demo-findings`' (which reuses the demo's run): each is a chain of single-process stages that leaves part of
    the two cores idle, so side by side they take little more than the longer chain."""
    suite_out = tmp_path / "suite"
    # then SUITE_BC (make demo-findings' log-in seeds after the first start from the first one's BC) naming a
    # directory that holds no checkpoint: refused before any stage (the run from a real one: make demo-findings)
    twice = ('bash scripts/demo_suite.sh && ! SUITE_BC="$SUITE_OUT/none" SUITE_OUT="$SUITE_OUT-bc" '
             'bash scripts/demo_suite.sh')
    with open(tmp_path / "suite.log", "w") as sink:
        suite = subprocess.Popen(["bash", "-c", twice], cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
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
    """`make demo-findings` at smoke size on top of the smoke demo's run (seed 0 of its reference rows): the stages
    ref, plain, tts and filtered write their evaluations (one eval.py run a stage for plain and tts), and the table
    reads them. r1zero (seed_run from the base: the function ref runs from BC), cot (variant_bc, seed_train and
    paper_eval as plain runs them, at more tokens; its long thoughts: tests/test_findings_helpers.py) and login
    (make demo-suite: its own smoke runs beside) are left to real runs for make test's minutes: the table is then
    read again with their evaluations stood in by make demo's, renamed, in the layout each stage writes. Last, the
    model rows kept in FINDINGS_OUTCOMES make the table again with make demo's run gone (FINDINGS=plain, resumed)."""
    proc = subprocess.run(["bash", "scripts/demo_findings.sh"], cwd=ROOT, capture_output=True, text=True,
                          env=_environ(DEMO_OUT=str(demo), FINDINGS_SIZE="smoke", FINDINGS_OUT=str(out),
                                       FINDINGS="ref plain tts filtered", FINDINGS_OUTCOMES=str(out / "kept.jsonl.gz")),
                          timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "make demo first" not in log                   # it reused the demo's run
    for results in ("test/plain", "tts/sweep", "tts/bc-at-1", "filtered/eval"):
        assert (out / results / "results.json").exists(), results
    assert json.loads((out / "tts" / "sweep" / "results.json").read_text())["budgets"] == [1, 2]
    plain = [json.loads(line) for line in (out / "plain" / "demos.jsonl").read_text().splitlines()]
    assert all("<think>" not in s["response"] for r in plain for s in r["steps"])
    assert {r.get("imperfection") for r in plain} & {"wrong-element", "early-submit"}   # make demo's log, mistakes
    assert "plain-rl from" in log and "seed 0 --prompt short_plain" in log   # the stage line: M-GRPO's flags
    # the filtered BC clones make demo's own log file (its failed episodes left out by train_bc.py)
    assert f"make demo's log ({demo / 'demos.jsonl'}) filtered to successes" in log
    assert "without mistakes" not in log and not (out / "filtered" / "demos.jsonl").exists()
    table = (out / "filtered" / "table" / "results.md").read_text()
    for row in ("| bc-filtered |", "| rl |", "| rl - bc-filtered |", "| bc - bc-filtered |"):
        assert row in table and row in log            # make demo's run joined; the table printed at the end
    findings = (out / "findings.md").read_text()
    assert findings in log                                           # printed
    for stage in ("r1zero", "cot", "login"):
        assert f"not run yet (`FINDINGS={stage} make demo-findings`)" in findings, stage
    _renamed(demo / "eval", out / "test" / "r1zero-s0", {"rl": "r1zero-s0"})
    for name, renamed in (("bc", "bc"), ("bc", "cot-bc"), ("rl", "cot-rl-s0")):   # cot: one directory a model
        _renamed(demo / "eval", out / "cot320" / "test" / renamed, {name: renamed})
    subprocess.run([".venv/bin/python", "scripts/findings_table.py", "--out", str(out), "--demo", str(demo)],
                   cwd=ROOT, check=True, capture_output=True)
    findings = (out / "findings.md").read_text()
    assert "R1-Zero s0" in findings and "R1-Zero - (BC + M-GRPO) by seed +0.0; R1-Zero - base" in findings
    for row in ("RL - BC by seed", "(a) CoT BC", "(b) CoT RL - CoT BC by seed", "minus (RL - BC) +0.0",
                "BC - plain BC", "RL - plain RL by seed", "| bc | T = 1 |", "| rl-s0 | greedy |", "2 - 1 (paired)",
                "run alone at each budget, its episodes equal to the budget-2 run's first interactions: 1: 6 of 6"):
        assert row in findings, row
    assert "not run yet (`FINDINGS=login make demo-findings`)" in findings
    # the model rows kept (FINDINGS_OUTCOMES) and read back where make demo's run is gone: plain needs no make demo
    proc = subprocess.run(["bash", "scripts/demo_findings.sh"], cwd=ROOT, capture_output=True, text=True,
                          env=_environ(DEMO_OUT=str(out / "gone"), FINDINGS_SIZE="smoke", FINDINGS_OUT=str(out),
                                       FINDINGS="plain", FINDINGS_OUTCOMES=str(out / "kept.jsonl.gz")), timeout=300)
    assert proc.returncode == 0 and "make demo first" not in proc.stdout, (proc.stdout + proc.stderr)[-4000:]
    kept = (out / "findings.md").read_text()
    for row in ("RL - BC by seed", "BC - plain BC", "RL - plain RL by seed", "| bc | T = 1 |"):
        assert row in kept, row


def _renamed(src: Path, dst: Path, names: dict[str, str]) -> None:
    """An evaluation directory dst standing in for a stage's: src's episodes of the runs in ``names`` under their
    new names."""
    dst.mkdir(parents=True)
    (dst / "results.json").write_text((src / "results.json").read_text())
    with open(dst / "trajectories.jsonl", "w") as f:
        for line in (src / "trajectories.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec["run"] in names:
                f.write(json.dumps({**rec, "run": names[rec["run"]]}) + "\n")


def check_suite_smoke(out: Path, returncode: int, log: str) -> None:
    """`make demo-suite` at smoke size: suite demonstrations (logged-in starts + log-in + the few logged-out
    ones) -> BC -> M-GRPO on mixed starts -> evaluation split by start type; then a SUITE_BC that holds no
    checkpoint, refused with the path named."""
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
    assert f"SUITE_BC={out.parent / 'suite' / 'none'} holds no checkpoint (config.json)" in log
    assert not (out.parent / "suite-bc").exists()                         # nothing run, nothing written
