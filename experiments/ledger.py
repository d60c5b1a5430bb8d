"""Issue 87: every number the findings print that has per-page outcomes behind it, re-derived from the committed
evidence alone (``experiments/evidence/*_outcomes.jsonl.gz``: run, task, page, sample, decoding, success,
interactions; issue 57's ``*_test.json``; the runs' ``*_metrics.jsonl``), and checked against the text of README.md
and docs/.

Each claim computes its numbers (success rates, SEs clustered by page, paired differences, means over seeds with
their 95% t-interval: eval_stats.py's) and writes them the way its doc does; ``--check`` exits 1 naming every claim
whose text the doc does not hold (a number edited by hand, or evidence that changed). Docs are compared with their
whitespace and bold marks collapsed, so a claim may span a line break. The findings without committed per-page
outcomes are listed at the end as such (docs/results.md marks them; issue 101 moved those of the README's findings
and results.md's findings table to docs/history.md). tests/test_ledger.py runs the check, edits each number a claim
covers in turn (each edit must fail it) and finds every number of those findings claimed.

    .venv/bin/python experiments/ledger.py            # every claim, its numbers and where it is written
    .venv/bin/python experiments/ledger.py --check    # exit 1 unless every doc holds its claims
    .venv/bin/python experiments/ledger.py --keep FILE DIR ...   # keep finished evaluations' episodes in FILE
        [--set SET] [--runs OLD=NEW,...]                         # ... as set SET, only these runs, renamed
    .venv/bin/python experiments/ledger.py --has FILE [RUN] [--set SET]   # exit 0 if FILE holds RUN's episodes

``--keep`` is how evidence is made: the episodes of each finished evaluation (an eval.py ``--out`` with its
results.json) reduced to eval_stats.OUTCOME_KEYS and merged into FILE, a run evaluated again replacing its old
episodes and every other run kept (a sitting whose runs/ holds only its own evaluations loses none of the earlier).
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sys
from pathlib import Path
from typing import Iterator, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from eval_stats import (across_seeds, page_values, paired, read_outcomes, solved_within, stderr,  # noqa: E402
                        write_outcomes)
from exchange_figure import TASKS, crossing  # noqa: E402  (experiments/, this file's directory)

EVIDENCE = ROOT / "experiments" / "evidence"
T1, GREEDY = "T = 1", "greedy"


class Claim(NamedTuple):
    name: str      # what it says
    doc: str       # where, relative to the repository root
    text: str      # the text that doc must hold, numbers included


class Outcomes:
    """One evaluation set's episodes by run; rates and differences in points."""

    def __init__(self, rows: list[dict]) -> None:
        self.by_run: dict[str, list[dict]] = collections.defaultdict(list)
        for r in rows:
            self.by_run[r["run"]].append(r)

    def episodes(self, run: str, decoding: str) -> list[dict]:
        if run not in self.by_run:
            raise KeyError(f"no run {run!r} in this evidence (it has {sorted(self.by_run)})")
        return [r for r in self.by_run[run] if r["decoding"] == decoding]

    def rate(self, run: str, decoding: str = T1, k: int | None = None) -> tuple[float, float]:
        """(success rate, or pass@k, and its SE clustered by page), in points."""
        recs = self.episodes(run, decoding)
        pages = page_values(recs, k)
        return 100 * sum(pages.values()) / len(pages), 100 * stderr(recs, k)

    def task_rates(self, run: str, decoding: str = T1) -> dict[str, float]:
        by_task = collections.defaultdict(list)
        for r in self.episodes(run, decoding):
            by_task[r["task"].split("/")[-1]].append(r["success"])
        return {t: 100 * sum(v) / len(v) for t, v in by_task.items()}

    def diff(self, a: str, b: str, decoding: str = T1, k: int | None = None) -> tuple[float, float]:
        """a - b paired by page: (difference, its SE), in points."""
        d = paired(self.episodes(a, decoding) + self.episodes(b, decoding), [b, a], k)[f"{a} - {b}"]
        return 100 * d["diff"], 100 * d["stderr"]

    def interactions(self, run: str, decoding: str = T1) -> float:
        recs = self.episodes(run, decoding)
        return sum(r["num_steps"] for r in recs) / len(recs)


def load(name: str) -> dict[str, Outcomes]:
    """An evidence file's evaluation sets (its rows' "set", "test" where they name none)."""
    sets: dict[str, list[dict]] = collections.defaultdict(list)
    for row in read_outcomes(EVIDENCE / name)[1]:
        sets[row.pop("set", "test")].append(row)
    return {s: Outcomes(rows) for s, rows in sets.items()}


def load_json(name: str) -> Outcomes:
    """An issue-57 evidence file (quality_evidence.py's): each run's outcomes keyed "task/page|decoding|sample"."""
    rows = []
    for run, r in json.loads((EVIDENCE / name).read_text())["runs"].items():
        for key, success in r["outcomes"].items():
            page, decoding, sample = key.split("|")
            task, seed = page.rsplit("/", 1)
            rows.append({"run": run, "task": task, "seed": int(seed), "sample": int(sample), "decoding": decoding,
                         "success": bool(success)})
    return Outcomes(rows)


def load_metrics(path: Path) -> list[dict]:
    """A run's committed metrics.jsonl: one dict a logged step."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def rollout_mean(metrics: list[dict], name: str, steps: slice = slice(None)) -> float:
    """A rollout metric's mean over the logged steps ``steps`` of a run."""
    values = [r[name] for r in metrics if name in r][steps]
    return sum(values) / len(values)


def tokens_a_turn(metrics: list[dict], steps: slice = slice(None)) -> float:
    """A run's rollouts' response tokens a turn, over its logged steps ``steps``."""
    rows = [r for r in metrics if "rollout/response_tokens" in r][steps]
    return sum(r["rollout/response_tokens"] for r in rows) / sum(r["rollout/num_turns"] for r in rows)


def pm(x: tuple[float, float]) -> str:
    """"+8.2 +- 1.7"."""
    return f"{x[0]:+.1f} +- {x[1]:.1f}"


def seeds(values: list[float]) -> str:
    return ", ".join(f"{v:+.1f}" for v in values)


def interval(values: list[float], label: str = "95%: ") -> str:
    """"+7.3 [95%: +3.9, +10.6]": the mean over seeds with its t-interval (``label`` "": "+7.3 [+3.9, +10.6]")."""
    m, _, h = across_seeds(values)
    return f"{m:+.1f} [{label}{m - h:+.1f}, {m + h:+.1f}]"


def seed_pairs(ev: Outcomes, runs: list[str], vs: str) -> str:
    """Two seeds' cells as issue 57's tables write them: "32.9 / 40.6 | 2.0 | +4.2 +- 1.7 / +12.0 +- 1.9 |
    38.0 / 46.8 |" (the SE column the first seed's)."""
    return (" / ".join(f"{ev.rate(r)[0]:.1f}" for r in runs) + f" | {ev.rate(runs[0])[1]:.1f} | "
            + " / ".join(pm(ev.diff(r, vs)) for r in runs) + " | "
            + " / ".join(f"{ev.rate(r, GREEDY)[0]:.1f}" for r in runs) + " |")


# ---- the claims, by the evidence they rest on ----

def make_demo(ev: Outcomes, metrics: list[dict]) -> Iterator[Claim]:
    """make demo's table (ee814c1, 2026-11-30; the same weights at 7e6ee60, whose evaluation is kept):
    README.md's and docs/results.md's, and the README's reading of it (``metrics``: its M-GRPO run's steps)."""
    labels = {"base": "base (pretrained, no BC)", "bc": "BC on the demonstrator's log",
              "rl": "BC + M-GRPO (2,048 trajectories, seed 0)"}
    short = {"base": "base", "bc": "BC on the log", "rl": "BC + M-GRPO"}
    for run, label in labels.items():
        tasks = " | ".join(f"{v:.1f}" for v in ev.task_rates(run).values())
        (t1, se), (p2, p2se), (g, gse) = ev.rate(run), ev.rate(run, k=2), ev.rate(run, GREEDY)
        yield Claim(f"make demo, {run}, README", "README.md",
                    f"| {label} | {tasks} | {t1:.1f} | {se:.1f} | {p2:.1f} | {g:.1f} | {gse:.1f} |")
        yield Claim(f"make demo, {run}, results", "docs/results.md",
                    f"| {short[run]} | {t1:.1f} | {se:.1f} | {p2:.1f} | {p2se:.1f} | {g:.1f} | {gse:.1f} | "
                    f"{ev.interactions(run):.2f} |")
    for a, b, label in (("bc", "base", "BC - base"), ("rl", "bc", "RL - BC")):
        d, p, g = ev.diff(a, b), ev.diff(a, b, k=2), ev.diff(a, b, GREEDY)
        yield Claim(f"make demo, {label}", "docs/results.md",
                    f"{label} (paired, 400 pages) | {d[0]:+.1f} | {d[1]:.1f} | {p[0]:+.1f} | {p[1]:.1f} | "
                    f"{g[0]:+.1f} | {g[1]:.1f} |")
    d, p, g = ev.diff("rl", "bc"), ev.diff("rl", "bc", k=2), ev.diff("rl", "bc", GREEDY)
    yield Claim("make demo, RL - BC, README", "README.md",
                f"RL - BC, paired over 400 pages | | | | | | | | | {d[0]:+.1f} | {d[1]:.1f} | "
                f"{p[0]:+.1f} ({p[1]:.1f}) | "
                f"{g[0]:+.1f} | {g[1]:.1f} |")
    yield Claim("make demo's reading", "README.md",
                f"{pm(ev.diff('bc', 'base'))} and {pm(d)} points at T = 1 ({d[0] / d[1]:.1f} SE")
    first, last = (rollout_mean(metrics, "rollout/parse_fail_rate", steps) for steps in (slice(8), slice(-8, None)))
    yield Claim("make demo's rollouts, README", "README.md",
                f"its rollouts' unparsable turns fall from {100 * first:.1f}% in its first 8 steps to "
                f"{100 * last:.1f}% in its last 8")
    yield Claim("make demo's reading, BC", "docs/results.md",
                f"BC on flawed data lifts the base ({pm(ev.diff('bc', 'base'))} at T = 1")
    yield Claim("make demo's reading, RL", "docs/results.md",
                f"M-GRPO lifts that BC by {pm(d)} at T = 1 ({d[0] / d[1]:.1f} SE), {pm(g)} greedy")
    rates = {run: ev.task_rates(run) for run in ("base", "bc", "rl")}
    per_task = ", ".join(f"{t} " + " / ".join(f"{rates[r][t]:.0f}" for r in rates) for t in rates["base"])
    yield Claim("make demo, per task", "docs/results.md", f"Per task at T = 1 (base / BC / RL): {per_task}.")


def small(x: float) -> str:
    """A figure as the mismatch tables write it: 3.0e-3, 4.7e-13, 7.74."""
    return f"{x:.1e}".replace("e-0", "e-") if 0 < x < 1e-2 else f"{x:.3g}"


def mismatch_cells(metrics: str) -> str:
    """A run's mismatch over its steps from its committed metrics.jsonl: token KL k3 (mean of the steps), the
    largest |log ratio|, the mean share of tokens outside [0.5, 2], the KL to the start at the last step."""
    rows = [r for r in load_metrics(EVIDENCE / metrics) if "mismatch/kl_k3" in r]
    outside = sum(r["mismatch/ratio_outside"] for r in rows) / len(rows)
    return (f"{small(sum(r['mismatch/kl_k3'] for r in rows) / len(rows))} | "
            f"{small(max(r['mismatch/max_abs_log_ratio'] for r in rows))} | "
            f"{f'{100 * outside:.1f}%' if outside else '0'} | {rows[-1]['train/kl']:.2g} |")


def float32_run(seed: int) -> str:
    """The float32 arm's run of ``seed`` in issue 86's evidence: make demo's RL ("rl") is its seed 0."""
    return "rl" if seed == 0 else f"f32-s{seed}"


def engine_mismatch(ev: Outcomes, rows: dict[str, tuple[str, str]], seeds: bool) -> Iterator[Claim]:
    """Issue 86, item 5: each arm against the float32 arm of its seed, paired by page (``rows``: run -> its label
    and its metrics file; the float32 run of seed 0 is "rl", make demo's; with ``seeds`` the table has a seed
    column)."""
    for run, (label, metrics) in rows.items():
        seed = 0 if run == "rl" else int(run.rsplit("-s", 1)[1])
        f32 = float32_run(seed)
        (t1, _), (g, _) = ev.rate(run), ev.rate(run, GREEDY)
        vs, vs_g = ("", "") if run == f32 else (pm(ev.diff(run, f32)), pm(ev.diff(run, f32, GREEDY)))
        yield Claim(f"engine mismatch, {run}{' (reference BC)' if seeds else ''}", "docs/training.md",
                    f"| {label} |{f' {seed} |' if seeds else ''} {t1:.1f} | {vs} | {g:.1f} | {vs_g} | "
                    + mismatch_cells(metrics))


def mismatch_by_seed(arms: Outcomes) -> Iterator[Claim]:
    """Issue 86's rule over the seeds whose three arms are kept: bf16 without a correction against float32, TIS
    against no correction and against float32, each seed's paired difference and (two seeds or more) their mean's
    95% t-interval."""
    done = sorted(int(run.rsplit("-s", 1)[1]) for run in arms.by_run if run.startswith("bf16-tis-s"))
    f32 = [float32_run(s) for s in done]
    for dec, label in ((T1, "T = 1"), (GREEDY, "greedy")):
        none = [arms.diff(f"bf16-none-s{s}", f, dec)[0] for s, f in zip(done, f32)]
        tis = [arms.diff(f"bf16-tis-s{s}", f"bf16-none-s{s}", dec)[0] for s in done]
        tis_f32 = [arms.diff(f"bf16-tis-s{s}", f, dec)[0] for s, f in zip(done, f32)]
        mean = (lambda v: f" (mean {interval(v)})") if len(done) > 1 else (lambda v: "")
        text = (f"{label}, seeds {', '.join(map(str, done))}: bf16 - float32 {seeds(none)}{mean(none)}; "
                f"TIS - none {seeds(tis)}{mean(tis)}; TIS - float32 {seeds(tis_f32)}{mean(tis_f32)}")
        yield Claim(f"engine mismatch by seed, {label}", "docs/training.md", text)
        if dec == T1:
            yield Claim("engine mismatch by seed, results", "docs/results.md", text)


def findings(ev: dict[str, Outcomes], metrics: dict[str, list[dict]]) -> Iterator[Claim]:
    """docs/results.md's findings table, the rows whose episodes issue 70 kept (its 2026-11-30 run), with what the
    M-GRPO runs' committed metrics give (``metrics``: run -> its steps, by the run's name in the outcomes, "cot-rl-s0"
    at 192 tokens, "cot320-rl-s0" at 320)."""
    test = ev["test"]
    ref = {dec: [test.diff(f"rl-s{s}", "bc", dec)[0] for s in range(3)] for dec in (T1, GREEDY)}
    yield Claim("RL lifts BC, seeds 0-2", "docs/results.md",
                f"on the log, seeds 0-2: {seeds(ref[T1])} at T = 1 (mean {interval(ref[T1])}; "
                f"greedy {seeds(ref[GREEDY])}")
    yield Claim("RL lifts BC, seeds 0-2, README", "README.md", f"against {seeds(ref[T1])} at 192")
    # the thinking format: <think> against the bare action
    bc = test.diff("bc", "plain-bc")
    rl = {dec: [test.diff(f"rl-s{s}", f"plain-rl-s{s}", dec)[0] for s in range(3)] for dec in (T1, GREEDY)}
    rows = ("bc", "plain-bc", *(f"{p}rl-s{s}" for p in ("", "plain-") for s in range(3)))
    inter = [test.interactions(r) for r in rows]
    yield Claim("thinking format", "docs/results.md",
                f"BC - plain BC {pm(bc)} at T = 1; RL - plain RL by seed {seeds(rl[T1])} (mean {interval(rl[T1])}; "
                f"greedy {seeds(rl[GREEDY])}); interactions {min(inter):.1f}-{max(inter):.1f} in every row")
    m, _, h = across_seeds(rl[T1])
    yield Claim("thinking format, README", "README.md", f"({m:+.1f}, interval {m - h:+.1f} to {m + h:+.1f}")
    think, plain = ([tokens_a_turn(metrics[f"{p}rl-s{s}"]) for s in range(3)] for p in ("", "plain-"))
    yield Claim("thinking format, tokens a turn", "docs/results.md",
                f"in `<think>` tags or not ({min(think):.1f}-{max(think):.1f} against "
                f"{min(plain):.1f}-{max(plain):.1f} tokens a turn in the seeds' M-GRPO rollouts)")
    # R1-CoT at 320 and 192 new tokens a turn
    at320, at192 = ev["test320"], ev["test192"]
    start, start_g = at320.diff("cot-bc", "bc"), at320.diff("cot-bc", "bc", GREEDY)
    yield Claim("R1-CoT starts lower, 320", "docs/results.md",
                f"CoT BC {at320.rate('cot-bc')[0]:.1f} against BC {at320.rate('bc')[0]:.1f} at T = 1, {pm(start)} "
                f"(greedy {at320.rate('cot-bc', GREEDY)[0]:.1f} vs {at320.rate('bc', GREEDY)[0]:.1f}, {pm(start_g)}) "
                "at 320 new tokens a turn")
    zeros = [t for t, rate in at320.task_rates("cot-bc").items() if rate == 0]
    yield Claim("R1-CoT by task, 320", "docs/results.md",
                f"CoT BC at 320 scores 0 on {', '.join(zeros[:-1])} and {zeros[-1]}")
    yield Claim("R1-CoT starts lower, 192", "docs/results.md",
                f"at the plan's 192, which cut most of its responses, {at192.rate('cot-bc')[0]:.1f}, "
                f"{pm(at192.diff('cot-bc', 'bc'))}. Neither the budget "
                f"({start[0] - at192.diff('cot-bc', 'bc')[0]:+.1f}) nor twice the BC steps "
                f"(600: {pm(at192.diff('cot-bc600', 'cot-bc'))} at 192")
    yield Claim("R1-CoT, 600 steps", "docs/results.md", f"still {pm(at192.diff('cot-bc600', 'bc'))})")
    yield Claim("R1-CoT, README", "README.md",
                f"({at320.rate('cot-bc')[0]:.1f} against {at320.rate('bc')[0]:.1f} with every demonstration's length "
                f"in budget, and after twice the BC steps still {at192.diff('cot-bc600', 'bc')[0]:+.1f})")
    for tokens, at in ((192, at192), (320, at320)):
        gain = {dec: [at.diff(f"cot-rl-s{s}", "cot-bc", dec)[0] for s in range(3)] for dec in (T1, GREEDY)}
        less = {dec: [g - r for g, r in zip(gain[dec], ref[dec])] for dec in (T1, GREEDY)}
        if tokens == 192:
            m, _, h = across_seeds(less[T1])
            clear = "not clear" if m - h <= 0 <= m + h else "clear"
            fewer = "less in every seed" if all(x < 0 for x in less[T1]) else "not less in every seed"
            yield Claim("R1-CoT RL, 192", "docs/results.md",
                        f"M-GRPO at 192, seeds 0-2: CoT RL - CoT BC {seeds(gain[T1])} (greedy {seeds(gain[GREEDY])}) "
                        f"against RL - BC {seeds(ref[T1])}: {fewer} (mean {interval(less[T1])}: the plan's interval "
                        f"{clear} of 0)")
            yield Claim("R1-CoT RL, 192, README", "README.md",
                        f"({seeds(gain[T1])} against {seeds(ref[T1])} at 192 tokens, the mean's interval {clear} of 0")
            yield Claim("R1-CoT RL's rollouts, 192", "docs/results.md",
                        f"inside 192 tokens ({cot_rollouts([metrics[f'cot-rl-s{s}'] for s in range(3)])})")
        else:
            yield Claim("R1-CoT RL, 320", "docs/results.md",
                        f"at 320, seeds 0-2: {seeds(gain[T1])} (greedy {seeds(gain[GREEDY])}) against "
                        f"{seeds(ref[T1])}: minus {seeds(less[T1])}, mean {interval(less[T1])}")
            yield Claim("R1-CoT RL gains nothing, 320", "docs/results.md",
                        f"(mean {interval(gain[T1], '')}; greedy minus {interval(less[GREEDY], '')})")
            yield Claim("R1-CoT RL, 320, README", "README.md",
                        f"at 320, {seeds(gain[T1])}, less by {interval(less[T1], '')}")
            runs = [metrics[f"cot320-rl-s{s}"] for s in range(3)]
            steps = [[r for r in m if "rollout/success_rate" in r] for m in runs]
            solved = [round(GROUP * sum(r[f"rollout/success/miniwob/{t}"] for r in m for t in EMAIL_HARD))
                      for m in steps]
            yield Claim("R1-CoT RL's rollouts, 320", "docs/results.md",
                        f"({cot_rollouts(runs)}), and success stays; on the email reply and forward tasks "
                        f"{', '.join(map(str, solved))} of {GROUP * len(EMAIL_HARD) * len(steps[0])} rollouts succeed")
            yield Claim("R1-CoT without the penalty", "docs/results.md",
                        f"without it (seed 0) the turns stay as CoT BC's and success too "
                        f"({pm(at.diff('cot-rl-s0-nopenalty', 'cot-rl-s0'))} against the penalty)")


GROUP = 8        # make demo's M-GRPO rolls out one group of 8 on each task every step
EMAIL_HARD = ("email-inbox-reply", "email-inbox-forward-nl", "email-inbox-forward-nl-turk")


def cot_rollouts(runs: list[list[dict]]) -> str:
    """R1-CoT's M-GRPO seeds in their rollouts, the first 8 steps against the last 8: the unparsable turns and the
    tokens a turn, seed by seed."""
    ends = (slice(8), slice(-8, None))
    bad = ", ".join(" -> ".join(f"{100 * rollout_mean(m, 'rollout/parse_fail_rate', e):.1f}%" for e in ends)
                    for m in runs)
    tokens = ", ".join(" -> ".join(f"{tokens_a_turn(m, e):.0f}" for e in ends) for m in runs)
    return f"its rollouts, first 8 steps -> last 8: unparsable {bad}; {tokens} tokens a turn"


def quality(ev: Outcomes) -> Iterator[Claim]:
    """Issue 57's held-out table: BC on a demonstrator's mistakes or detours, and M-GRPO from it (docs/results.md)."""
    def cells(run: str, vs: str | None) -> str:
        t1, se = ev.rate(run)
        return f"| {t1:.1f} | {se:.1f} | {pm(ev.diff(run, vs)) if vs else ''}"
    yield Claim("quality, clean BC", "docs/results.md", f"| BC on clean demonstrations {cells('clean', None)} | "
                f"{ev.rate('clean', GREEDY)[0]:.1f} |")
    for run, label in (("mistakes50", "BC on `--mistakes 0.5`, failures cloned"),
                       ("detours50", "BC on `--detours 0.5` (66 of 68 detoured episodes succeed)")):
        yield Claim(f"quality, {run}", "docs/results.md",
                    f"| {label} {cells(run, 'clean')} vs clean | {ev.rate(run, GREEDY)[0]:.1f} |")
    yield Claim("quality, filtered BC", "docs/results.md",
                f"| BC on the same filtered to successes (109 of 160) {cells('mistakes50-f', 'mistakes50')} | "
                f"{ev.rate('mistakes50-f', GREEDY)[0]:.1f} |")
    for bc in ("mistakes50", "detours50"):
        yield Claim(f"quality, M-GRPO from {bc}", "docs/results.md",
                    seed_pairs(ev, [f"{bc}-rl-s{s}" for s in (0, 1)], bc))


def exchange(ev: Outcomes) -> Iterator[Claim]:
    """Issue 57, item 3: BC on more clean demonstrations against M-GRPO's trajectories (docs/results.md)."""
    (t1, se), (g, _) = ev.rate("n20"), ev.rate("n20", GREEDY)    # with the next row's label: the quality table's
    yield Claim("exchange, BC on 20", "docs/results.md",          # clean BC is the same model, its cells the same
                f"| {t1:.1f} | {se:.1f} | | {g:.1f} | | BC on 40 per task")
    for n in (40, 80, 160):
        (t1, se), (g, _) = ev.rate(f"n{n}"), ev.rate(f"n{n}", GREEDY)
        yield Claim(f"exchange, BC on {n}", "docs/results.md",
                    f"| {t1:.1f} | {se:.1f} | {pm(ev.diff(f'n{n}', 'n20'))} | {g:.1f} |")
    for budget in (2048, 4096, 8192):
        yield Claim(f"exchange, M-GRPO at {budget}", "docs/results.md",
                    seed_pairs(ev, [f"rl-s{s}-{budget}" for s in (0, 1)], "n20"))
    yield Claim("exchange, the seeds part early", "docs/results.md",
                f"(seed 1 - seed 0: {pm(ev.diff('rl-s1-2048', 'rl-s0-2048'))} at 1x, "
                f"{pm(ev.diff('rl-s1-8192', 'rl-s0-8192'))} at 4x)")
    yield Claim("exchange, 160 over 80", "docs/results.md",
                f"BC on 160 per task adds {pm(ev.diff('n160', 'n80'))} over 80 (paired)")
    bc = sorted((int(run[1:]), ev.rate(run)[0]) for run in ev.by_run if re.fullmatch(r"n\d+", run))
    reach = {t: crossing(bc, sum(ev.rate(f"rl-s{s}-{t}")[0] for s in (0, 1)) / 2) for t in (4096, 8192)}
    worth = {t: t / ((n - 20) * TASKS) for t, n in reach.items()}
    yield Claim("exchange, the rate", "docs/results.md",
                f"4,096 trajectories reach BC on {reach[4096]:.0f} demonstrations per task and 8,192 BC on "
                f"{reach[8192]:.0f}, so one clean demonstration is worth ~{worth[4096]:.0f} and ~{worth[8192]:.0f} of "
                "the policy's own trajectories")
    at_demo = f"{pm(ev.diff('rl-s0-2048', 'n20'))} / {pm(ev.diff('rl-s1-2048', 'n20'))}"
    yield Claim("exchange, clean RL - BC, README", "README.md",
                f"from BC on 20 clean demonstrations a task, seeds 0 / 1: {at_demo}; one clean demonstration is worth "
                f"~{worth[4096]:.0f} and ~{worth[8192]:.0f} of the policy's own trajectories (at 2 and 4 times that "
                "budget)")
    yield Claim("exchange, clean RL - BC", "docs/results.md",
                f"on clean demonstrations, from BC on 20 at make demo's budget (issue 57), seeds 0 / 1: {at_demo}")


def clean_bc(quality_ev: Outcomes, demo: Outcomes) -> Iterator[Claim]:
    """BC on clean demonstrations (issue 57's, make demo's BC until issue 68) against make demo's base: the same
    held-out pages, samples and decoding, so paired by page across the two evidence files."""
    ev = Outcomes(quality_ev.by_run["clean"] + demo.by_run["base"])
    d, p, g = ev.diff("clean", "base"), ev.diff("clean", "base", k=2), ev.diff("clean", "base", GREEDY)
    yield Claim("clean BC lifts the base", "docs/results.md",
                f"on clean demonstrations (development test set) {ev.rate('base')[0]:.1f} -> "
                f"{ev.rate('clean')[0]:.1f}, {pm(d)}")
    yield Claim("clean BC - base, table", "docs/results.md",
                f"| BC - base (paired, 400 pages) | {d[0]:+.1f} | {d[1]:.1f} | {p[0]:+.1f} | {p[1]:.1f} | "
                f"{g[0]:+.1f} | {g[1]:.1f} | |")


def within(ev: Outcomes, budget: int) -> Outcomes:
    """The same episodes read at a smaller interaction budget: success within ``budget`` (eval_stats.solved_within:
    what a run at that budget gives, issue 70's 4,800 of 4,800)."""
    return Outcomes([dict(r, success=solved_within(r, budget)) for rows in ev.by_run.values() for r in rows])


def fresh(ev12: Outcomes) -> Iterator[Claim]:
    """Issue 87's runs on the fresh pages (env.FINDINGS_SEEDS, 12 interactions kept), over the seeds kept so far:
    every model at make demo's budget (6) at T = 1 and greedy, paired with what it is measured against (the BC
    with the base, each M-GRPO seed of the reference with the BC, R1-Zero with the reference of its seed, the
    filtered BC with the BC), and its budget 12 against 2; then each comparison by seed with the mean's 95%
    t-interval. The plan's verdict on R1-Zero (that interval below 0) is written once its 5 seeds are in."""
    ev, at2, at12 = within(ev12, 6), within(ev12, 2), within(ev12, 12)
    ref = sorted(int(r.rsplit("-s", 1)[1]) for r in ev.by_run if r.startswith("rl-s"))
    zero = [s for s in ref if f"r1zero-s{s}" in ev.by_run]
    filtered = "bc-filtered" in ev.by_run
    vs = {"base": None, "bc": "base", "bc-filtered": "bc", **{f"rl-s{s}": "bc" for s in ref},
          **{f"r1zero-s{s}": f"rl-s{s}" for s in zero}}
    for run in [r for r in ("base", "bc", "bc-filtered") if r in ev.by_run] + [f"rl-s{s}" for s in ref] + \
            [f"r1zero-s{s}" for s in zero]:
        (rate, se), paired_cell = ev.rate(run), f"{run} - {vs[run]} {pm(ev.diff(run, vs[run]))}" if vs[run] else ""
        yield Claim(f"fresh pages, {run}", "docs/history.md",
                    f"| {run} | {rate:.1f} +- {se:.1f} | {paired_cell} | {ev.rate(run, GREEDY)[0]:.1f} | "
                    f"{pm(budget_gain(at2, at12, run))} |")
    comparisons = [("RL - BC", "rl-s{}", "bc", ref), ("R1-Zero - reference", "r1zero-s{}", "rl-s{}", zero),
                   ("R1-Zero - base", "r1zero-s{}", "base", zero)]
    comparisons += [("RL - filtered BC", "rl-s{}", "bc-filtered", ref)] if filtered else []
    by_seed: dict[tuple[str, str], list[float]] = {}       # (comparison, decoding) -> each seed's difference
    for label, a, b, runs in comparisons:
        for dec in (T1, GREEDY) if runs else ():
            d = by_seed[label, dec] = [ev.diff(a.format(s), b.format(s), dec)[0] for s in runs]
            mean = f" (mean {interval(d)})" if len(runs) > 1 else ""
            yield Claim(f"fresh pages, {label}, {dec}", "docs/history.md",
                        f"{label}{' at T = 1' if dec == T1 else ', greedy'}, seed{'s' * (len(runs) > 1)} "
                        f"{', '.join(map(str, runs))}: {seeds(d)}{mean}")
    yield from fresh_findings(ev, at2, at12, ref, zero, by_seed)


def fresh_findings(ev: Outcomes, at2: Outcomes, at12: Outcomes, ref: list[int], zero: list[int],
                   by_seed: dict[tuple[str, str], list[float]]) -> Iterator[Claim]:
    """The cells of docs/results.md's findings table that issue 87's fresh pages give (``fresh``'s readings: budget
    6, 2 and 12; the seeds kept so far; ``by_seed``: its comparisons seed by seed), each with its seeds and the
    mean's 95% t-interval, and the verdict by its committed rule: R1-Zero's (the plan's) once its 5 seeds are in,
    the test-time row's (issue 70's) per model."""
    def rl_bc(at: Outcomes) -> list[float]:
        return [at.diff(f"rl-s{s}", "bc")[0] for s in ref]

    def mean(values: list[float]) -> str:
        return f" (mean {interval(values)})" if len(values) > 1 else ""

    def named(runs: list[int]) -> str:
        return f"seed{'s' * (len(runs) > 1)} {', '.join(map(str, runs))}"

    (b, _), (bc, _) = ev.rate("base"), ev.rate("bc")
    yield Claim("fresh pages, BC lifts the base", "docs/results.md",
                f"on the fresh pages {b:.1f} -> {bc:.1f} at T = 1, {pm(ev.diff('bc', 'base'))} "
                f"(greedy {pm(ev.diff('bc', 'base', GREEDY))})")
    if ref:
        rl, rl_g = by_seed["RL - BC", T1], by_seed["RL - BC", GREEDY]
        text = (f"on the fresh pages, {named(ref)}: {seeds(rl)} at T = 1{mean(rl)}; greedy {seeds(rl_g)}"
                f"{mean(rl_g)}")
        if "bc-filtered" in ev.by_run:
            f = by_seed["RL - filtered BC", T1]
            text += f"; RL - filtered BC {seeds(f)}{mean(f)}"
        yield Claim("fresh pages, RL lifts BC", "docs/results.md", text)
        if "bc-filtered" in ev.by_run:
            yield from recipe_seeds(ev, ref)
        gains = [budget_gain(at2, at12, run) for run in ("base", "bc", *(f"rl-s{s}" for s in ref))]
        more = {"R1-Zero": [budget_gain(at2, at12, f"r1zero-s{s}") for s in zero]}
        more["the filtered BC"] = [budget_gain(at2, at12, "bc-filtered")] if "bc-filtered" in ev.by_run else []
        every = all(g >= 2 * se for g, se in gains + more["R1-Zero"] + more["the filtered BC"])
        verdict = "reproduces" if every else "does not reproduce for every model"
        early, late = rl_bc(at2), rl_bc(at12)

        def span(pairs: list[tuple[float, float]]) -> str:
            lo, hi = min(g for g, _ in pairs), max(g for g, _ in pairs)
            return f"{lo:+.1f}" if f"{lo:+.1f}" == f"{hi:+.1f}" else f"{lo:+.1f} to {hi:+.1f}"
        yield Claim("fresh pages, test-time interactions, README", "README.md",
                    f"on {pages(ev)} fresh pages (issue 87) more interactions at test time give more success (12 "
                    f"against 2: the base, BC and BC + M-GRPO {span(gains)} points"
                    + "".join(f", {name} {span(pairs)}" for name, pairs in more.items() if pairs)
                    + f", {'every model above 0 at >= 2 SE' if every else 'not every model above 0 at >= 2 SE'})")
        yield Claim("fresh pages, test-time interactions", "docs/results.md",
                    f"budget 12 - 2 at T = 1 on the fresh pages: base {pm(gains[0])}, BC {pm(gains[1])}, "
                    f"BC + M-GRPO {seeds([g for g, _ in gains[2:]])} (+- "
                    f"{min(se for _, se in gains[2:]):.1f}-{max(se for _, se in gains[2:]):.1f}; {named(ref)})"
                    + "".join(f", {name} {seeds([g for g, _ in pairs])} (+- {min(se for _, se in pairs):.1f}-"
                              f"{max(se for _, se in pairs):.1f})" if len(pairs) > 1 else f", {name} {pm(pairs[0])}"
                              for name, pairs in more.items() if pairs)
                    + f": {verdict} (each model above 0 at >= 2 SE); RL - BC {min(early):+.1f} to {max(early):+.1f} "
                    f"at 2, {min(late):+.1f} to {max(late):+.1f} at 12")
    if zero:
        d, d_g, d_base = (by_seed["R1-Zero - reference", T1], by_seed["R1-Zero - reference", GREEDY],
                          by_seed["R1-Zero - base", T1])
        m, _, h = across_seeds(d)
        verdict = (f": {'reproduces' if m + h < 0 else 'does not reproduce'}" if len(zero) == 5
                   else "; the plan's verdict waits for 5 seeds")
        yield Claim("fresh pages, R1-Zero, README", "README.md",
                    f"R1-Zero - (BC + M-GRPO) {seeds(d)} in {named(zero)}{mean(d)}{verdict}")
        yield Claim("fresh pages, R1-Zero", "docs/results.md",
                    f"on the fresh pages, {named(zero)}: "
                    + ", ".join(f"{ev.rate(f'r1zero-s{s}')[0]:.1f}" for s in zero)
                    + f" at T = 1; R1-Zero - reference {seeds(d)}{mean(d)}{verdict}; greedy {seeds(d_g)}"
                    f"{mean(d_g)}; R1-Zero - base {seeds(d_base)}{mean(d_base)}")


def recipe_seeds(ev: Outcomes, ref: list[int]) -> Iterator[Claim]:
    """make demo's recipe seed by seed on the fresh pages (docs/results.md's table of its seeds and the README's line):
    RL - BC at T = 1 with its SE and their ratio, greedy, and RL - the filtered BC; the means' 95% t-intervals."""
    rl, fil = [ev.diff(f"rl-s{s}", "bc") for s in ref], [ev.diff(f"rl-s{s}", "bc-filtered") for s in ref]
    greedy = [ev.diff(f"rl-s{s}", "bc", GREEDY) for s in ref]
    for s, (d, se), (g, gse), (f, fse) in zip(ref, rl, greedy, fil):
        yield Claim(f"the recipe's seeds, seed {s}", "docs/results.md",
                    f"| {s} | {d:+.1f} | {se:.1f} | {d / se:.1f} | {g:+.1f} | {gse:.1f} | {f:+.1f} | {fse:.1f} |")
    d, g, f = [x for x, _ in rl], [x for x, _ in greedy], [x for x, _ in fil]
    yield Claim("the recipe's seeds, mean", "docs/results.md",
                f"| mean [95% t-interval over seeds] | {interval(d, '')} | | | {across_seeds(g)[0]:+.1f} | | "
                f"{interval(f, '')} | |")
    (b, _), (bf, _) = ev.rate("bc"), ev.rate("bc-filtered")
    m, _, h = across_seeds(d)
    gm, _, gh = across_seeds(g)
    above = "in every seed" if all(x > 0 for x in f) else f"in {sum(x > 0 for x in f)} of {len(f)} seeds"
    yield Claim("the recipe's seeds, README", "README.md",
                f"on {pages(ev)} fresh pages (issue 87, `experiments/findings_fresh.sh`): "
                f"RL - BC {seeds(d)} (mean {m:+.1f}, 95% interval {m - h:+.1f} to {m + h:+.1f}), and RL - the filtered "
                f"BC (BC {b:.1f}, filtered {bf:.1f}) {seeds(f)} (mean {across_seeds(f)[0]:+.1f}): above the "
                f"practitioner's fix, BC on the log filtered to its successes, {above}; greedy, RL "
                f"{'gains nothing over' if gm - gh <= 0 <= gm + gh else 'differs from'} BC there (mean {gm:+.1f})")


LOGGED_OUT = "suite/stop-newsletter@out"


def login(sets: dict[str, Outcomes], metrics: dict[str, list[dict]]) -> Iterator[Claim]:
    """Issue 87's log-in rows on the site suite's held-out seeds (greedy; ``sets``: "out0", "out1", each condition's
    BC, M-GRPO seeds and BC's samples on logged-out validation starts; ``metrics``: each M-GRPO run's steps by
    "out<K>-s<S>"), by issue 70's rule: a seed composes the skills when its held-out logged-out starts succeed in
    >= 10% of episodes, the finding reproduces at >= 3 of 5 seeds."""
    def on(ev: Outcomes, task: str) -> Outcomes:
        return Outcomes([r for rows in ev.by_run.values() for r in rows if r["task"] == task])

    def solved(ev: Outcomes, run: str, decoding: str = GREEDY) -> str:
        recs = ev.episodes(run, decoding)
        return f"{sum(r['success'] for r in recs)} of {len(recs)}"

    if "out0" in sets:                       # (a sitting may run the conditions in either order)
        zero = sets["out0"]
        yield Claim("log-in, BC does not compose", "docs/results.md",
                    f"from the base: BC {solved(on(zero, LOGGED_OUT), 'bc')} logged-out starts, "
                    f"{on(zero, 'suite/stop-newsletter@in').rate('bc', GREEDY)[0]:.0f} logged in, "
                    f"{on(zero, 'suite/log-in').rate('bc', GREEDY)[0]:.0f} on log-in")
    counts = {}                              # condition -> (seeds composed, seeds, verdict)
    for k, label in ((0, "with no logged-out demonstration"), (1, "with one")):
        if f"out{k}" not in sets:
            continue
        ev = on(sets[f"out{k}"], LOGGED_OUT)
        runs = sorted((r for r in ev.by_run if r.startswith("rl-s")), key=lambda r: int(r.rsplit("-s", 1)[1]))
        rates = [ev.rate(r, GREEDY)[0] for r in runs]
        composed = sum(rate >= 10 for rate in rates)
        rollouts = sum(any(v > 0 for step in metrics[f"out{k}-{r.removeprefix('rl-')}"] for name, v in step.items()
                           if name.startswith("rollout/success/") and name.endswith("@out")) for r in runs)
        samples = sorted(r for r in ev.by_run if r.startswith("bc-t"))
        sampled = ", ".join(f"{solved(ev, r, d)} at {d}" for r in samples for d in [ev.by_run[r][0]["decoding"]])
        verdict = ("reproduces" if composed >= 3 else "does not reproduce") if len(runs) == 5 else "5 seeds not in yet"
        counts[k] = composed, len(runs), verdict, sorted(int(r.rsplit("-s", 1)[1]) for r in runs)
        yield Claim(f"log-in, {k} logged-out demonstration(s)", "docs/results.md",
                    f"{label}: BC {solved(ev, 'bc')}, M-GRPO composes in {composed} of {len(runs)} seeds "
                    f"({', '.join(f'{x:.1f}' for x in rates)}; "
                    f"RL - BC {seeds([ev.diff(r, 'bc', GREEDY)[0] for r in runs])}"
                    f" paired): {verdict}; logged-out rollouts succeed in {rollouts} of {len(runs)} runs"
                    + (f"; BC's samples on logged-out validation starts succeed {sampled}" if samples else ""))
    if len(counts) == 2:
        ran = counts[0][3] + counts[1][3]
        yield Claim("log-in, the seeds", "docs/results.md",
                    f"from the base, seeds {min(ran)}-{max(ran)}, greedy on the site suite's held-out seeds")
        yield Claim("log-in, README", "README.md",
                    f"learns the composition in {counts[1][0]} of {counts[1][1]} seeds given one logged-out "
                    f"demonstration ({counts[0][0]} of {counts[0][1]} without): {counts[1][2]}")


def pages(ev: Outcomes) -> int:
    """How many pages (task, seed) an evaluation set's BC was evaluated on."""
    return len({(r["task"], r["seed"]) for r in ev.episodes("bc", T1)})


def budget_gain(at2: Outcomes, at12: Outcomes, run: str) -> tuple[float, float]:
    """A model's success within 12 interactions minus within 2 (``within``'s two readings), at T = 1, paired by
    page (issue 70's rule: above 0 at >= 2 SE)."""
    both = [dict(r, run="12") for r in at12.episodes(run, T1)] + [dict(r, run="2") for r in at2.episodes(run, T1)]
    return Outcomes(both).diff("12", "2")


def claims() -> list[Claim]:
    issue70, issue86 = load("issue70_outcomes.jsonl.gz"), load("issue86_engine_mismatch_outcomes.jsonl.gz")
    first_pair = {"rl": ("float32 engine (make demo's)", "issue86_f32-s0_metrics.jsonl"),
                  "bf16-none-s0": ("bf16 engine, no correction", "issue86_bf16-none-s0_metrics.jsonl")}
    arms = load("issue86_arms_outcomes.jsonl.gz")["test"]
    labels = {"f32": "float32 engine", "bf16-none": "bf16 engine, no correction", "bf16-tis": "bf16 engine, TIS"}
    from_reference = {}                      # every arm evaluated so far; make demo's RL ("rl") is f32-s0
    for run in arms.by_run:
        name = "f32-s0" if run == "rl" else run
        if name.rsplit("-s", 1)[0] in labels:
            from_reference[run] = labels[name.rsplit("-s", 1)[0]], f"issue86_refbc_{name}_metrics.jsonl"
    d, tis, tis_g = arms.diff("bf16-none-s0", "rl"), arms.diff("bf16-tis-s0", "bf16-none-s0"), \
        arms.diff("bf16-tis-s0", "bf16-none-s0", GREEDY)
    reading = [Claim("engine mismatch, the reference BC's seed 0", "docs/training.md",
                     f"differs, and hurts: {pm(d)} at T = 1 ({abs(d[0] / d[1]):.1f} SE"),
               Claim("engine mismatch, TIS against none, seed 0", "docs/training.md",
                     f"TIS - none {pm(tis)} at T = 1 ({abs(tis[0] / tis[1]):.1f} SE; greedy {pm(tis_g)})")]
    runs70 = {"rl-s0": "issue86_f32-s0",      # make demo's M-GRPO, issue 70's seed 0 (its weights rerun, issue 86)
              **{f"{p}rl-s{s}": f"issue70_2026-11-30_{p}rl-s{s}" for p in ("", "plain-", "cot-", "cot320-")
                 for s in range(3) if (p, s) != ("", 0)}}
    metrics70 = {run: load_metrics(EVIDENCE / f"{name}_metrics.jsonl") for run, name in runs70.items()}
    quality_ev = load_json("issue57_quality_test.json")
    return [*make_demo(issue86["test"], metrics70["rl-s0"]), *engine_mismatch(issue86["test"], first_pair, False),
            *engine_mismatch(arms, from_reference, True), *reading, *mismatch_by_seed(arms),
            *findings(issue70, metrics70), *quality(quality_ev), *clean_bc(quality_ev, issue86["test"]),
            *exchange(load_json("issue57_exchange_test.json")), *fresh(load("issue87_outcomes.jsonl.gz")["test"]),
            *login_rows(), *one_step_off(load("issue87_outcomes.jsonl.gz")["test"],
                                         load("issue100_async_outcomes.jsonl.gz")["test"])]


def pooled(ev: Outcomes, pairs: list[tuple[str, str]], decoding: str) -> tuple[float, float]:
    """a - b over several pairs (seeds), each page's difference averaged over the pairs: (its mean over the pages,
    the SE over the pages), in points."""
    values = [(page_values(ev.episodes(a, decoding)), page_values(ev.episodes(b, decoding))) for a, b in pairs]
    d = [sum(va[p] - vb[p] for va, vb in values) / len(values) for p in sorted(values[0][1])]
    mean = sum(d) / len(d)
    return 100 * mean, 100 * math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d))


def one_step_off(k0: Outcomes, k1: Outcomes) -> Iterator[Claim]:
    """Issue 100's RL effect of --async-steps 1 (experiments/async_effect.sh) on the fresh pages at make demo's
    budget (6): each seed's RL - BC at K = 0 (issue 87's rl-sS) and at K = 1 (async-sS), and K = 1 - K = 0 pooled
    over the seeds (the plan's rule) and by seed with the mean's 95% t-interval."""
    ev = within(Outcomes([r for o in (k0, k1) for rows in o.by_run.values() for r in rows]), 6)
    runs = sorted(int(r.rsplit("-s", 1)[1]) for r in k1.by_run if r.startswith("async-s"))
    pairs = [(f"async-s{s}", f"rl-s{s}") for s in runs]
    for dec in (T1, GREEDY):
        rl_bc = {k: [ev.diff(f"{p}-s{s}", "bc", dec)[0] for s in runs] for k, p in ((0, "rl"), (1, "async"))}
        d = [ev.diff(a, b, dec)[0] for a, b in pairs]
        yield Claim(f"one step off, {dec}", "docs/training.md",
                    f"{dec}: RL - BC {seeds(rl_bc[0])} at K = 0, {seeds(rl_bc[1])} at K = 1 (seeds "
                    f"{', '.join(map(str, runs))}); K = 1 - K = 0 {pm(pooled(ev, pairs, dec))} pooled, by seed "
                    f"{seeds(d)} (mean {interval(d)})")


def login_rows() -> Iterator[Claim]:
    """``login`` over issue 87's log-in evidence, once its runs have been kept (findings_fresh.sh's login stage)."""
    if not (EVIDENCE / "issue87_login_outcomes.jsonl.gz").is_file():
        return
    metrics = {p.name.removeprefix("issue87_login-").removesuffix("_metrics.jsonl"): load_metrics(p)
               for p in EVIDENCE.glob("issue87_login-out*_metrics.jsonl")}
    yield from login(load("issue87_login_outcomes.jsonl.gz"), metrics)


#: Findings written in the docs whose per-page outcomes were not kept: not re-derivable from evidence/
#: (docs/results.md marks each).
NOT_KEPT = ("make demo on clean demonstrations (2026-11-28)", "make demo's unparsable turns",
            "the log-in argument's 2026-11-30 figures")


def flat(text: str) -> str:
    """Whitespace runs as one space, bold marks gone: how a claim is looked up in its doc."""
    return re.sub(r"\s+", " ", text.replace("**", ""))


def docs(cs: list[Claim], root: Path = ROOT) -> dict[str, str]:
    """The text of every doc the claims ``cs`` are written in (under ``root``), flat."""
    return {doc: flat((root / doc).read_text(encoding="utf-8")) for doc in sorted({c.doc for c in cs})}


def written(cs: list[Claim], texts: dict[str, str]) -> list[tuple[Claim, bool]]:
    """Each claim, and whether its doc's flat text in ``texts`` holds its text."""
    return [(c, flat(c.text) in texts[c.doc]) for c in cs]


def check(root: Path = ROOT) -> list[tuple[Claim, bool]]:
    """Every claim, and whether its doc (under ``root``) holds its text."""
    cs = claims()
    return written(cs, docs(cs, root))


def keep(into: Path, dirs: list[Path], set_name: str | None = None, rename: dict[str, str] | None = None) -> None:
    """Merge the episodes of the finished evaluations in ``dirs`` into the outcomes file ``into`` (see --keep): with
    ``rename`` only the runs it names, under their new names; with ``set_name`` as that evaluation set's. A (set,
    run) evaluated again replaces its old episodes."""
    new = [json.loads(line) for d in dirs if (d / "results.json").is_file()
           for line in (d / "trajectories.jsonl").read_text().splitlines()]
    if rename is not None:
        new = [dict(r, run=rename[r["run"]]) for r in new if r["run"] in rename]
    if set_name is not None:
        new = [dict(r, set=set_name) for r in new]
    runs = {(r.get("set"), r["run"]) for r in new}
    old = [r for r in read_outcomes(into)[1] if (r.get("set"), r["run"]) not in runs] if into.is_file() else []
    n = write_outcomes(into, old + new)
    print(f"{into}: {n} episodes, {len(runs)} run(s) from {len(dirs)} evaluation(s), "
          f"{len({(r.get('set'), r['run']) for r in old})} run(s) kept from before")


def holds(path: Path, run: str | None, set_name: str | None) -> bool:
    """Whether the outcomes file ``path`` holds episodes of ``run`` (any run if None) in ``set_name`` (any if None)."""
    return path.is_file() and any((run is None or r["run"] == run) and (set_name is None or r.get("set") == set_name)
                                  for r in read_outcomes(path)[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 unless every doc holds its claims")
    ap.add_argument("--keep", nargs="+", type=Path, metavar=("FILE", "DIR"),
                    help="merge the episodes of the finished evaluations DIR ... into the outcomes file FILE")
    ap.add_argument("--set", help="with --keep: the evaluation set the episodes are kept as (default: none, 'test'); "
                                  "with --has: the set to look in")
    ap.add_argument("--runs", metavar="OLD=NEW,...", help="with --keep: only these runs, renamed")
    ap.add_argument("--has", nargs="+", type=str, metavar=("FILE", "RUN"),
                    help="exit 0 if the outcomes file FILE holds episodes (of RUN, of --set), 1 if not")
    args = ap.parse_args()
    if args.has:
        if len(args.has) > 2:
            ap.error("--has FILE [RUN]")
        sys.exit(0 if holds(Path(args.has[0]), args.has[1] if len(args.has) > 1 else None, args.set) else 1)
    if args.keep:
        if len(args.keep) < 2:
            ap.error("--keep FILE DIR [DIR ...]")
        rename = None
        if args.runs:
            pairs = [item.split("=", 1) for item in args.runs.split(",")]
            if any(len(p) != 2 or not all(p) for p in pairs):
                ap.error(f"--runs {args.runs!r}: OLD=NEW pairs, comma-separated")
            rename = dict(pairs)
        return keep(args.keep[0], args.keep[1:], args.set, rename)
    results = check()
    for c, found in results:
        print(f"{'ok ' if found else 'NOT'} {c.doc}: {c.name}: {c.text}")
    print("\nNo per-page outcomes committed (not re-derived): " + "; ".join(NOT_KEPT))
    missing = [c for c, found in results if not found]
    if args.check and missing:
        print(f"\n{len(missing)} claim(s) not written as the evidence gives them: "
              + "; ".join(f"{c.name} ({c.doc})" for c in missing))
        sys.exit(1)


if __name__ == "__main__":
    main()
