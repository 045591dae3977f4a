# make bench   — create .venv, install, run the default benchmark (baseline on the generated task), write leaderboards/
# make test    — install, lint (ruff), run the test suite (tests marked slow excluded; make test-all runs them too)
# make test-slurm — as root: start a one-node SLURM (.ci/slurm.sh), run the tests marked slurm against it, stop it;
#                   then the same with accounting (slurmdbd, mariadb) for those marked slurm_accounting
# make help    — every variable and target, one line each (from the `##` comments below)
# A variable's `##` follows its value without a space: make would keep the space in the value.
PYTHON ?= python3## the Python that creates the virtual environment
VENV ?= .venv## the virtual environment's folder
METHOD ?=## methods, comma-separated (default: the config's)
DATASET ?= generated## the dataset whose benchmarks/<dataset>.yaml runs (without CONFIG)
CONFIG ?=## a sweep config to run instead of DATASET's
TASKS ?=## tasks, comma-separated (default: the config's)
FRACTIONS ?=## train fractions, comma-separated (default: the config's)
SEEDS ?=## seeds, comma-separated (default: the config's)
BACKBONE ?=## a backbone name or folder (default: the config's)
DATA_DIR ?=## the data directory (default: DATA_DIR of the environment, else ../shared/data)
JOBS ?= 1## cells run side by side
SET ?=## training overrides, space-separated key=value (quote them: SET="lr=3e-5 epochs=5")
TABLE ?=## bench-paper: a paper table (benchmarks/tables/*.yaml) or a group of benchmarks/tables.yaml, or all
DRY ?=## bench, bench-paper: any value (DRY=1) prints the plan and runs nothing (--dry-run)

# A variable set on the command line that none of the above is: an error, not silently ignored. Settings of klm's
# environment (make bench KLM_SERVE=1 CUDA_VISIBLE_DEVICES=0) pass through to it, as make passes every such variable.
VARIABLES := $(shell sed -n 's/^\([A-Z_]*\) ?=.*/\1/p' $(firstword $(MAKEFILE_LIST)))
ENVIRONMENT := KLM_% HF_% CUDA_% WANDB_% NCCL_% OMP_% TORCH% PYTORCH_% TRANSFORMERS_% TOKENIZERS_% PYTHON%
UNKNOWN := $(filter-out $(VARIABLES) $(ENVIRONMENT),\
	$(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v))))
$(if $(UNKNOWN),$(error unknown variable(s) $(UNKNOWN): make help lists them))

BIN := $(VENV)/bin
SWEEP_ARGS := $(if $(CONFIG),--config $(CONFIG),--dataset $(DATASET)) $(if $(METHOD),--method $(METHOD)) \
	$(if $(TASKS),--tasks $(TASKS)) $(if $(FRACTIONS),--fractions $(FRACTIONS)) $(if $(SEEDS),--seeds $(SEEDS)) \
	$(if $(BACKBONE),--backbone $(BACKBONE))
BENCH_ARGS := $(SWEEP_ARGS) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --jobs $(JOBS) $(foreach s,$(SET),--set $(s)) \
	$(if $(DRY),--dry-run)

.DEFAULT_GOAL := install
.PHONY: help install bench bench-paper status leaderboard lint test test-all test-slurm clean

help: ## this list: the variables (make bench DATASET=glue JOBS=4) and the targets
	@echo "variables (make TARGET NAME=value; default after =):"
	@sed -n 's/^\([A-Z_]*\) ?= *\([^#]*\)## *\(.*\)/  \1=\2	\3/p' $(firstword $(MAKEFILE_LIST)) | expand -t 24
	@echo "  KLM_*, HF_*, CUDA_*, ... settings of klm's environment, passed through to it"
	@echo "targets:"
	@sed -n 's/^\([a-z-]*\):[^#]*## *\(.*\)/  \1	\2/p' $(firstword $(MAKEFILE_LIST)) | expand -t 24

install: $(BIN)/.installed ## create the virtual environment and install the suite (once)

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[offline,test]'
	touch $@

bench: install ## run a benchmark sweep (DATASET, CONFIG, METHOD, ...), then write leaderboards/
	$(BIN)/klm bench $(BENCH_ARGS)

# make bench-paper TABLE=kam-table6: the sweeps of one paper table (benchmarks/tables/*.yaml; groups in benchmarks/tables.yaml; TABLE=all: everything)
bench-paper: install ## the sweeps of one paper table: TABLE=kam-table6 (benchmarks/tables/; all)
	$(if $(TABLE),,$(error name a table: make bench-paper TABLE=kam-table6 (see benchmarks/tables/)))
	$(BIN)/klm bench --table $(TABLE) $(if $(FRACTIONS),--fractions $(FRACTIONS)) $(if $(SEEDS),--seeds $(SEEDS)) \
		$(if $(BACKBONE),--backbone $(BACKBONE)) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --jobs $(JOBS) $(foreach s,$(SET),--set $(s)) \
		$(if $(DRY),--dry-run)

status: install ## the sweep's cells: done, running (by whom), partial, failed, missing
	$(BIN)/klm status $(SWEEP_ARGS)

leaderboard: install ## regenerate leaderboards/ and leaderboards/data/ from the whole results store
	$(BIN)/klm leaderboard
	$(BIN)/klm export

lint: install ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The suite over every core (pytest-xdist); a test file's tests stay on one worker (module fixtures start once), the
# files handed out in the order tests/conftest.py collects them (the longest first), not by their number of tests.
TEST_ARGS := -n auto --dist loadfile --no-loadscope-reorder

test: lint ## lint, then the tests (those marked slow or slurm left out): what CI runs
	$(BIN)/python -m pytest -q $(TEST_ARGS) -m "not slow and not slurm"

$(BIN)/.slurm-installed: $(BIN)/.installed
	$(BIN)/pip install -q -e '.[slurm]'
	touch $@

# Each test is bounded (a hang fails it); SLURM_TESTS_RUN=1 fails on a skip: the SLURM that started must answer.
test-slurm: $(BIN)/.slurm-installed ## as root: the tests marked slurm against a one-node SLURM it starts and stops (then with accounting)
	.ci/slurm.sh run env SLURM_TESTS_RUN=1 $(BIN)/python -m pytest -q -m "slurm and not slurm_accounting" -p no:cacheprovider
	.ci/slurm.sh run --accounting env SLURM_TESTS_RUN=1 $(BIN)/python -m pytest -q -m slurm_accounting -p no:cacheprovider

test-all: lint ## lint, then every test, the slow ones too (not the SLURM ones: make test-slurm)
	$(BIN)/python -m pytest -q $(TEST_ARGS) -m "not slurm"

clean: ## remove runs/ and .cache/ (the results store stays)
	rm -rf runs .cache
