"""The statistics of an evaluation (eval.py), apart from running it, so that a reader can check them against a
textbook: a page (task, seed) is the unit. Evaluated K times, its success is the mean of its K outcomes, and the
standard errors are those of page means (clustered by page), stratified by task; with K = 1 they are the
binomial ones. pass@k is Chen et al. (2021)'s unbiased estimator; two runs are compared by the mean of their
per-page differences (paired), whose SE is that of a mean of differences.

What it implements
- ``pages_of``, ``page_values``, ``pass_at_k``: each page's outcomes, its success rate or pass@k.
- ``stderr``: the SE of a success rate (or pass@k) over pages, stratified by task.
- ``paired``: each run against every earlier one on the pages both ran, the mean difference and its SE.
- ``summarize``: results.json's "runs" (per task, per column, overall; SR within each interaction budget).
- ``across_seeds``: a difference measured in several training seeds, its mean with a 95% t-interval from the
  seeds' spread (the seed, not the page, is then the unit).
- ``write_outcomes``, ``read_outcomes``: the per-page outcomes a number rests on (``OUTCOME_KEYS``), kept as
  gzipped JSON lines in experiments/evidence/ and read back there by experiments/ledger.py.

How to run
    .venv/bin/python -m pytest -q tests/test_eval.py -k "pass_at or stderr or paired"
"""
from __future__ import annotations

import collections
import gzip
import json
import math
from pathlib import Path
from typing import Any, Iterable

from rollout import action_timed_out


def pages_of(recs: list[dict]) -> dict[tuple[str, int], list[bool]]:
    """The outcomes of each page, ``{(task, seed): [success of sample 0, 1, ...]}``."""
    pages: dict[tuple[str, int], list[bool]] = collections.defaultdict(list)
    for r in recs:
        pages[(r["task"], r["seed"])].append(bool(r["success"]))
    return pages


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021)'s unbiased pass@k of a page with ``c`` successes in ``n`` samples (k <= n): the chance
    that k of the n, drawn without replacement, hold a success, 1 - C(n - c, k) / C(n, k)."""
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def page_values(recs: list[dict], k: int | None = None) -> dict[tuple[str, int], float]:
    """Each page's success rate (the mean of its samples), or its pass@k."""
    return {page: sum(v) / len(v) if k is None else pass_at_k(len(v), sum(v), k) for page, v in pages_of(recs).items()}


def stderr(recs: list[dict], k: int | None = None) -> float:
    """Standard error of a success rate (or of pass@k) over pages, stratified by task (each task's pages are a
    fixed share of the cell): sqrt(sum_t w_t^2 var_t / P_t), var_t the variance of task t's page values over its
    P_t pages, w_t its share of the episodes; with one sample per page and one task sqrt(p (1 - p) / n)."""
    by_task: dict[str, list[float]] = collections.defaultdict(list)
    weight: collections.Counter = collections.Counter(r["task"] for r in recs)
    for (task, _), v in page_values(recs, k).items():
        by_task[task].append(v)
    var = 0.0
    for task, vals in by_task.items():
        mean = sum(vals) / len(vals)
        var += (weight[task] / len(recs)) ** 2 * sum((x - mean) ** 2 for x in vals) / len(vals) ** 2
    return math.sqrt(var)


def paired(records: list[dict], runs: list[str], k: int | None = None) -> dict[str, dict[str, float]]:
    """Each run against every earlier one on the pages both ran (same task and seed): the mean of the per-page
    differences of success rate (of pass@k with ``k``) and its standard error, ``{"rl - bc": {"diff", "stderr",
    "n"}}`` (n = pages). With common noise the two runs' samples of a page drew with the same noise."""
    value = {run: page_values([r for r in records if r["run"] == run], k) for run in runs}
    out = {}
    for j, b in enumerate(runs):
        for a in runs[:j]:
            d = [v - value[a][page] for page, v in value[b].items() if page in value[a]]
            if not d:
                continue
            mean = sum(d) / len(d)
            var = sum((x - mean) ** 2 for x in d) / (len(d) - 1) if len(d) > 1 else 0.0
            out[f"{b} - {a}"] = {"diff": mean, "stderr": math.sqrt(var / len(d)), "n": len(d)}
    return out


def _cell(recs: list[dict]) -> dict[str, Any]:
    n = len(recs)
    turns = sum(r["num_steps"] for r in recs)
    pages = pages_of(recs)
    samples = min((len(v) for v in pages.values()), default=0)
    return {"success_rate": sum(r["success"] for r in recs) / n if n else 0.0, "n": n,
            "pages": len(pages), "stderr": stderr(recs) if n else 0.0,
            "successes": sum(r["success"] for r in recs),
            "pass_at": {str(k): {"rate": sum(pass_at_k(len(v), sum(v), k) for v in pages.values()) / len(pages),
                                 "stderr": stderr(recs, k)} for k in range(1, samples + 1)},
            "avg_response_tokens": sum(r["response_tokens"] for r in recs) / turns if turns else 0.0,
            "avg_interactions": turns / n if n else 0.0,
            "parse_fail_rate": sum(r["parse_errors"] for r in recs) / turns if turns else 0.0,
            "env_errors": sum(r["env_errors"] for r in recs),
            "action_timeouts": sum(action_timed_out(st) for r in recs for st in r["steps"]),
            "hung_scripts": sum(len(st.get("hung_scripts", ())) for r in recs for st in r["steps"])}


def solved_within(rec: dict, k: int) -> bool:
    """Fig. 5: the episode succeeded using at most k interactions (what a budget-k run would give)."""
    return rec["success"] and rec["num_steps"] <= k


# Student's t, 97.5% quantile, by degrees of freedom: the 95% interval of a mean over n seeds is mean +- t[n-1] SE
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def across_seeds(xs: list[float]) -> tuple[float, float, float]:
    """(mean, SE, half-width of the 95% t-interval) of one value measured in each of several seeds; the SE is
    that of a mean from the seeds' spread (n - 1), nan (both) for a single seed."""
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan"), float("nan")
    se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs))
    return m, se, T975[len(xs) - 1] * se


def summarize(records: list[dict], budgets: list[int]) -> dict[str, Any]:
    """results.json's "runs": per run, per task / column / overall cells and SR per budget."""
    runs: dict[str, Any] = {}
    by_run: dict[str, list[dict]] = collections.defaultdict(list)
    for r in records:
        by_run[r["run"]].append(r)
    for run, recs in by_run.items():
        by_task, by_col = collections.defaultdict(list), collections.defaultdict(list)
        for r in recs:
            by_task[r["task"]].append(r)
            by_col[r["column"]].append(r)
        done = collections.Counter(str(r["done_reason"]) for r in recs)
        runs[run] = {"model": recs[0]["model"], "prompt": recs[0]["prompt"],
                     "tasks": {t: _cell(v) for t, v in by_task.items()},
                     "columns": {c: _cell(v) for c, v in by_col.items()},
                     "overall": _cell(recs),
                     "budgets": {str(k): sum(solved_within(r, k) for r in recs) / len(recs) for k in budgets},
                     "done_reasons": dict(done)}
    return runs


#: An episode's outcome as experiments/evidence/ keeps it: what a success rate, pass@k, a paired difference or the
#: interactions need (a row may carry "set" besides: which evaluation of several it belongs to).
OUTCOME_KEYS = ("run", "task", "seed", "sample", "decoding", "success", "num_steps")


def write_outcomes(path: Path, episodes: Iterable[dict], header: dict | None = None) -> int:
    """Write ``episodes`` reduced to OUTCOME_KEYS (and "set" where one has it) as gzipped JSON lines, ``header``
    (settings) as the first line when given; atomically (a temporary file renamed: the path read back may be the
    one written). Returns the number of episodes."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with gzip.open(tmp, "wt") as f:
        if header is not None:
            f.write(json.dumps(header) + "\n")
        for r in episodes:
            f.write(json.dumps({**({"set": r["set"]} if "set" in r else {}), **{k: r[k] for k in OUTCOME_KEYS}}) + "\n")
            n += 1
    tmp.replace(path)
    return n


def read_outcomes(path: Path) -> tuple[dict | None, list[dict]]:
    """(the header, or None, and the episodes) of a ``write_outcomes`` file."""
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for line in f]
    header = rows.pop(0) if rows and "run" not in rows[0] else None
    return header, rows
