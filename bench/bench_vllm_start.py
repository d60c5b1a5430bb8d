"""A vLLM engine's start and a few requests, compiled (vLLM's default: torch.compile, CUDA graphs on a GPU) against
``--vllm-eager`` (``enforce_eager``), each in a fresh process, the two alternating round by round.

    .venv/bin/python bench/bench_vllm_start.py --rounds 2

Prints, per round, each kind's seconds to a started engine (imports included) and for the requests, then the
eager / compiled ratios of the rounds' medians. The first compiled start on a machine compiles the model for the
inductor cache (~/.cache/vllm); later ones load it.
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r'''
import asyncio, json, sys, time
t0 = time.time()
from engines.vllm_backend import VLLMBackend

async def main(model, eager, requests):
    backend = VLLMBackend(model, max_new_tokens=40, max_model_len=2048, enforce_eager=eager)
    t1 = time.time()
    for seed in range(requests):
        await backend.generate(list(range(100, 400)), seed=seed)
    t2 = time.time()
    await backend.aclose()
    print("RESULT", json.dumps({"start": t1 - t0, "requests": t2 - t1}))

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])))
'''


def one(model: str, eager: bool, requests: int) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, model, str(int(eager)), str(requests)], cwd=ROOT,
                          capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the engine did not run:\n{proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="assets/tiny-web-base")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=8, help="seeded 300-token prompts, 40 new tokens each")
    args = ap.parse_args()
    seen = {"compiled": [], "eager": []}
    for r in range(args.rounds):
        for kind in seen:
            res = one(args.model, kind == "eager", args.requests)
            seen[kind].append(res)
            print(f"round {r} {kind:8s} start {res['start']:6.1f} s   {args.requests} requests {res['requests']:5.1f} s",
                  flush=True)
    for key in ("start", "requests"):
        med = {k: statistics.median(x[key] for x in v) for k, v in seen.items()}
        print(f"{key}: median compiled {med['compiled']:.1f} s, eager {med['eager']:.1f} s, "
              f"eager / compiled x{med['eager'] / med['compiled']:.2f}")


if __name__ == "__main__":
    main()
