"""Keep the per-episode outcomes of experiments/demo_quality.sh's evaluations in the repository, compact: a fresh
machine (without runs/) pairs a new run against these on the same pages and samples.

    .venv/bin/python experiments/quality_evidence.py [runs/quality [OUT]]
    # OUT: experiments/evidence/issue57_quality_validation.json (validation pages); the held-out test run's go to
    # experiments/evidence/issue57_quality_test.json

Each evaluated model: its outcomes ("TASK/SEED|DECODING|SAMPLE": 0 or 1), the sha256 of its weights and, for a
BC, the number of demonstrations it cloned. Models already in a file stay; one evaluated again replaces its entry."""
import hashlib
import json
import sys
from pathlib import Path

WHAT = ("issue 57, experiments/demo_quality.sh: BC on clean vs imperfect demonstrations and M-GRPO from them, {pages}"
        ", T = 1 x 2 samples with common noise and greedy, <= 6 interactions; outcome per (task/seed, decoding, "
        "sample) 0 or 1")
PAGES = {"valid": "validation pages (seeds 500000.., 25 per task)",
         "test": "held-out pages (env.EVAL_SEEDS, 50 per task)"}


def keep(root: Path, split: str, out: Path) -> None:
    data = json.loads(out.read_text()) if out.exists() else {
        "command": f"bash experiments/demo_quality.sh (its {split} evaluations), then "
                   "experiments/quality_evidence.py", "what": WHAT.format(pages=PAGES[split]), "runs": {}}
    for d in sorted((root / split).iterdir()):
        if not (d / "results.json").exists() or d.name.startswith("table"):
            continue
        recs = [json.loads(line) for line in (d / "trajectories.jsonl").read_text().splitlines()]
        model = Path(recs[0]["model"])
        if not model.is_absolute():
            model = root.parent.parent / model           # runs/quality/... from the repository root
        entry = {"sha256": hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()}
        demos = root / d.name.removesuffix("-f") / "demos.jsonl"
        if model.parent.name == "bc" and demos.exists():
            kept = [json.loads(line) for line in demos.read_text().splitlines()]
            entry["demos"] = sum(1 for r in kept if r.get("reward", 1.0) > 0 or not d.name.endswith("-f"))
        entry["outcomes"] = {f"{r['task']}/{r['seed']}|{r['decoding']}|{r['sample']}": int(bool(r["success"]))
                             for r in recs}
        data["runs"][d.name] = entry
    out.write_text(json.dumps(data, indent=1) + "\n")
    counts = (f"{name} {sum(run['outcomes'].values())}/{len(run['outcomes'])}" for name, run in data["runs"].items())
    print(f"{out}: " + ", ".join(counts))


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/quality")
    evidence = Path(__file__).resolve().parent / "evidence"
    keep(root, "valid", Path(sys.argv[2]) if len(sys.argv) > 2 else evidence / "issue57_quality_validation.json")
    if (root / "test").exists():
        keep(root, "test", evidence / "issue57_quality_test.json")


if __name__ == "__main__":
    main()
