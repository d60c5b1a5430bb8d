"""experiments/ledger.py (issues 87, 101): every number the docs print that has committed per-page outcomes or run
metrics behind it is re-derived from experiments/evidence/ alone and found written as it comes out; each claimed
number edited in turn fails the check, and no number of the README's findings or results.md's findings table is left
unclaimed."""
import re
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


#: A number as the mutation test reads one: a run of digits with its decimal point or thousands' comma ("8.2",
#: "2,048", "0"), not glued to a letter, digit, point or underscore (R1-Zero's 1, a hash's or a file name's digits
#: are not numbers). Its sign is outside it: editing the last digit is the edit tried.
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?!\w)")


def spans(cs, texts):
    """Where each claim is written in its doc's flat text: doc -> [(start, end)]."""
    out = {}
    for c in cs:
        at = texts[c.doc].find(ledger.flat(c.text))
        assert at >= 0, c.name
        out.setdefault(c.doc, []).append((at, at + len(ledger.flat(c.text))))
    return out


def claimed(start, end, doc_spans):
    """Whether the text from ``start`` to ``end`` lies inside one of ``doc_spans``."""
    return any(a <= start and end <= b for a, b in doc_spans)


def test_every_claimed_number_edited_fails_the_check():
    """A claimed number is every number (NUMBER) that lies inside the text of a claim where its doc holds it: the
    figures the evidence gives and the words around them the claim fixes (a budget, a seed list, a page count). Each
    is edited in turn (its last digit + 1, in memory, the docs untouched) and the check must fail: no claimed number
    can change and pass. Each claim stands once in its doc (a second copy would go unchecked), but in
    docs/history.md, whose record repeats a table sitting by sitting, so that one copy of it is checked and the
    test edits the other docs only."""
    cs = [c for c in ledger.claims() if c.doc != "docs/history.md"]
    texts = ledger.docs(cs)
    assert [c.name for c in cs if texts[c.doc].count(ledger.flat(c.text)) != 1] == []
    by_doc = spans(cs, texts)
    assert set(by_doc) == {"README.md", "docs/results.md", "docs/training.md"}
    tried, passed = 0, []
    for doc, doc_spans in by_doc.items():
        mine = [c for c in cs if c.doc == doc]
        ends = sorted({m.end() for m in NUMBER.finditer(texts[doc]) if claimed(*m.span(), doc_spans)})
        for end in ends:
            text = texts[doc]
            edited = text[:end - 1] + str((int(text[end - 1]) + 1) % 10) + text[end:]
            tried += 1
            if all(found for _, found in ledger.written(mine, {doc: edited})):
                passed.append(f"{doc}: ...{text[max(0, end - 40):end + 10]}...")
    assert tried >= 800 and passed == []


#: Numbers in the README's findings bullets and in the "ours" column of docs/results.md's findings table that no
#: claim covers and need none, each with why: identifiers (an issue's number, a date, a link's target) and the
#: paper's own figures.
NOT_OURS = (re.compile(r"issue \d+"), re.compile(r"\d{4}-\d{2}-\d{2}"), re.compile(r"\]\([^)]*\)"),
            re.compile(r"the paper: \+13\.9"))


def unclaimed(text, region, doc_spans):
    """The numbers of ``region`` (a part of the flat ``text``, found once in it) outside every claim and NOT_OURS."""
    assert text.count(region) == 1, region[:80]
    at = text.index(region)
    exempt = [(at + m.start(), at + m.end()) for pattern in NOT_OURS for m in pattern.finditer(region)]
    return [region[max(0, m.start() - 30):m.end() + 10] for m in NUMBER.finditer(region)
            if not claimed(at + m.start(), at + m.end(), doc_spans + exempt)]


def test_no_finding_number_goes_unclaimed():
    """Every number of the README's findings (the bullets under "What `make demo` shows") and of the "ours" column of
    docs/results.md's findings table is claimed (re-derived by the ledger, so the test above edits it) or is an
    identifier or the paper's figure (NOT_OURS): a number written there without evidence behind it fails here; it
    belongs in docs/history.md, with its run."""
    cs = ledger.claims()
    texts = ledger.docs(cs)
    by_doc = spans(cs, texts)
    readme = texts["README.md"]
    start = readme.index("What it shows, and what the miniature shows besides")
    bullets = readme[start:readme.index("What was tried and did not work", start)]
    assert bullets.count(" - ") >= 4
    assert unclaimed(readme, bullets, by_doc["README.md"]) == []
    raw = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    table = raw.split("## The paper's findings in miniature", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines()
            if line.startswith("| ") and not line.startswith(("| finding", "| ---"))]
    assert len(rows) >= 8
    ours = [ledger.flat(row.split(" | ")[2]) for row in rows]
    assert [u for cell in ours for u in unclaimed(texts["docs/results.md"], cell, by_doc["docs/results.md"])] == []


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
    assert claims["the recipe's seeds, README"] == (
        "on 40 fresh pages (issue 87, `experiments/findings_fresh.sh`): RL - BC +20.0, +20.0, +20.0, +20.0, +20.0 "
        "(mean +20.0, 95% interval +20.0 to +20.0), and RL - the filtered BC (BC 40.0, filtered 50.0) +10.0, +10.0, "
        "+10.0, +10.0, +10.0 (mean +10.0): above the practitioner's fix, BC on the log filtered to its successes, in "
        "every seed; greedy, RL differs from BC there (mean +20.0)")
    # the test-time line names each range with the models it covers
    assert claims["fresh pages, test-time interactions, README"] == (
        "on 40 fresh pages (issue 87) more interactions at test time give more success (12 against 2: the base, BC "
        "and BC + M-GRPO +25.0 to +77.5 points, R1-Zero +75.0 to +85.0, the filtered BC +62.5, every model above 0 "
        "at >= 2 SE)")
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
