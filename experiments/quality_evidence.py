"""Keep the per-episode outcomes of issue 57's evaluations (experiments/demo_quality.sh, demo_exchange.sh) in the
repository, compact: a fresh machine (without runs/) pairs a new run against these on the same pages and samples.

    .venv/bin/python experiments/quality_evidence.py [runs/quality [OUT]]
    # OUT: experiments/evidence/issue57_quality_validation.json (validation pages); the held-out test run's go to
    # experiments/evidence/issue57_quality_test.json
    .venv/bin/python experiments/quality_evidence.py runs/exchange    # issue57_exchange_{validation,test}.json

Each evaluated model: its outcomes ("TASK/SEED|DECODING|SAMPLE": 0 or 1), the sha256 of its weights and, for a
BC, the number of demonstrations it cloned. Models already in a file stay; one evaluated again replaces its entry."""
import argparse
import hashlib
import json
import sys
from pathlib import Path

WHAT = {"quality": "BC on clean vs imperfect demonstrations and M-GRPO from them",
        "exchange": "BC on 20 / 40 / 80 / 160 clean demonstrations per task at each number of steps its rule 2 "
                    "tried (validation) or chose (test), and M-GRPO checkpoints from BC on 20 (test)"}
HOW = (", {pages}, T = 1 x 2 samples with common noise and greedy, <= 6 interactions; outcome per (task/seed, "
       "decoding, sample) 0 or 1")
PAGES = {"valid": "validation pages (seeds 500000.., 25 per task)",
         "test": "held-out pages (env.EVAL_SEEDS, 50 per task)"}


def keep(root: Path, split: str, out: Path) -> None:
    data = json.loads(out.read_text()) if out.exists() else {
        "command": f"bash experiments/demo_{root.name}.sh (its {split} evaluations), then "
                   f"experiments/quality_evidence.py runs/{root.name}",
        "what": f"issue 57, experiments/demo_{root.name}.sh: {WHAT[root.name]}" + HOW.format(pages=PAGES[split]),
        "runs": {}}
    for d in sorted((root / split).iterdir()):
        if not (d / "results.json").exists() or d.name.startswith(("table", "pair-")):   # joined tables
            continue
        recs = [json.loads(line) for line in (d / "trajectories.jsonl").read_text().splitlines()]
        model = Path(recs[0]["model"])
        if not model.is_absolute():
            model = root.parent.parent / model           # runs/quality/..., runs/exchange/... from the repository root
        entry = {"sha256": hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest()}
        demos = model.parent.parent / "demos.jsonl"                  # NAME/bc*/hf cloned NAME/demos.jsonl
        if not demos.exists():                                         # a successes-only twin: NAME-f/bc/hf
            demos = root / d.name.removesuffix("-f") / "demos.jsonl"
        if model.parent.name.startswith("bc") and demos.exists():
            kept = [json.loads(line) for line in demos.read_text().splitlines()]
            entry["demos"] = sum(1 for r in kept if r.get("reward", 1.0) > 0 or not d.name.endswith("-f"))
        entry["outcomes"] = {f"{r['task']}/{r['seed']}|{r['decoding']}|{r['sample']}": int(bool(r["success"]))
                             for r in recs}
        data["runs"][d.name] = entry
    out.write_text(json.dumps(data, indent=1) + "\n")
    counts = (f"{name} {sum(run['outcomes'].values())}/{len(run['outcomes'])}" for name, run in data["runs"].items())
    print(f"{out}: " + ", ".join(counts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="runs/quality", type=Path,
                    help="demo_quality.sh's or demo_exchange.sh's output: runs/quality (default) or runs/exchange")
    ap.add_argument("out", nargs="?", type=Path,
                    help="the validation pages' file (default: experiments/evidence/issue57_{quality,exchange}"
                         "_validation.json)")
    args = ap.parse_args()
    root = args.root
    if root.name not in WHAT:
        sys.exit(f"{root}: not an output of demo_quality.sh or demo_exchange.sh (runs/quality, runs/exchange)")
    evidence = Path(__file__).resolve().parent / "evidence"
    keep(root, "valid", args.out or evidence / f"issue57_{root.name}_validation.json")
    if (root / "test").exists():
        keep(root, "test", evidence / f"issue57_{root.name}_test.json")


if __name__ == "__main__":
    main()
