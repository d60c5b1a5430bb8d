#!/usr/bin/env bash
# What a lent GPU machine runs first (docs/gpu.md "On a lent GPU machine"): the one-device training path
# (bench/gpu_path.py) at Qwen2.5-0.5B and -3B shapes, the 3B update at the M-GRPO defaults' context (micro-batch
# 4 of samples up to 16,384 tokens), then the tests marked gpu, and the CPU suite's files that need no browser (a
# GPU machine of the device tool has neither Chromium nor vLLM).
#   bash bench/gpu_session.sh OUT_DIR        (PY=python3 by default; each part has its own time limit)
# Writes OUT_DIR/device.txt, gpu_path_<run>.json (+ .log), pytest_gpu.log and pytest_cpu.log; a part that fails
# leaves its log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/gpu}
PY=${PY:-python3}
mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import sys, torch, transformers, deepspeed; print('python', sys.version.split()[0], 'torch', \
torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__)"; } \
  2>&1 | tee "$OUT/device.txt"

path() {   # NAME SECONDS ARGS...: one gpu_path.py run, its JSON line kept
  local name=$1 limit=$2; shift 2
  timeout "$limit" $PY bench/gpu_path.py "$@" > "$OUT/gpu_path_$name.log" 2>&1
  echo "gpu_path $name: exit $?"
  tail -1 "$OUT/gpu_path_$name.log" | grep '^{' > "$OUT/gpu_path_$name.json" && cat "$OUT/gpu_path_$name.json"
}
# PARTS picks and orders them (default: all)
for part in ${PARTS:-0.5b 3b 3b-16k gpu-tests cpu-tests}; do
  case $part in
    0.5b) path 0.5b 150 --shape 0.5b ;;
    3b) path 3b 240 --shape 3b ;;
    # the defaults' context: 4 turns of 3,840 new prompt tokens + 256 action tokens = samples up to 16,384
    # tokens, in micro-batches of 4 (BC's step is left out: on one GPU it does not fit beside the update's cache)
    3b-16k) path 3b-16k 200 --shape 3b --groups 1 --group-size 4 --turns 4 --prompt-tokens 3840 \
              --action-tokens 256 --micro-batch 4 --bc-steps 0 ;;
    gpu-tests)   # the tests marked gpu, on the GPU
      WEBAGENT_GPU_TESTS=1 timeout 200 $PY -m pytest -q -p no:cacheprovider -m gpu tests > "$OUT/pytest_gpu.log" 2>&1
      echo "pytest -m gpu: exit $?"; tail -5 "$OUT/pytest_gpu.log" ;;
    cpu-tests)   # the CPU suite's files that need no browser, on this machine (CUDA hidden by tests/conftest.py)
      timeout 200 $PY -m pytest -q -p no:cacheprovider tests/test_policy.py tests/test_trainlib.py \
        tests/test_mgrpo_loss.py tests/test_compress.py tests/test_train_bc_data.py tests/test_gpu_path.py \
        tests/test_train_mgrpo.py::test_mgrpo_update_scores_actions_at_the_rollout_temperature > "$OUT/pytest_cpu.log" 2>&1
      echo "pytest (CPU suite, no browser): exit $?"; tail -5 "$OUT/pytest_cpu.log" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
