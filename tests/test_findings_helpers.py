"""Helpers for the paper's other findings in miniature:
- R1-CoT: demos.py --thoughts long (bc_data.long_thought: a reasoning paragraph built from the intent and
  the observation only, ending with the short "# Element: ..." line; the action is unchanged), unit tests on
  a fixed observation, Demo's plumbing on a fake env (both prompt formats), and one real-Chromium CLI run;
- readable training dynamics: runlog.moving_average / plot_metrics(smooth=...) (a "/*" panel draws one
  line per task), and the per-task success metrics of an RL step (rollout.task_counts, reduced over ranks,
  task_success);
- the log-in argument's tables (scripts/findings_table.py): how far logged-out episodes get (login_progress), one
  table per data condition (login), written by the script with no make demo run beside it; the model rows'
  episodes saved (--save-outcomes) and read back (--outcomes) with the run's directories gone.

Run: .venv/bin/python -m pytest -q tests/test_findings_helpers.py
"""
from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import bc_data
import compress
import demos
import env
import experts
from trainlib import cli, runlog

OBS = ('<html> <div> Click on the "Submit" button. </div> <button id="0" data-bbox="2,52,33,21"> Ok </button> '
       '<div> eget eget aliquet </div> <input id="1" type="text" value="" data-bbox="2,84,109,21"> '
       '<button id="2" data-bbox="2,105,57,21"> Submit </button> enim aliquet sed: '
       '<input id="3" type="text" value="" data-bbox="2,126,98,21"> '
       '<label> <input id="4" type="checkbox" data-status="not-checked" data-bbox="6,55,20,13"> xX </label> </html>')
INTENT = 'Click on the "Submit" button.'
CLICK = env.Action("Click", element=2)
WHAT = "the 'Submit' button"


# ---- R1-CoT: long thoughts ----

def test_observed_elements_describes_each_numbered_element():
    assert bc_data.observed_elements(OBS) == {
        0: 'button 0 "Ok"', 1: 'text field 1 (after "eget eget aliquet")', 2: 'button 2 "Submit"',
        3: 'text field 3 (after "enim aliquet sed:")', 4: 'checkbox 4 "xX"'}


def test_long_thought_names_candidates_target_and_action():
    described = bc_data.observed_elements(OBS)
    thought = bc_data.long_thought(INTENT, OBS, CLICK, WHAT, key="miniwob/click-button/7/0")
    paragraph, last = thought.rsplit("\n", 1)
    assert last == f"# Element: {WHAT}" and "\n" not in paragraph
    assert 'Click on the "Submit" button' in paragraph                 # the goal, restated
    candidates = [d for el, d in described.items() if el != 2 and d in paragraph]
    assert len(candidates) >= 2, paragraph                              # real elements of the page, with ids
    assert 'button 2 "submit"' in paragraph.lower()                      # the target, with its id
    assert re.search(r'(mentions|carries) "Submit"', paragraph)           # the deciding text, quoted
    assert paragraph.endswith("click element 2.")                       # the action
    assert len(thought) > 200


def test_long_thought_is_deterministic_and_varies_with_the_key():
    thoughts = [bc_data.long_thought(INTENT, OBS, CLICK, WHAT, key=f"miniwob/click-button/{seed}/0")
                for seed in range(6)]
    assert thoughts == [bc_data.long_thought(INTENT, OBS, CLICK, WHAT, key=f"miniwob/click-button/{seed}/0")
                        for seed in range(6)]
    assert len(set(thoughts)) > 1


def test_long_thought_without_element():
    scroll = bc_data.long_thought(INTENT, OBS, env.Action("Scroll Down"),
                                  "none yet; the 'Next' link is further down, so scroll down", key="k")
    assert "the 'Next' link is further down" in scroll and scroll.split("\n")[0].endswith("scroll down.")
    done = bc_data.long_thought("What is the price?", OBS, env.Action("exit", message="$3"),
                                "none; the price is shown, so the task is done", key="k")
    assert 'finish with the answer "$3".' in done and "element None" not in done


class FakeEnv:
    """env.step's shape: records the response and ends the episode with reward 1."""
    def __init__(self):
        self.responses = []

    async def step(self, response):
        self.responses.append(response)
        return SimpleNamespace(obs=None, reward=1.0, done=True, info={"done_reason": "success"})


@pytest.mark.parametrize("prompt", ["thinking", "plain"])
def test_demo_act_long_and_short_thoughts(prompt):
    obs = SimpleNamespace(text=OBS, intent=INTENT, error=None, url="http://miniwob.local/click-button.html")
    responses = {}
    for thoughts in ("short", "long"):
        fake = FakeEnv()
        demo = experts.Demo(fake, obs, prompt=prompt, thoughts=thoughts, key="miniwob/click-button/7")
        with pytest.raises(experts.EpisodeOver):
            asyncio.run(demo.act(CLICK, WHAT))
        responses[thoughts] = fake.responses[0]
        assert demo.steps[0]["response"] == fake.responses[0]
    assert responses["short"] == compress.format_response(f"# Element: {WHAT}", env.format_action(CLICK), prompt=prompt)
    assert env.parse_action(responses["long"]) == CLICK                  # the action is unchanged
    expected = bc_data.long_thought(INTENT, OBS, CLICK, WHAT, key="miniwob/click-button/7/0")   # key + step 0
    if prompt == "plain":                      # the plain format's thought is "#" comment lines
        expected = "# " + expected
    assert compress.parse_response(responses["long"]).thought == expected
    assert expected.endswith(f"\n# Element: {WHAT}") and len(expected) > 200


@pytest.mark.timeout(300)
def test_cli_long_thoughts_on_click_button(tmp_path):
    """Real Chromium: two click-button episodes with --thoughts long; every episode succeeds and every
    response is one parseable action after a long thought ending with the '# Element:' line."""
    out = tmp_path / "demos.jsonl"
    rc = demos.main(cli.parse_args(demos.Args, [
        "--tasks", "miniwob:click-button", "--episodes", "2", "--split", "eval", "--out", str(out),
        "--thoughts", "long", "--concurrency", "1", "--no-progress"]))
    assert rc == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 2 and all(r["reward"] == 1.0 for r in recs)
    for rec in recs:
        assert set(rec) == {"task", "seed", "intent", "reward", "steps"}
        for step in rec["steps"]:
            assert set(step) == {"observation", "error", "url", "response"}
            action = env.parse_action(step["response"])
            assert action.name == "Click" and f'id="{action.element}"' in step["observation"]
            thought = compress.parse_response(step["response"]).thought
            assert len(thought) > 200 and re.search(r"\n# Element: .+$", thought), thought
            assert f"element {action.element}" in thought


# ---- readable training dynamics ----

def test_moving_average_by_hand():
    assert runlog.moving_average([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]
    assert runlog.moving_average([0, 1, 0, 1, 0], 3) == [0.0, 0.5, 1 / 3, 2 / 3, 1 / 3]
    assert runlog.moving_average([5.0], 4) == [5.0]


def test_plot_metrics_smoothed_and_per_task(tmp_path):
    rows = [{"step": s, "rollout/success_rate": float(s % 2), f"rollout/success/miniwob/{'ab'[s % 2]}": s / 10}
            for s in range(1, 9)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = tmp_path / "dynamics.png"
    plotted = runlog.plot_metrics(path, [("rollout/success_rate", "success rate"), ("missing/key", "x"),
                                         ("rollout/success/*", "success rate per task")], png, smooth=3)
    assert png.stat().st_size > 0
    assert set(plotted) == {"rollout/success_rate", "rollout/success/miniwob/a", "rollout/success/miniwob/b"}
    steps, line = plotted["rollout/success_rate"]
    assert steps == list(range(1, 9))
    assert line == pytest.approx([1, 1 / 2, 2 / 3, 1 / 3, 2 / 3, 1 / 3, 2 / 3, 1 / 3])
    steps, line = plotted["rollout/success/miniwob/b"]                   # odd steps only: 0.1, 0.3, 0.5, 0.7
    assert steps == [1, 3, 5, 7] and line == pytest.approx([0.1, 0.2, 0.3, 0.5])
    raw = runlog.plot_metrics(path, [("rollout/success_rate", "success rate")], png, smooth=0)
    assert raw["rollout/success_rate"][1] == [float(s % 2) for s in range(1, 9)]      # smooth=0: the raw values
    # a panel's own smoothing (a sparse periodic evaluation is drawn as measured), several rows of panels
    sparse = rows + [{"step": s, "val/success_rate": s / 8} for s in (0, 4, 8)]
    path.write_text("".join(json.dumps(r) + "\n" for r in sparse))
    panels = [("val/success_rate", "validation", 1)] + [("rollout/success_rate", f"panel {k}") for k in range(5)]
    both = runlog.plot_metrics(path, panels, png, smooth=3)
    assert both["val/success_rate"] == ([0, 4, 8], [0.0, 0.5, 1.0])
    assert both["rollout/success_rate"][1][1] == pytest.approx(1 / 2)
    # a validation rate with its episodes: the binomial standard error as error bars (none without the count)
    counted = sparse + [{"step": 12, "val/success_rate": 0.75, "val/episodes": 24.0}]
    path.write_text("".join(json.dumps(r) + "\n" for r in counted))
    assert "val/success_rate SE" not in runlog.plot_metrics(path, [("val/success_rate", "v", 1, "val/episodes")], png)
    path.write_text("".join(json.dumps(r | {"val/episodes": 24.0} if "val/success_rate" in r else r) + "\n"
                            for r in counted))
    bars = runlog.plot_metrics(path, [("val/success_rate", "v", 1, "val/episodes")], png)["val/success_rate SE"]
    assert bars[0] == [0, 4, 8, 12] and bars[1] == pytest.approx([0.0, (0.25 / 24) ** 0.5, 0.0, (0.1875 / 24) ** 0.5])


def test_per_task_success_metrics_reduce_over_ranks():
    """rollout.task_counts and task_success: each task's success in a step, reduced over ranks (the same keys on
    every rank); the site suite's mixed-start task counted per start too (even seeds logged in, odd out)."""
    import env
    import rollout
    tasks = env.load_tasks("miniwob:click-button,click-link,click-tab") + env.load_tasks("suite:stop-newsletter")
    a, b, _, suite = (t.task_id for t in tasks)
    traj = lambda task_id, reward, seed=0: SimpleNamespace(task_id=task_id, reward=reward, seed=seed)   # noqa: E731
    rank0 = rollout.task_counts([traj(a, 1.0), traj(a, 0.0), traj(b, 0.0), traj(suite, 1.0, 4)], tasks)
    rank1 = rollout.task_counts([traj(a, 1.0), traj(a, 1.0), traj(suite, 0.0, 7), traj(suite, 1.0, 9)], tasks)
    assert set(rank0) == set(rank1)                     # the same keys on every rank (_all_reduce_mean)
    mean = {k: (rank0[k] + rank1[k]) / 2 for k in rank0}
    stats = rollout.task_success({"rollout/success_rate": 0.6, **mean})
    assert stats == {"rollout/success_rate": 0.6, f"rollout/success/{a}": 0.75, f"rollout/success/{b}": 0.0,
                     f"rollout/success/{suite}": 2 / 3, f"rollout/success/{suite}@in": 1.0,
                     f"rollout/success/{suite}@out": 0.5}
    forced = env.load_tasks("suite:stop-newsletter@out")                # one kind of start: counted once
    assert rollout.task_counts([traj(forced[0].task_id, 1.0, 3)], forced) == {
        f"task_n/{forced[0].task_id}": 1.0, f"task_ok/{forced[0].task_id}": 1.0}


def findings_table():
    """scripts/findings_table.py as a module (a script: not importable by name)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("findings_table",
                                                  Path(__file__).resolve().parents[1] / "scripts" / "findings_table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    return table


INTENT_OUT = "Unsubscribe from the newsletter. If you need to log in, the username is alex and the password is s3."


def test_login_progress_counts_how_far_logged_out_episodes_get():
    """scripts/findings_table.py's reading of logged-out episodes: the username and password typed (as the intent
    states them, wherever typed), a page seen signed in, success."""
    table, intent = findings_table(), INTENT_OUT
    step = lambda action, obs="<h1> Log in </h1>": {"action": action, "observation": obs}   # noqa: E731
    typed = lambda text, el: f'do(action="Type", argument="{text}", element="{el}")'       # noqa: E731
    episodes = [
        {"intent": intent, "success": False, "steps": [step(None), step(typed("s3", "2"))]},        # derailed
        {"intent": intent, "success": False, "steps": [step(typed("alex", "0")), step(None, None)]},
        {"intent": intent, "success": True, "steps": [step(typed("alex", "0")), step(typed("s3", "1")),
                                                      step('do(action="Click", element="2")'),
                                                      step("exit()", "Signed in as alex <h1> Profile </h1>")]},
    ]
    assert table.login_progress(episodes) == {"episodes": 3, "typed username": 2, "typed password": 2,
                                              "logged in": 1, "succeeded": 1}


def test_login_table_per_data_condition(tmp_path):
    """The log-in stage's tables: the paper's example (login/) not run, the data condition (login-out1/) with one
    seed whose M-GRPO composes the skills (held-out logged-out 2 of 3 greedy; a logged-out rollout first succeeds at
    step 2) and its BC's sampled episodes on validation pages."""
    def episode(run, column, success, typed=(), seed=0):
        steps = [{"action": f'do(action="Type", argument="{t}", element="0")', "observation": ""} for t in typed]
        return {"run": run, "column": column, "task": column, "seed": seed, "intent": INTENT_OUT, "success": success,
                "steps": steps}

    def evaluation(path, episodes, args=None):
        path.mkdir(parents=True)
        runs = {}
        for r in episodes:
            runs.setdefault(r["run"], {}).setdefault(r["column"], []).append(r["success"])
        (path / "results.json").write_text(json.dumps({"args": args or {}, "runs": {
            run: {"columns": {c: {"success_rate": sum(v) / len(v)} for c, v in cols.items()}}
            for run, cols in runs.items()}}))
        (path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in episodes))

    root = tmp_path / "login-out1"
    evaluation(root / "s0" / "eval", [episode("bc", "stop-newsletter@out", False, ["alex"], seed=0),
                                      episode("bc", "stop-newsletter@out", False, seed=1),
                                      episode("bc", "stop-newsletter@out", False, seed=2),
                                      episode("rl", "stop-newsletter@out", True, seed=0),
                                      episode("rl", "stop-newsletter@out", True, seed=1),
                                      episode("rl", "stop-newsletter@out", False, seed=2),
                                      episode("rl", "stop-newsletter@in", True, seed=3),     # not paired: logged in
                                      episode("bc", "stop-newsletter@in", False, seed=3)])
    (root / "s0" / "rl").mkdir()
    key = "rollout/success/sitesuite/stop-newsletter@out"
    (root / "s0" / "rl" / "metrics.jsonl").write_text("".join(json.dumps({"step": s, key: r}) + "\n"
                                                              for s, r in ((1, 0.0), (2, 0.25), (3, 0.5))))
    evaluation(root / "explore-t0.5", [episode("bc", "stop-newsletter@out", False, ["alex", "s3"])] * 2,
               {"temperature": 0.5, "samples": 2, "episodes": 1})
    # the script, the log-in stage alone (no make demo beside it: FINDINGS=login make demo-findings)
    subprocess.run([sys.executable, "scripts/findings_table.py", "--out", str(tmp_path), "--demo",
                    str(tmp_path / "no-demo")], cwd=Path(__file__).resolve().parents[1], check=True, capture_output=True)
    text = (tmp_path / "findings.md").read_text()
    assert f"No evaluation of make demo in {tmp_path / 'no-demo' / 'eval'}" in text
    assert "not run yet (`FINDINGS=login make demo-findings`)" in text
    assert "## The log-in argument: BC on logged-in starts and 1 logged-out demonstration (the data condition)" in text
    assert "| 0 | 0.0 | 66.7 | +66.7 +- 33.3 | yes | 2 | 25.0 |" in text and "composed in 1 of 1 seeds" in text
    assert "episodes 3, typed username 1, typed password 0, logged in 0, succeeded 0" in text      # BC, greedy
    assert (f"BC sampled at T = 0.5, 2 samples on each of 1 validation pages ({root / 'explore-t0.5'}): "
            "episodes 2, typed username 2, typed password 2") in text


def test_findings_outcomes_saved_and_read_back(tmp_path):
    """--save-outcomes keeps what the model rows pair; --outcomes reads it back with make demo's run, the
    reference seed's directory and R1-CoT's (at 320 tokens) gone: the rows are the same to the digit, and a model
    evaluated in a directory wins over the file's."""
    def evaluation(path, rates):
        path.mkdir(parents=True)
        (path / "results.json").write_text(json.dumps({"args": {"max_new_tokens": 64, "episodes": 4}, "budgets": [6]}))
        with open(path / "trajectories.jsonl", "w") as f:
            for run, rate in rates.items():
                for seed in range(4):
                    for decoding, sample in (("T = 1", 0), ("T = 1", 1), ("greedy", 0)):
                        success = (seed + sample + len(run)) % 4 < 4 * rate
                        f.write(json.dumps({"run": run, "task": "miniwob/click-button", "seed": seed, "sample": sample,
                                            "decoding": decoding, "success": success, "num_steps": 2 + seed % 2,
                                            "steps": [{"response": "r"}]}) + "\n")

    demo, out, saved = tmp_path / "demo", tmp_path / "findings", tmp_path / "outcomes.jsonl.gz"
    evaluation(demo / "eval", {"base": 0.25, "bc": 0.5, "rl": 0.75})
    evaluation(out / "test" / "rl-s1", {"rl-s1": 1.0})
    evaluation(out / "cot320" / "test" / "pair", {"bc": 0.5, "cot-bc": 0.25})      # R1-CoT's stage at 320 tokens
    script = [sys.executable, "scripts/findings_table.py", "--out", str(out)]
    root = Path(__file__).resolve().parents[1]

    def table(*flags):
        subprocess.run(script + list(flags), cwd=root, check=True, capture_output=True)
        text = (out / "findings.md").read_text()
        return text[text.index("## Reference rows"):text.index("## The thinking format")]

    first = table("--demo", str(demo), "--save-outcomes", str(saved))
    assert "BC + M-GRPO s0 75.0, s1 100.0" in first and saved.stat().st_size < 2000
    assert "M-GRPO, at 320 new tokens a turn" in first and "(a) CoT BC 25.0 - BC 50.0 = -25.0" in first
    for gone in (demo, out / "test", out / "cot320"):
        shutil.rmtree(gone)
    assert table("--demo", str(demo), "--outcomes", str(saved)) == first
    evaluation(out / "test" / "rl-s1", {"rl-s1": 0.0})                  # evaluated again: the directory wins
    assert "s1 0.0" in table("--demo", str(demo), "--outcomes", str(saved))
    bad = subprocess.run(script + ["--demo", str(demo), "--save-outcomes", str(tmp_path / "x.gz")], cwd=root,
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "--save-outcomes: no evaluation of make demo" in bad.stderr
