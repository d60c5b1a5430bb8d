"""What an evaluation (eval.py) writes besides its records: results.json's summary (``tabulate``), the tables of
results.md (the paper's Table 2 and Table 3 layouts, every decoding side by side with paired differences, the
interaction budgets of Fig. 5), the budget figure, the static HTML trajectory viewer, and the episodes of earlier
evaluations joined to a new one (``load_reused``, eval.py ``--reuse``). The statistics are eval_stats.py's.

``args`` below is eval.py's ``Args``, typed by what is read of it (``EvalArgs``: eval.py imports this module).

How to run
    .venv/bin/python -m pytest -q tests/test_eval.py
"""
from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any, Protocol

import compress
import env as webenv
from trainlib import cli
from eval_stats import paired, summarize
from rollout import EnvConfig, EpisodeConfig


class EvalArgs(Protocol):
    """The fields of eval.py's ``Args`` this module reads."""
    env: EnvConfig
    episode: EpisodeConfig
    samples: int                 # samples per page
    noise: str                   # "common" or "independent"
    seed_start: int              # < 0: the held-out pages


# ---- labels ----

def decoding_label(temperature: float, top_p: float = 1.0) -> str:
    """How a column was decoded: ``"greedy"``, ``"T = 1"``, ``"T = 0.7, top-p 0.9"``."""
    if temperature <= 0:
        return "greedy"
    return f"T = {temperature:g}" + (f", top-p {top_p:g}" if top_p < 1 else "")


def order_columns(columns: list[str]) -> list[str]:
    """WebArena sites in the paper's Table 2 order (Reddit, GitLab, CMS, Map, Shopping, ...), others as given."""
    paper = ["Reddit", "GitLab", "CMS", "Map", "Shopping", "Wikipedia", "Multi-site"]
    return sorted(columns, key=lambda c: paper.index(c) if c in paper else len(paper))


# ---- results.json ----

def tabulate(records: list[dict], args: EvalArgs, budgets: list[int], seconds: float) -> dict:
    """results.json: the evaluation's flags (secrets redacted), the runs at the evaluated decoding (``decoding``:
    "T = 1", or "greedy"), their paired differences by page (of success rate, and of pass@K with K samples), and
    with --greedy the same for the greedy column (``greedy``)."""
    args_json = json.loads(webenv.redact(json.dumps(cli.args_dict(args))))
    headline = decoding_label(args.episode.temperature, args.episode.top_p)
    main = [r for r in records if r.get("decoding", headline) == headline]
    greedy = [r for r in records if r.get("decoding") == "greedy"] if headline != "greedy" else []
    runs = summarize(main, budgets)
    results = {"args": args_json, "columns": order_columns(list(dict.fromkeys(r["column"] for r in records))),
               "budgets": budgets, "seconds": seconds, "decoding": headline, "samples": args.samples,
               "noise": args.noise if headline != "greedy" else None, "runs": runs, "paired": paired(main, list(runs))}
    if args.samples > 1:
        results["paired_pass"] = paired(main, list(runs), k=args.samples)
    if greedy:
        g = summarize(greedy, budgets)
        results["greedy"] = {"runs": g, "paired": paired(greedy, list(g))}
    return results


def load_reused(dirs: str, args: EvalArgs, jobs: list[tuple[webenv.Task, int]], new_runs: list[str],
                out: Path) -> list[dict]:
    """The episodes of earlier evaluations (``--reuse``) that this run also evaluates: every reused run must
    have evaluated each of them (same task and seed) under the same interaction budget and decoding settings,
    else a SystemExit names what differs. Screenshot paths are rewritten to point from ``out``'s viewer."""
    wanted = {(t.task_id, t.seed) for t, _ in jobs}
    same = ("rubric", "group_by", "compress", "temperature", "top_p", "max_new_tokens", "max_context",
            "max_obs_chars", "samples", "greedy", "noise", "seed")
    sampled = args.episode.temperature > 0       # (greedy runs share no noise: its settings do not matter)

    def settings(given: dict, budget: int) -> dict:
        kept = {"samples": 1, "greedy": False} | {k: v for k, v in given.items() if k in same}   # (older outputs)
        return {k: v for k, v in kept.items() if sampled or k not in ("noise", "seed")} | {"max_steps": budget}
    mine = settings(cli.args_dict(args), max(t.max_steps for t, _ in jobs))
    records: list[dict] = []
    seen = set(new_runs)
    for d in (x.strip() for x in dirs.split(",") if x.strip()):
        path = Path(d)
        if path.resolve() == out.resolve():
            raise SystemExit(f"--reuse {d}: that is --out, which this run overwrites; evaluate into another one")
        try:
            old = json.loads((path / "results.json").read_text())
            lines = (path / "trajectories.jsonl").read_text().splitlines()
        except (OSError, ValueError) as e:
            raise SystemExit(f"--reuse {d}: not an evaluation's output directory ({e})") from None
        theirs = settings(old["args"], max(old["budgets"]))
        if theirs != mine:
            diff = {k: (theirs.get(k), mine[k]) for k in mine if theirs.get(k) != mine[k]}
            raise SystemExit(f"--reuse {d}: evaluated with other settings (theirs, this run's): {diff}")
        recs = [r for r in map(json.loads, lines) if (r["task"], r["seed"]) in wanted]
        for r in recs:   # (outputs from before samples and decodings were recorded: one greedy sample)
            r.setdefault("sample", 0)
            r.setdefault("decoding", decoding_label(old["args"].get("temperature", 0.0), old["args"].get("top_p", 1.0)))
        for run in dict.fromkeys(r["run"] for r in recs):
            if run in seen:
                raise SystemExit(f"--reuse {d}: run {run!r} is already in this evaluation; rename it with NAME=PATH")
            seen.add(run)
            missing = wanted - {(r["task"], r["seed"]) for r in recs if r["run"] == run}
            if missing:
                raise SystemExit(f"--reuse {d}: run {run!r} lacks {len(missing)} of this run's episodes, "
                                 f"e.g. {sorted(missing)[0]}")
        rel = Path(os.path.relpath(path / "viewer", out / "viewer"))
        for r in recs:
            r["final_screenshot"] = r["final_screenshot"] and str(rel / r["final_screenshot"])
            for st in r["steps"]:
                st["screenshot"] = st.get("screenshot") and str(rel / st["screenshot"])
        records += recs
    return records


# ---- tables ----

def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def table2(runs: dict[str, Any], columns: list[str]) -> str:
    """Markdown in the paper's Table 2 layout: success rate (%) per column, then Average SR."""
    lines = ["| Method | " + " | ".join(columns) + " | Average SR | SE |",
             "| --- | " + " | ".join("---:" for _ in columns) + " | ---: | ---: |"]
    for run, res in runs.items():
        cells = [_pct(res["columns"][c]["success_rate"]) if c in res["columns"] else "-" for c in columns]
        o = res["overall"]
        lines.append(f"| {run} | " + " | ".join(cells) + f" | {_pct(o['success_rate'])} | {_pct(o['stderr'])} |")
    return "\n".join(lines)


def paired_table(diffs: dict[str, dict[str, float]]) -> str:
    """Markdown of the paired differences in success rate (points), with standard errors and their ratio (none
    where every page differs alike: an SE of 0)."""
    lines = ["| Comparison | Difference | SE | Difference / SE | Pages |", "| --- | ---: | ---: | ---: | ---: |"]
    for name, d in diffs.items():
        z = f"{d['diff'] / d['stderr']:+.1f}" if d["stderr"] else "none (no spread)"
        lines.append(f"| {name} | {100 * d['diff']:+.1f} | {_pct(d['stderr'])} | {z} | {d['n']} |")
    return "\n".join(lines)


def decodings_table(results: dict) -> str:
    """Markdown of every decoding side by side: per run the success rate at the evaluated decoding, pass@K from
    the same samples, and greedy success, each with its SE; then each paired difference in the same columns."""
    k, label = results["samples"], results["decoding"]
    greedy = results.get("greedy")
    cols = [(f"SR, {label} ({k} per page)", results["runs"], results["paired"], None)]
    if k > 1:
        cols.append((f"pass@{k}", results["runs"], results["paired_pass"], str(k)))
    if greedy:
        cols.append(("SR, greedy", greedy["runs"], greedy["paired"], None))
    lines = ["| Method | " + " | ".join(f"{c[0]} | SE" for c in cols) + " |",
             "| --- |" + " ---: | ---: |" * len(cols)]
    for run in results["runs"]:
        cells = []
        for _, runs, _, at in cols:
            o = runs.get(run, {}).get("overall")
            v = None if o is None else o["pass_at"][at] if at else o
            cells.append(f"{_pct(v['rate' if at else 'success_rate'])} | {_pct(v['stderr'])}" if v else "- | -")
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    for name in results["paired"]:
        cells = [f"{100 * d[name]['diff']:+.1f} | {_pct(d[name]['stderr'])}" if name in d else "- | -"
                 for _, _, d, _ in cols]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table3(runs: dict[str, Any]) -> str:
    """Markdown in the paper's Table 3 layout: SR, single-turn response length, number of interactions."""
    lines = ["| Method | Prompt | SR | Length | # of Interactions |", "| --- | --- | ---: | ---: | ---: |"]
    for run, res in runs.items():
        o = res["overall"]
        lines.append(f"| {run} | {res['prompt']} | {_pct(o['success_rate'])} | {o['avg_response_tokens']:.1f} "
                     f"| {o['avg_interactions']:.2f} |")
    return "\n".join(lines)


def budget_table(runs: dict[str, Any], budgets: list[int]) -> str:
    """Markdown of SR (%) per max number of interactions (Fig. 5's data)."""
    lines = ["| Method | " + " | ".join(f"max {k}" for k in budgets) + " |",
             "| --- | " + " | ".join("---:" for _ in budgets) + " |"]
    for run, res in runs.items():
        lines.append(f"| {run} | " + " | ".join(_pct(res["budgets"][str(k)]) for k in budgets) + " |")
    return "\n".join(lines)


def results_markdown(results: dict, args: EvalArgs) -> str:
    runs, columns, budgets = results["runs"], results["columns"], results["budgets"]
    pages = sorted({c["pages"] for r in runs.values() for c in r["tasks"].values()})
    start = webenv.EVAL_SEEDS.start if args.seed_start < 0 else args.seed_start
    where = f"seeds {start}.., {webenv.page_set(start)} pages"
    k, label = results["samples"], results["decoding"]
    each = f", {k} samples per page ({results['noise']} noise)" if k > 1 else ""
    parts = [f"## Task success rate (%), Table 2 layout\n\nTasks `{args.env.tasks}`, {'/'.join(map(str, pages))} "
             f"pages per task ({where}), at most {budgets[-1]} interactions, {label}{each}, "
             f"prompt {', '.join(dict.fromkeys(r['prompt'] for r in runs.values()))}. Average SR = successes / "
             f"episodes over all tasks; SE = its standard error (clustered by page, stratified by task).\n",
             table2(runs, columns)]
    if k > 1 or "greedy" in results:
        paper = " (the paper's decoding)" if label == "T = 1" else ""
        parts += [f"\n## Every decoding side by side (%; SE clustered by page; paired differences in points, page "
                  f"by page)\n\nSR, {label}{paper}: the mean of each page's {k} samples" + (
                      f"; pass@{k}: a page counts if any of its {k} samples succeeds (Chen et al. 2021's estimator)"
                      if k > 1 else "") + ("; greedy: one answer per page" if "greedy" in results else "") + "." + (
                      f" The rows `a - b`: paired differences over the {next(iter(results['paired'].values()))['n']} "
                      "pages both ran." if results["paired"] else "") + "\n",      # no pair with one model
                  decodings_table(results)]
    elif results["paired"]:
        parts += ["\n## Paired differences in success rate (points; the same pages)\n",
                  paired_table(results["paired"])]
    parts += ["\n## Prompting design, Table 3 layout\n\nLength = generated tokens per turn; "
              "# of Interactions = steps per episode.\n", table3(runs)]
    if len(budgets) > 1:
        parts += ["\n## Test-time scaling: SR (%) by max number of interactions (Fig. 5)\n",
                  budget_table(runs, budgets)]
    return "\n".join(parts) + "\n"


# ---- plots ----

def plot_budgets(runs: dict[str, Any], budgets: list[int], out_png: Path) -> None:
    """Fig. 5: success rate against the max number of interactions, one line per run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for run, res in runs.items():
        ax.plot(budgets, [100 * res["budgets"][str(k)] for k in budgets], marker="o", label=run)
    ax.set_xlabel("max number of interactions")
    ax.set_ylabel("success rate (%)")
    ax.set_xticks(budgets)
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Test-time scaling with interactions (Fig. 5)")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)


# ---- viewer ----

VIEWER_OBS_CHARS = 6000   # observation text shown per step in the viewer (full text in trajectories.jsonl)

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:16px;color:#222}
h1{font-size:22px} h2{font-size:18px;margin-top:28px} table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top} th{background:#f4f4f4}
td.num{text-align:right} .badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-weight:600;font-size:12px}
.ok{background:#1a7f37} .fail{background:#cf222e} .warn{background:#bf8700}
.episode{border:1px solid #ccc;border-radius:8px;margin:18px 0;padding:10px 14px}
.episode.failed{border-left:6px solid #cf222e} .episode.passed{border-left:6px solid #1a7f37}
.intent{background:#f6f8fa;border-left:4px solid #888;padding:6px 10px;margin:6px 0}
.why{color:#cf222e;font-weight:600} .step{display:grid;grid-template-columns:420px 1fr;gap:14px;border-top:1px dashed #ccc;padding:10px 0}
.shot{width:412px;max-height:480px;overflow:hidden;border:1px solid #ddd;background:#fff}
.shot img{display:block;width:100%}
.shot.miniwob{height:269px} .shot.miniwob img{width:1600px;max-width:none}  /* MiniWoB: the 330x215 task + reward panel at 1.25x */
.shot.suite{height:300px} .shot.suite img{width:824px;max-width:none}  /* site suite: the top-left of the page at 0.64x */
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:6px;margin:4px 0;font-size:12px}
code.action{background:#ddf4ff;padding:2px 6px;border-radius:4px} .err{background:#ffebe9;border:1px solid #cf222e;padding:4px 8px;border-radius:4px;margin:4px 0}
.prev{background:#fff8c5;padding:4px 8px;border-radius:4px;margin:4px 0} .meta{color:#666;font-size:12px}
body.failonly .episode.passed, body.failonly tr.passed{display:none}
"""


def failure_reason(rec: dict) -> str:
    """One line saying why an episode failed (empty for a success)."""
    if rec["success"]:
        return ""
    why = _failure_reason(rec)
    if rec["parse_errors"] and rec["done_reason"] != "parse_failures":
        why += f"; {rec['parse_errors']} of {rec['num_steps']} responses were unparseable"
    return why


def _failure_reason(rec: dict) -> str:
    reason, n = str(rec["done_reason"]), rec["num_steps"]
    last = rec["steps"][-1] if rec["steps"] else {}
    if reason == "exit":
        reasons = (rec.get("eval") or {}).get("reasons")
        why = f": {'; '.join(map(str, reasons))}" if reasons else ""
        return f"exited with {last.get('action')} but the task was not accomplished (reward 0){why}"
    if reason == "page_done":
        return f"the page ended the episode with reward 0 after {last.get('action')} (wrong target or answer)"
    if reason == "max_steps":
        return f"ran out of interactions ({n} of {rec['max_steps']}) without finishing"
    if reason == "parse_failures":
        return f"stopped after repeated unparseable responses ({rec['parse_errors']} parse errors)"
    if reason == "repeated_action":
        return f"stopped for repeating the same action: {last.get('action')}"
    if reason == "crash":
        return f"the browser failed: {last.get('action_error')}"
    if reason == "timeout":
        return "the episode exceeded --episode-timeout"
    return reason


def _sample_label(rec: dict) -> str:
    """``"T = 1, sample 2"`` / ``"greedy"``: how an episode was decoded."""
    label = rec.get("decoding", "greedy")
    return label if label == "greedy" else f"{label}, sample {rec.get('sample', 0)}"


def _esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _render_step(j: int, st: dict, family: str) -> str:
    resp = st.get("response") or ""
    thought, answer = compress.split_response(resp)   # the response format lives in compress.py
    shot = st.get("screenshot")
    img = (f'<a href="{_esc(shot)}" target="_blank"><div class="shot {_esc(family)}">'
           f'<img src="{_esc(shot)}" alt="step {j + 1} screenshot" loading="lazy"></div></a>'
           if shot else '<div class="shot meta">(no screenshot)</div>')
    parts = [f'<div class="step" data-step="{j}">{img}<div>',
             f'<b>Step {j + 1}</b> <span class="meta">{_esc(st.get("url") or "")} · {st.get("response_tokens", 0)} tokens'
             f'{", cut at max new tokens" if st.get("finish_reason") == "length" else ""}</span>']
    if st.get("error"):
        parts.append(f'<div class="prev">env, on the previous action: {_esc(st["error"])}</div>')
    if thought:
        parts.append(f'<div><b>Thought</b><pre>{_esc(thought)}</pre></div>')
    if st.get("action"):
        parts.append(f'<div><b>Action</b> <code class="action">{_esc(st["action"])}</code></div>')
    if st.get("parse_error") or not st.get("action"):
        shown = answer or resp.strip()
        shown = shown[:2000] + f"... [{len(shown)} chars]" if len(shown) > 2000 else shown
        empty = f"(empty: {len(resp)} whitespace characters)" if resp else "(empty)"
        parts.append(f'<div class="err"><span class="badge fail">parse error</span> response:'
                     f'<pre>{_esc(shown) or empty}</pre></div>')
    if st.get("action_error") and not st.get("parse_error"):
        parts.append(f'<div class="err">error: {_esc(st["action_error"])}</div>')
    obs = st.get("observation") or ""
    cut = f"\n... [{len(obs) - VIEWER_OBS_CHARS} more characters in trajectories.jsonl]" if len(obs) > VIEWER_OBS_CHARS else ""
    parts.append(f'<details><summary class="meta">observation ({len(obs)} chars) and raw response</summary>'
                 f'<pre>{_esc(obs[:VIEWER_OBS_CHARS] + cut)}</pre><pre>{_esc(resp)}</pre></details>')
    parts.append("</div></div>")
    return "\n".join(parts)


def render_viewer(records: list[dict], runs: dict[str, Any], columns: list[str], title: str) -> str:
    """The whole viewer page (one HTML string; images referenced by relative paths)."""
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
           f"<style>{_CSS}</style></head><body>",
           f"<h1>{_esc(title)}</h1>",
           "<h2>Success rate (%)</h2><table><tr><th>Method</th>"
           + "".join(f"<th>{_esc(c)}</th>" for c in columns) + "<th>Average SR</th><th>Length</th>"
           "<th># Interactions</th></tr>"]
    for run, res in runs.items():
        cells = "".join(f"<td class=num>{_pct(res['columns'][c]['success_rate'])}</td>" if c in res["columns"]
                        else "<td>-</td>" for c in columns)
        o = res["overall"]
        out.append(f"<tr><td>{_esc(run)}</td>{cells}<td class=num><b>{_pct(o['success_rate'])}</b></td>"
                   f"<td class=num>{o['avg_response_tokens']:.1f}</td><td class=num>{o['avg_interactions']:.2f}</td></tr>")
    out.append("</table>")
    out.append("<h2>Episodes</h2><label><input type=checkbox id=failonly "
               "onchange=\"document.body.classList.toggle('failonly', this.checked)\"> show failures only</label>"
               "<table id=index><tr><th>#</th><th>run</th><th>decoding</th><th>task</th><th>seed</th><th>result</th>"
               "<th>steps</th>"
               "<th>done</th><th>why</th></tr>")
    for k, r in enumerate(records):
        badge = '<span class="badge ok">SUCCESS</span>' if r["success"] else '<span class="badge fail">FAIL</span>'
        out.append(f"<tr class='{'passed' if r['success'] else 'failed'}'><td><a href='#ep-{k}'>{k}</a></td>"
                   f"<td>{_esc(r['run'])}</td><td>{_esc(_sample_label(r))}</td><td>{_esc(r['task'])}</td>"
                   f"<td>{r['seed']}</td><td>{badge}</td>"
                   f"<td class=num>{r['num_steps']}</td><td>{_esc(r['done_reason'])}</td>"
                   f"<td>{_esc(failure_reason(r))}</td></tr>")
    out.append("</table>")
    for k, r in enumerate(records):
        ok = r["success"]
        badge = '<span class="badge ok">SUCCESS</span>' if ok else '<span class="badge fail">FAIL</span>'
        warn = (f' <span class="badge warn">{r["parse_errors"]} parse errors</span>' if r["parse_errors"] else "")
        out.append(f"<section class='episode {'passed' if ok else 'failed'}' id='ep-{k}'>"
                   f"<h3>{badge}{warn} #{k} {_esc(r['run'])} · {_esc(_sample_label(r))} · {_esc(r['task'])} · "
                   f"seed {r['seed']}</h3>"
                   f"<div class=intent><b>Intent:</b> {_esc(r['intent'])}</div>"
                   f"<div class=meta>reward {r['reward']:g} · steps {r['num_steps']} of max {r['max_steps']} · "
                   f"done: {_esc(r['done_reason'])} · {r['response_tokens']} response tokens · "
                   f"{r['seconds']:.1f}s · model {_esc(r['model'])} · prompt {_esc(r['prompt'])}</div>")
        if not ok:
            out.append(f"<div class=why>Why it failed: {_esc(failure_reason(r))}</div>")
        family = r.get("family", "")   # the screenshot's crop is per family (CSS .shot.<family>)
        out += [_render_step(j, st, family) for j, st in enumerate(r["steps"])]
        if r.get("final_screenshot"):
            out.append(f"<div class='step final'><a href='{_esc(r['final_screenshot'])}' target='_blank'>"
                       f"<div class='shot {_esc(family)}'><img src='{_esc(r['final_screenshot'])}' "
                       f"alt='final screenshot' loading='lazy'></div></a><div><b>Final page</b> {badge} "
                       f"reward {r['reward']:g}, done: {_esc(r['done_reason'])}</div></div>")
        out.append("<div class=meta><a href='#index'>back to the index</a></div></section>")
    out.append("</body></html>")
    return "\n".join(out)
