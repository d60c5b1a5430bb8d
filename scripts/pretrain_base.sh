#!/usr/bin/env bash
# `make pretrain`: rebuild assets/tiny-web-base, the pretrained tiny base that `make demo` starts from.
#
# Two stages of pretrain.py on synthetic pages (synthweb.py; no MiniWoB++ page, template or word list):
#   1. easy pages only (2-4 elements, no data-bbox, no filler, no system prompt): the model learns to copy
#      the instruction's label and to find the element that carries it (teacher-forced element id 0.96 after
#      1,000 steps, 1.00 after 3,000);
#   2. realistic pages (system prompt, data-bbox, 2-8 elements, filler, near-miss distractors; click, type and
#      multi-step select rows) with 30% easy rows kept in the mix.
# The committed base was made on one H100 with 16 CPU cores (rows are rendered by 12 worker processes):
# stage 1 5,087 steps in 235 s, stage 2 1,485 steps in 275 s. On a CPU box expect hours (rendering rows and
# the model's steps share the cores); OUT=dir writes elsewhere, STEPS1 / STEPS2 / WORKERS override the budgets.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-assets/tiny-web-base}
WORK=${WORK:-runs/pretrain}
WORKERS=${WORKERS:-12}
mkdir -p "$WORK"
$PY pretrain.py --model tiny:layers=4,hidden=192 --out "$WORK/easy" --easy-frac 1 --steps "${STEPS1:-5087}" \
  --batch 256 --lr 2e-3 --workers "$WORKERS" --probe-every 500 --probe-n 128
$PY pretrain.py --model "$WORK/easy/hf" --out "$WORK/full" --easy-frac 0.3 --steps "${STEPS2:-1485}" \
  --batch 256 --lr 1e-3 --warmup 100 --workers "$WORKERS" --probe-every 500 --probe-n 192
rm -rf "$OUT" && mkdir -p "$(dirname "$OUT")" && cp -r "$WORK/full/hf" "$OUT"
echo "base written to $OUT"
