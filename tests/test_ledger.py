"""experiments/ledger.py (issue 87): every number the docs print that has committed per-page outcomes behind it is
re-derived from experiments/evidence/ alone and found written as it comes out; a number edited by hand fails."""
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import ledger  # noqa: E402


def test_every_claim_is_written_as_the_evidence_gives_it():
    results = ledger.check()
    assert len(results) >= 40 and {c.doc for c, _ in results} == {"README.md", "docs/results.md", "docs/training.md",
                                                                   "docs/history.md"}
    assert [c.name for c, found in results if not found] == []


def test_a_number_edited_by_hand_fails(tmp_path):
    for doc in {c.doc for c in ledger.claims()}:
        (tmp_path / doc).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    results = tmp_path / "docs" / "results.md"
    text = results.read_text()
    for old, new in (("| base | 21.9 | 1.4 |", "| base | 21.8 | 1.4 |"),          # a table cell
                     ("+8.2, +5.8, +7.9 at T = 1 (mean", "+8.2, +5.9, +7.9 at T = 1 (mean")):   # a seed in the prose
        assert text.count(old) == 1
        text = text.replace(old, new)
    results.write_text(text)
    wrong = {c.name for c, found in ledger.check(tmp_path) if not found}
    assert wrong == {"make demo, base, results", "RL lifts BC, seeds 0-2"}


def test_the_findings_without_outcomes_are_marked():
    """results.md names every finding whose per-page outcomes were not kept (the ledger cannot re-derive it)."""
    text = ledger.flat((ROOT / "docs" / "results.md").read_text())
    assert "experiments/ledger.py --check" in text
    for finding in ledger.NOT_KEPT:
        assert finding in text, finding


def test_outcomes_are_kept_and_read_back(tmp_path):
    """eval_stats.write_outcomes keeps OUTCOME_KEYS (and an episode's "set"), a header first; read_outcomes gives
    both back; what an episode holds besides (its steps) is not kept."""
    from eval_stats import OUTCOME_KEYS, read_outcomes, write_outcomes
    ep = {"run": "bc", "task": "miniwob/click-option", "seed": 2000000, "sample": 1, "decoding": "T = 1",
          "success": True, "num_steps": 2, "steps": [{"response": "..."}]}
    path = tmp_path / "kept.jsonl.gz"
    assert write_outcomes(path, [ep, {**ep, "set": "test320", "sample": 0}], header={"demo": {"budgets": [6]}}) == 2
    header, rows = read_outcomes(path)
    assert header == {"demo": {"budgets": [6]}} and not list(tmp_path.glob("*.tmp"))
    kept = {k: ep[k] for k in OUTCOME_KEYS}
    assert rows == [kept, {"set": "test320", **kept, "sample": 0}]
    write_outcomes(path, [ep])
    assert read_outcomes(path) == (None, [{k: ep[k] for k in OUTCOME_KEYS}])


def test_keep_merges_finished_evaluations_into_the_evidence(tmp_path):
    """ledger.py --keep: a finished evaluation's episodes join the file, a run evaluated again replaces its own, a
    run whose directory is gone (an earlier sitting's) stays, an unfinished evaluation (no results.json) is left out."""
    import json
    import subprocess
    from eval_stats import read_outcomes

    def evaluation(name, run, successes, finished=True):
        d = tmp_path / name
        d.mkdir()
        eps = [{"run": run, "task": "miniwob/click-option", "seed": 2000000 + i, "sample": 0, "decoding": "T = 1",
                "success": s, "num_steps": 1, "steps": []} for i, s in enumerate(successes)]
        (d / "trajectories.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
        if finished:
            (d / "results.json").write_text("{}")
        return str(d)

    kept = tmp_path / "kept.jsonl.gz"
    keep = [sys.executable, str(ROOT / "experiments" / "ledger.py"), "--keep", str(kept)]
    subprocess.run(keep + [evaluation("a", "bc", [True, False]), evaluation("b", "rl-s0", [True, True])], check=True)
    subprocess.run(keep + [evaluation("c", "rl-s0", [False, False]), evaluation("d", "rl-s1", [True], False)],
                   check=True)
    rows = read_outcomes(kept)[1]
    assert sorted((r["run"], r["success"]) for r in rows) == [("bc", False), ("bc", True), ("rl-s0", False),
                                                              ("rl-s0", False)]


def test_fresh_pages_rows_and_the_r1zero_rule():
    """Issue 87's fresh-page claims on made-up outcomes: budget 6 read from 12-interaction episodes, each seed
    paired, and the plan's verdict on R1-Zero only with its 5 seeds (below 0: reproduces; at 0: does not)."""
    def rows(run, solved):         # 40 pages x 2 samples at T = 1 and one greedy; page p solved iff solved(p)
        return [{"run": run, "task": "miniwob/t", "seed": p, "sample": k, "decoding": dec, "success": solved(p),
                 "num_steps": 8 if p % 5 == 0 else 3}
                for p in range(40) for dec, n in ((ledger.T1, 2), (ledger.GREEDY, 1)) for k in range(n)]
    base = rows("base", lambda p: p < 10) + rows("bc", lambda p: p < 20)
    for zero_solves, verdict in ((12, "reproduces"), (30, "does not reproduce")):
        runs = base + [r for s in range(5) for r in rows(f"rl-s{s}", lambda p, s=s: p < 30 + (s % 2))
                       + rows(f"r1zero-s{s}", lambda p, s=s: p < zero_solves + s)]
        claims = {c.name: c.text for c in ledger.fresh(ledger.Outcomes(runs))}
        assert claims["fresh pages, base"].startswith("| base | 20.0 +- ")      # pages 0, 5: after 6 interactions
        assert claims["fresh pages, rl-s0"].split(" | ")[2].startswith("rl-s0 - bc +")
        assert f"): {verdict}; greedy " in claims["fresh pages, R1-Zero"]
    assert not any(name.startswith("the recipe's seeds") for name in claims)       # no filtered BC yet
    claims = {c.name: c.text for c in ledger.fresh(ledger.Outcomes(runs + rows("bc-filtered", lambda p: p < 25)))}
    # at budget 6 (pages 0, 5, ... need 8 interactions): RL 24 of 40 pages in every seed, BC 16, the filtered BC 20
    assert claims["the recipe's seeds, seed 1"] == "| 1 | +20.0 | 6.4 | 3.1 | +20.0 | 6.4 | +10.0 | 4.8 |"
    assert claims["the recipe's seeds, mean"] == ("| mean [95% t-interval over seeds] | +20.0 [+20.0, +20.0] | | | "
                                                  "+20.0 | | +10.0 [+10.0, +10.0] | |")
    assert claims["the recipe's seeds, README"] == ("RL - BC +20.0, +20.0, +20.0, +20.0, +20.0 (mean +20.0, 95% "
                                                    "interval +20.0 to +20.0), and RL - the filtered BC (BC 40.0, "
                                                    "filtered 50.0) +10.0, +10.0, +10.0, +10.0, +10.0 (mean +10.0)")
    three = {c.name: c.text for c in ledger.fresh(ledger.Outcomes([r for r in runs
                                                                    if not r["run"].endswith(("-s3", "-s4"))]))}
    assert "the plan's verdict waits for 5 seeds" in three["fresh pages, R1-Zero"]
    assert "reproduce" not in three["fresh pages, R1-Zero"]


def test_keep_as_a_set_with_runs_renamed(tmp_path):
    """--keep --set S --runs OLD=NEW,...: only the named runs, renamed, kept as set S; the same (set, run) kept again
    replaces its episodes, the same run name in another set does not; --has finds a run and a set kept, and no other."""
    import json
    import subprocess
    from eval_stats import read_outcomes
    d = tmp_path / "s1"
    d.mkdir()
    eps = [{"run": run, "task": "suite/log-in", "seed": 7, "sample": 0, "decoding": "greedy", "success": run == "rl",
            "num_steps": 3, "steps": []} for run in ("bc", "rl")]
    (d / "trajectories.jsonl").write_text("".join(json.dumps(e) + "\n" for e in eps))
    (d / "results.json").write_text("{}")
    kept = tmp_path / "kept.jsonl.gz"
    for set_name, runs in (("out0", "rl=rl-s1"), ("out1", "bc=bc,rl=rl-s1"), ("out0", "rl=rl-s1")):
        subprocess.run([sys.executable, str(ROOT / "experiments" / "ledger.py"), "--keep", str(kept), str(d),
                        "--set", set_name, "--runs", runs], check=True)
    assert sorted((r["set"], r["run"], r["success"]) for r in read_outcomes(kept)[1]) == [
        ("out0", "rl-s1", True), ("out1", "bc", False), ("out1", "rl-s1", True)]
    def has(*argv: str) -> int:       # findings_fresh.sh's test of what an earlier sitting kept
        return subprocess.run([sys.executable, str(ROOT / "experiments" / "ledger.py"), "--has", *argv]).returncode
    assert [has(str(kept), "bc"), has(str(kept), "rl-s1", "--set", "out0"), has(str(kept), "--set", "out1")] == [0, 0, 0]
    assert [has(str(kept), "bc", "--set", "out0"), has(str(kept), "rl"), has(str(tmp_path / "none.jsonl.gz"))] == [1, 1, 1]
    bad = subprocess.run([sys.executable, str(ROOT / "experiments" / "ledger.py"), "--keep", str(kept), str(d),
                          "--runs", "rl"], capture_output=True, text=True)
    assert bad.returncode == 2 and "OLD=NEW pairs" in bad.stderr


def test_login_rows_by_the_committed_rule():
    """The log-in rows on made-up outcomes: a seed composes at >= 10% of its held-out logged-out starts, the finding
    reproduces at >= 3 of 5 seeds; BC's own columns, the rollouts that succeeded (from the metrics) and BC's samples."""
    def eps(run, task, solved, n=30, decoding=ledger.GREEDY):
        return [{"run": run, "task": task, "seed": p, "sample": 0, "decoding": decoding, "success": p < solved,
                 "num_steps": 4} for p in range(n)]
    out = ledger.LOGGED_OUT
    zero = (eps("bc", out, 0) + eps("bc", "suite/stop-newsletter@in", 30) + eps("bc", "suite/log-in", 30)
            + [e for s in range(5) for e in eps(f"rl-s{s}", out, 0)] + eps("bc-t0.5", out, 0, 120, "T = 0.5"))
    one = eps("bc", out, 3) + [e for s in range(5) for e in eps(f"rl-s{s}", out, 30 if s else 2)]
    metrics = {f"out{k}-s{s}": [{"step": 1, "rollout/success/stop-newsletter@out": float(k and s > 0)}]
               for k in (0, 1) for s in range(5)}
    claims = {c.name: c.text for c in ledger.login({"out0": ledger.Outcomes(zero), "out1": ledger.Outcomes(one)},
                                                   metrics)}
    assert claims["log-in, BC does not compose"] == "from the base: BC 0 of 30 logged-out starts, 100 logged in, " \
                                                    "100 on log-in"
    assert claims["log-in, 0 logged-out demonstration(s)"].startswith(
        "with no logged-out demonstration: BC 0 of 30, M-GRPO composes in 0 of 5 seeds (0.0, 0.0, 0.0, 0.0, 0.0; "
        "RL - BC +0.0, +0.0, +0.0, +0.0, +0.0 paired): does not reproduce; logged-out rollouts succeed in 0 of 5 runs")
    assert claims["log-in, 0 logged-out demonstration(s)"].endswith("succeed 0 of 120 at T = 0.5")
    assert claims["log-in, 1 logged-out demonstration(s)"].startswith(
        "with one: BC 3 of 30, M-GRPO composes in 4 of 5 seeds (6.7, 100.0, 100.0, 100.0, 100.0; "
        "RL - BC -3.3, +90.0, +90.0, +90.0, +90.0 paired): reproduces; logged-out rollouts succeed in 4 of 5 runs")
    # one condition kept before the other (LOGIN_OUT=1): its row alone
    alone = {c.name: c.text for c in ledger.login({"out1": ledger.Outcomes(one)}, metrics)}
    assert alone == {"log-in, 1 logged-out demonstration(s)": claims["log-in, 1 logged-out demonstration(s)"]}
