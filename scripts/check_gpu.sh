#!/usr/bin/env bash
# Before a CUDA install (scripts/setup.sh): can this machine run the pinned vLLM (requirements-gpu.txt)?
# vllm 0.33.0 needs Python >= 3.11, and its wheels are CUDA 13 builds (libnvrtc.so.13), which need an NVIDIA
# driver >= 580. Prints one line saying what to change and exits 1 if not; silent, exit 0, if so.
#   bash scripts/check_gpu.sh PYTHON        (the interpreter the venv is, or will be, made with)
set -uo pipefail
PYTHON=${1:-python3}
MIN_DRIVER=580
ver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || {
  echo "setup: cannot run $PYTHON; give a Python >= 3.11 with PYTHON=/path/to/python3.11 make setup"; exit 1; }
if [ "$(printf '%s\n' 3.11 "$ver" | sort -V | head -1)" != 3.11 ]; then
  echo "setup: Python $ver is too old for vllm 0.33 (requirements-gpu.txt needs >= 3.11): PYTHON=python3.11 make setup (rm -rf .venv first)"
  exit 1
fi
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
major=${driver%%.*}
if ! [[ "$major" =~ ^[0-9]+$ ]]; then
  echo "setup: nvidia-smi reports no driver version ('$driver'); fix the NVIDIA driver, or WEBAGENT_VLLM=0 make setup for a CPU-only install"
  exit 1
fi
if [ "$major" -lt "$MIN_DRIVER" ]; then
  echo "setup: NVIDIA driver $driver is older than CUDA 13 needs (>= $MIN_DRIVER) for vllm 0.33's wheels: upgrade the driver, or WEBAGENT_VLLM=0 make setup (no vLLM; --backend hf)"
  exit 1
fi
