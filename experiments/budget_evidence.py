"""Keep the per-episode outcomes of an experiment's evaluations in the repository, compact: a later run (a fresh
machine, without runs/) pairs against these on the same pages. demo_credit.sh's today; demo_budget.sh's and
suite_onpolicy.sh's (scripts at e8dff0f: `git checkout e8dff0f`) made the other two files.

    .venv/bin/python experiments/budget_evidence.py [runs/budget [OUT]]   # OUT: experiments/evidence/issue32_budget_validation.json
    .venv/bin/python experiments/budget_evidence.py runs/credit experiments/evidence/issue42_credit_validation.json
    .venv/bin/python experiments/budget_evidence.py runs/suite-onpolicy experiments/evidence/issue42_suite_onpolicy.json bc

Each run: its outcomes ("TASK/SEED": 0 or 1) and the sha256 of the BC weights it started from (BC, the third
argument, defaults to bc300; a retrained BC with another hash is another baseline: pair a run only with runs of
its own hash). Runs already in the file stay; a run evaluated again replaces its entry."""
import hashlib
import json
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/budget")
out = Path(sys.argv[2]) if len(sys.argv) > 2 else \
    Path(__file__).resolve().parent.parent / "experiments/evidence/issue32_budget_validation.json"
bc_dir = sys.argv[3] if len(sys.argv) > 3 else "bc300"
bc = hashlib.sha256((root / bc_dir / "hf/model.safetensors").read_bytes()).hexdigest()
data = json.loads(out.read_text()) if out.exists() else {
    "what": "greedy success per validation page (env.VALID_SEEDS 500000..500029 of the demo's 8 tasks, <= 6 "
            "interactions, prompt short, 64 new tokens) of BC 300 and the M-GRPO runs evaluated beside it "
            f"({root.name}: experiments/demo_budget.sh or experiments/demo_credit.sh)" if bc_dir == "bc300" else
            f"greedy success per episode of {root.name}'s BC ({bc_dir}) and the M-GRPO runs evaluated beside it "
            "(the evaluation's name ends in -valid or -test: its seeds; see the script that made them)",
    "runs": {}}
for d in sorted((root / "evals").iterdir()):
    if (d / "results.json").exists():
        recs = [json.loads(line) for line in (d / "trajectories.jsonl").read_text().splitlines()]
        data["runs"][d.name] = {f"{bc_dir}_sha256": bc,
                                "outcomes": {f"{r['task']}/{r['seed']}": int(bool(r["success"])) for r in recs}}
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(data, indent=1) + "\n")
counts = (f"{name} {sum(run['outcomes'].values())}/{len(run['outcomes'])}" for name, run in data["runs"].items())
print(f"{out}: " + ", ".join(counts))
