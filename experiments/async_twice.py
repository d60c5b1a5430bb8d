"""Issue 100, item 4: whether two runs of one --async-steps 1 command (experiments/async_twice.sh) wrote the same
weights (sha256 of hf/model.safetensors) and the same metrics, wall-clock figures apart; exit 1 if not.

    .venv/bin/python experiments/async_twice.py runs/twice/a runs/twice/b
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path


def record(run: Path) -> tuple[str, list[dict]]:
    weights = hashlib.sha256((run / "hf" / "model.safetensors").read_bytes()).hexdigest()
    rows = [{k: v for k, v in json.loads(line).items() if k != "time" and not k.endswith(("seconds", "per_minute"))}
            for line in (run / "metrics.jsonl").read_text().splitlines()]
    return weights, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs=2, type=Path)
    (wa, ma), (wb, mb) = (record(r) for r in ap.parse_args().runs)
    differ = [ra["step"] for ra, rb in zip(ma, mb) if ra != rb] + (["steps"] if len(ma) != len(mb) else [])
    print(f"weights: {wa[:16]} / {wb[:16]} ({'the same' if wa == wb else 'DIFFERENT'}); metrics of {len(ma)} logged "
          f"steps: {'the same' if not differ else f'DIFFERENT at {differ}'}")
    sys.exit(0 if wa == wb and not differ else 1)


if __name__ == "__main__":
    main()
