"""The table of `make demo-findings` (scripts/demo_findings.sh): the paper's other findings from the pretrained base,
in seeds, read from its stages' evaluations into one page, ``<out>/findings.md``, each row against the rule its
plan fixed before any run (docs/history.md, "Issue 70: the paper's other findings from the base, in seeds").

Every difference is paired by page (the held-out pages, 50 per task), at T = 1 (2 samples per page, common random
numbers: the paper's decoding) and greedy; a row measured in seeds gives each seed's difference and their mean with
a 95% t-interval from the seeds' spread. A stage not run yet is left out (its row says so). Make demo's own run
(``--demo``) is seed 0 of the reference rows.

    .venv/bin/python scripts/findings_table.py --out runs/findings --demo runs/demo

A run's directories need not outlive the machine it ran on: ``--save-outcomes FILE`` keeps what the model rows
pair (each episode's page, sample, decoding, success and interactions; make demo's evaluation settings) in a small
gzipped file to commit, and ``--outcomes FILE`` reads it back beside the directories (a model evaluated in a
directory wins), so a stage run later, elsewhere, is paired with the reference rows of an earlier run.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from eval_stats import across_seeds, paired, read_outcomes, solved_within, write_outcomes  # noqa: E402
from env import parse_action  # noqa: E402

SEEDS = (0, 1, 2)
DECODINGS = ("T = 1", "greedy")


def load(path: Path) -> list[dict]:
    """The episodes of one evaluation directory, [] where it has not run (or not finished: no results.json)."""
    if not (path / "results.json").is_file():
        return []
    return [json.loads(line) for line in (path / "trajectories.jsonl").read_text().splitlines()]


class Runs:
    """Every evaluated model of one token budget, by name: ``runs[name]`` is its episodes (all decodings)."""

    def __init__(self):
        self.by_name: dict[str, list[dict]] = {}

    def add(self, path: Path, rename: dict[str, str] | None = None) -> None:
        for r in load(path):
            name = (rename or {}).get(r["run"], r["run"])
            self.by_name.setdefault(name, []).append({**r, "run": name})

    def add_outcomes(self, rows: list[dict]) -> None:
        """Episodes saved by --save-outcomes, of the models no directory gave."""
        loaded = set(self.by_name)
        for r in rows:
            if r["run"] not in loaded:
                self.by_name.setdefault(r["run"], []).append(r)

    def has(self, *names: str) -> bool:
        return all(n in self.by_name for n in names)

    def diff(self, a: str, b: str, decoding: str) -> dict[str, float]:
        """a - b paired by page: {"diff", "stderr", "n"} in points."""
        recs = [r for n in (a, b) for r in self.by_name[n] if r["decoding"] == decoding]
        d = paired(recs, [b, a])[f"{a} - {b}"]
        return {"diff": 100 * d["diff"], "stderr": 100 * d["stderr"], "n": d["n"]}

    def rate(self, name: str, decoding: str) -> float:
        recs = [r for r in self.by_name[name] if r["decoding"] == decoding]
        return 100 * sum(r["success"] for r in recs) / len(recs)

    def interactions(self, name: str, decoding: str) -> float:
        recs = [r for r in self.by_name[name] if r["decoding"] == decoding]
        return sum(r["num_steps"] for r in recs) / len(recs)


def seeds_line(values: list[float]) -> str:
    """"+1.2, -0.4, +3.0; mean +1.3 [95%: -2.1, +4.6]" (the interval from the seeds' spread)."""
    each = ", ".join(f"{v:+.1f}" for v in values)
    if len(values) < 2:
        return each
    m, _, half = across_seeds(values)
    return f"{each}; mean {m:+.1f} [95%: {m - half:+.1f}, {m + half:+.1f}]"


def excludes_zero(values: list[float], sign: int) -> bool:
    """Whether the 95% interval of the seeds' mean lies on the ``sign`` side of 0."""
    if len(values) < 2:
        return False
    m, _, half = across_seeds(values)
    return sign * (m - sign * half) > 0


def ref_rl(seed: int) -> str:
    return f"rl-s{seed}"


def reference(runs: Runs) -> list[str]:
    lines = ["## Reference rows: base, BC and BC + M-GRPO (make demo's recipe)", ""]
    seeds = [s for s in SEEDS if runs.has(ref_rl(s))]
    for dec in DECODINGS:
        lines.append(f"- {dec}: base {runs.rate('base', dec):.1f}, BC {runs.rate('bc', dec):.1f}, BC + M-GRPO "
                     + ", ".join(f"s{s} {runs.rate(ref_rl(s), dec):.1f}" for s in seeds)
                     + f"; RL - BC by seed {seeds_line([runs.diff(ref_rl(s), 'bc', dec)['diff'] for s in seeds])}")
    return lines + [""]


def r1zero(runs: Runs) -> list[str]:
    lines = ["## R1-Zero: M-GRPO from the base, no BC (paper: far below BC + M-GRPO, near the base)", ""]
    seeds = [s for s in SEEDS if runs.has(f"r1zero-s{s}", ref_rl(s))]
    if not seeds:
        return lines + ["not run yet (`FINDINGS=r1zero make demo-findings`)", ""]
    for dec in DECODINGS:
        vs_rl = [runs.diff(f"r1zero-s{s}", ref_rl(s), dec)["diff"] for s in seeds]
        vs_base = [runs.diff(f"r1zero-s{s}", "base", dec)["diff"] for s in seeds]
        lines.append(f"- {dec}: R1-Zero " + ", ".join(f"s{s} {runs.rate(f'r1zero-s{s}', dec):.1f}" for s in seeds)
                     + f"; R1-Zero - (BC + M-GRPO) by seed {seeds_line(vs_rl)}; R1-Zero - base {seeds_line(vs_base)}"
                     + (" (reproduces)" if dec == "T = 1" and excludes_zero(vs_rl, -1) else ""))
    return lines + [""]


def cot(runs: Runs, cots: dict[int, Runs]) -> list[str]:
    """R1-CoT at each budget of new tokens a turn it ran at (``cots[tokens]``: its evaluations there)."""
    head = "## R1-CoT: long thoughts in BC, then M-GRPO{} (paper: BC 24.5 vs 20.0, RL +5.8 vs +13.9)"
    lines = []
    for tokens, at in sorted(cots.items()):
        if not at.has("bc", "cot-bc"):
            continue
        lines += [head.format(f", at {tokens} new tokens a turn"), ""]
        seeds = [s for s in SEEDS if at.has(f"cot-rl-s{s}") and runs.has(ref_rl(s))]
        for dec in DECODINGS:
            a = at.diff("cot-bc", "bc", dec)
            line = (f"- {dec}: (a) CoT BC {at.rate('cot-bc', dec):.1f} - BC {at.rate('bc', dec):.1f} = "
                    f"{a['diff']:+.1f} +- {a['stderr']:.1f} (n {a['n']})"
                    + (" (reproduces)" if dec == "T = 1" and a["diff"] >= 2 * a["stderr"] > 0 else ""))
            if seeds:
                gain = [at.diff(f"cot-rl-s{s}", "cot-bc", dec)["diff"] for s in seeds]
                less = [g - runs.diff(ref_rl(s), "bc", dec)["diff"] for g, s in zip(gain, seeds)]
                line += (f"; (b) CoT RL - CoT BC by seed {seeds_line(gain)}; minus (RL - BC) {seeds_line(less)}"
                         + (" (reproduces)" if dec == "T = 1" and excludes_zero(less, -1) else ""))
            lines.append(line)
        lines.append("")
    return lines or [head.format(""), "", "not run yet (`FINDINGS=cot make demo-findings`)", ""]


def plain(runs: Runs) -> list[str]:
    lines = ["## The thinking format: <think> against the bare action (paper, Table 3: thinking higher, with more "
             "interactions)", ""]
    seeds = [s for s in SEEDS if runs.has(f"plain-rl-s{s}", ref_rl(s))]
    if not runs.has("plain-bc"):
        return lines + ["not run yet (`FINDINGS=plain make demo-findings`)", ""]
    for dec in DECODINGS:
        b = runs.diff("bc", "plain-bc", dec)
        line = (f"- {dec}: BC - plain BC {b['diff']:+.1f} +- {b['stderr']:.1f}; interactions BC "
                f"{runs.interactions('bc', dec):.2f}, plain BC {runs.interactions('plain-bc', dec):.2f}")
        if seeds:
            d = [runs.diff(ref_rl(s), f"plain-rl-s{s}", dec)["diff"] for s in seeds]
            more = [runs.interactions(ref_rl(s), dec) - runs.interactions(f"plain-rl-s{s}", dec) for s in seeds]
            line += (f"; RL - plain RL by seed {seeds_line(d)}; interactions RL - plain RL by seed "
                     + ", ".join(f"{m:+.2f}" for m in more)
                     + (" (reproduces)" if dec == "T = 1" and excludes_zero(d, 1) and min(more) > 0 else ""))
        lines.append(line)
    return lines + [""]


def prefixes_agree(sweep: list[dict], alone: list[dict], budget: int) -> tuple[int, int]:
    """(episodes of the budget-``budget`` run that are the first interactions of the sweep's, episodes)."""
    key = lambda r: (r["task"], r["seed"], r["decoding"], r["sample"])   # noqa: E731
    long = {key(r): [st["response"] for st in r["steps"]][:budget] for r in sweep}
    same = sum(long.get(key(r)) == [st["response"] for st in r["steps"]] for r in alone)
    return same, len(alone)


def tts(out: Path, demo_bc: list[dict], demo_budget: int) -> list[str]:
    """``demo_bc``: make demo's own BC episodes (read by main), run at its budget ``demo_budget``."""
    lines = ["## Test-time interactions (paper, Fig. 5: success rises with the budget)", ""]
    names = ["base", "bc"] + [ref_rl(s) for s in SEEDS]
    loaded = {p: load(p) for p in sorted((out / "tts").glob("*")) if not p.name.startswith("bc-at-")}   # the sweep
    runs = [p for p, episodes in loaded.items() if episodes]
    recs = [r for p in runs for r in loaded[p]]
    sweeps = {n: [r for r in recs if r["run"] == n] for n in names}
    if not sweeps["bc"]:
        return lines + ["not run yet (`FINDINGS=tts make demo-findings`)", ""]
    budgets = json.loads((runs[0] / "results.json").read_text())["budgets"]   # the sweep's (2, ..., 12)
    lo, hi = str(budgets[0]), str(budgets[-1])
    lines += ["| model | decoding | " + " | ".join(f"<= {k}" for k in budgets) + f" | {hi} - {lo} (paired) |",
              "|---|---|" + "---:|" * (len(budgets) + 1)]
    for name in (n for n in names if sweeps[n]):
        for dec in DECODINGS:
            recs = [r for r in sweeps[name] if r["decoding"] == dec]
            rates = [100 * sum(solved_within(r, k) for r in recs) / len(recs) for k in budgets]
            at = [{**r, "run": k, "success": solved_within(r, int(k))} for k in (lo, hi) for r in recs]
            d = paired(at, [lo, hi])[f"{hi} - {lo}"]            # the largest budget against the smallest, by page
            lines.append(f"| {name} | {dec} | " + " | ".join(f"{x:.1f}" for x in rates)
                         + f" | {100 * d['diff']:+.1f} +- {100 * d['stderr']:.1f} |")
    bc_runs = {int(p.name.split("-")[-1]): [r for r in load(p) if r["run"] == "bc"]
               for p in (out / "tts").glob("bc-at-*")}
    bc_runs[demo_budget] = demo_bc                   # make demo's own BC, at make demo's budget (6)
    checks = [f"{k}: {s} of {n}" for k, recs in sorted(bc_runs.items()) if recs
              for s, n in [prefixes_agree(sweeps["bc"], recs, k)]]
    if checks:
        lines += ["", f"BC run alone at each budget, its episodes equal to the budget-{hi} run's first interactions: "
                  + "; ".join(checks)]
    return lines + [""]


def login_progress(episodes: list[dict]) -> dict[str, int]:
    """How far logged-out episodes got toward the composition: typed the intent's username, typed its password,
    saw a page signed in (logged in), succeeded; each a count of episodes."""
    counts = dict.fromkeys(("episodes", "typed username", "typed password", "logged in", "succeeded"), 0)
    for r in episodes:
        m = re.search(r"username is (\S+?) and the password is (\S+?)\.?$", r["intent"])
        typed = {a.argument for s in r["steps"] if s.get("action")      # the recorded actions parse (format_action)
                 for a in [parse_action(s["action"])] if a.name == "Type"}
        counts["episodes"] += 1
        counts["typed username"] += bool(m) and m.group(1) in typed
        counts["typed password"] += bool(m) and m.group(2) in typed
        counts["logged in"] += any("Signed in as" in (s.get("observation") or "") for s in r["steps"])   # its header
        counts["succeeded"] += bool(r["success"])
    return counts


def progress_line(label: str, episodes: list[dict]) -> str:
    c = login_progress(episodes)
    return f"- {label}: " + ", ".join(f"{k} {v}" for k, v in c.items())


def login(out: Path) -> list[str]:
    """The log-in stage's table, for the paper's example (out/login) and each data condition (out/login-outK)."""
    lines = []
    for root in [out / "login"] + sorted(out.glob("login-out*")):
        k = root.name.removeprefix("login-out") if root.name != "login" else "0"
        lines += login_runs(root, k)
    return lines


def login_runs(root: Path, k: str) -> list[str]:
    """One condition's table (k logged-out demonstrations in BC's data): each seed's held-out logged-out success of
    BC and BC + M-GRPO, paired, and its rollouts; then how far BC's logged-out episodes get."""
    data = ("BC on logged-in starts" if k == "0" else
            f"BC on logged-in starts and {k} logged-out demonstration{'s' * (k != '1')} (the data condition)")
    lines = [f"## The log-in argument: {data}, on-policy M-GRPO on mixed starts (make demo-suite from the base)", ""]
    rows = []
    for s in range(5):
        path = root / f"s{s}" / "eval" / "results.json"
        if not path.is_file():
            continue
        runs = json.loads(path.read_text())["runs"]
        cols = {n: runs[n]["columns"] for n in ("bc", "rl")}
        out_col = next(c for c in cols["rl"] if c.endswith("@out"))
        # the rollouts of logged-out starts, step by step (train_mgrpo's rollout/success/ID@out)
        metrics = root / f"s{s}" / "rl" / "metrics.jsonl"
        steps = [json.loads(line) for line in metrics.read_text().splitlines()]
        key = next((name for m in steps for name in m if name.startswith("rollout/success/")
                    and name.endswith("@out")), None)
        outs = [(m["step"], m[key]) for m in steps if key in m]
        first = next((step for step, rate in outs if rate > 0), None)
        d = paired([r for r in load(root / f"s{s}" / "eval") if r["column"] == out_col], ["bc", "rl"])["rl - bc"]
        rows.append((s, 100 * cols["bc"][out_col]["success_rate"], 100 * cols["rl"][out_col]["success_rate"],
                     f"{100 * d['diff']:+.1f} +- {100 * d['stderr']:.1f}", first,
                     100 * sum(rate for _, rate in outs) / max(len(outs), 1)))
    if not rows:
        flag = "" if k == "0" else f"FINDINGS_LOGIN_OUT_DEMOS={k} "
        return lines + [f"not run yet (`{flag}FINDINGS=login make demo-findings`)", ""]
    lines += ["| seed | BC, logged out | BC + M-GRPO, logged out | RL - BC, logged out (paired) | composed (>= 10%) "
              "| first step a logged-out rollout succeeds | logged-out rollouts' success, mean over steps |",
              "|---:|---:|---:|---:|---|---:|---:|"]
    lines += [f"| {s} | {b:.1f} | {r:.1f} | {d} | {'yes' if r >= 10 else 'no'} | "
              f"{first if first is not None else 'none'} | {roll:.1f} |" for s, b, r, d, first, roll in rows]
    lines += ["", f"composed in {sum(r[2] >= 10 for r in rows)} of {len(rows)} seeds (reproduces: >= 3 of 5)", "",
              "How far the logged-out episodes get (counts of episodes):"]
    first = root / f"s{rows[0][0]}" / "eval"
    lines.append(progress_line(f"BC, greedy, held-out ({first})",
                               [r for r in load(first) if r["run"] == "bc" and r["column"].endswith("@out")]))
    for explore in sorted(root.glob("explore*")):   # BC sampled on validation pages (demo_findings.sh's login_stage)
        if (explore / "results.json").is_file():
            args = json.loads((explore / "results.json").read_text())["args"]
            lines.append(progress_line(f"BC sampled at T = {args['temperature']}, {args['samples']} samples on "
                                       f"each of {args['episodes']} validation pages ({explore})", load(explore)))
    return lines + [""]


def save_outcomes(path: Path, demo_results: dict, runs: Runs, cots: dict[int, Runs]) -> None:
    """Every model episode of the table, reduced to what the model rows pair, with make demo's settings first: the
    set "test" at make demo's budget, "test<N>" R1-CoT's at N new tokens a turn."""
    write_outcomes(path, ({**r, "set": tokens}
                          for tokens, rs in [("test", runs)] + [(f"test{n}", at) for n, at in sorted(cots.items())]
                          for recs in rs.by_name.values() for r in recs),
                   header={"demo": {k: demo_results[k] for k in ("args", "budgets")}})


def read_saved(path: Path) -> tuple[dict, dict[str, list[dict]]]:
    """(make demo's settings, {"test": episodes, "test<N>": episodes, ...}) of a --save-outcomes file."""
    header, rows = read_outcomes(path)
    sets: dict[str, list[dict]] = collections.defaultdict(list, test=[])
    for r in rows:
        sets[r.pop("set")].append(r)
    return header["demo"], sets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/findings", help="make demo-findings' output (FINDINGS_OUT)")
    ap.add_argument("--demo", default="runs/demo", help="make demo's run, seed 0 of the reference rows (DEMO_OUT)")
    ap.add_argument("--outcomes", type=Path, help="episodes saved by --save-outcomes, read beside the directories")
    ap.add_argument("--save-outcomes", type=Path, help="write the model rows' episodes here (.jsonl.gz)")
    args = ap.parse_args()
    out, demo = Path(args.out), Path(args.demo)
    runs, cots = Runs(), collections.defaultdict(Runs)    # cots[N]: R1-CoT's stage at N new tokens ($OUT/cotN)
    runs.add(demo / "eval", {"rl": ref_rl(0)})
    demo_bc = runs.by_name.get("bc", [])       # make demo's BC episodes with their steps (the file's rows have none)
    for path in sorted((out / "test").glob("*")):
        runs.add(path)
    for path in sorted(out.glob("cot[0-9]*/test/*")):
        cots[int(path.parent.parent.name[3:])].add(path)
    demo_results = (json.loads((demo / "eval" / "results.json").read_text())      # make demo's evaluation
                    if (demo / "eval" / "results.json").is_file() else None)
    if args.outcomes:
        saved, sets = read_saved(args.outcomes)
        runs.add_outcomes(sets.pop("test"))
        for name, rows in sets.items():
            cots[int(name[4:])].add_outcomes(rows)
        demo_results = demo_results or saved
    have_demo = bool(demo_results) and runs.has("base", "bc", ref_rl(0))
    if args.save_outcomes and not have_demo:
        raise SystemExit(f"--save-outcomes: no evaluation of make demo in {demo / 'eval'} to save beside the others")
    page = ["# The paper's other findings from the base, in seeds (issue 70)", ""]
    if have_demo:
        if args.save_outcomes:
            save_outcomes(args.save_outcomes, demo_results, runs, cots)
        args_of = demo_results["args"]
        every = [runs, *cots.values()]
        counts = collections.Counter(r["decoding"] for rs in every for recs in rs.by_name.values() for r in recs)
        page += [f"From {out} and {demo} ({sum(len(rs.by_name) for rs in every)} evaluated models, "
                 f"{sum(counts.values())} episodes at {args_of['max_new_tokens']} new tokens, R1-CoT's at more); "
                 f"differences in points, paired by page ({args_of['episodes']} held-out pages per task).", ""]
        page += reference(runs) + r1zero(runs) + cot(runs, cots) + plain(runs)
        page += tts(out, demo_bc, max(demo_results["budgets"]))
    else:   # the log-in stage alone needs no make demo (it runs on the site suite)
        page += [f"No evaluation of make demo in {demo / 'eval'}{' or ' + str(args.outcomes) if args.outcomes else ''}"
                 ": the rows on its tasks wait for it (make demo, or FINDINGS=ref make demo-findings).", ""]
    page += login(out)
    (out / "findings.md").write_text("\n".join(page))
    print("\n".join(page))


if __name__ == "__main__":
    main()
