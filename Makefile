# make bench   — create .venv, install, run the default benchmark (baseline on the generated task), write leaderboards/
# make test    — install, lint (ruff), run the test suite (tests marked slow excluded; make test-all runs them too)
# make test-slurm — as root: start a one-node SLURM (.ci/slurm.sh), run the tests marked slurm against it, stop it
PYTHON ?= python3
VENV ?= .venv
METHOD ?=
DATASET ?= generated
CONFIG ?=
TASKS ?=
FRACTIONS ?=
SEEDS ?=
BACKBONE ?=
DATA_DIR ?=
JOBS ?= 1
SET ?=
TABLE ?=

BIN := $(VENV)/bin
SWEEP_ARGS := $(if $(CONFIG),--config $(CONFIG),--dataset $(DATASET)) $(if $(METHOD),--method $(METHOD)) \
	$(if $(TASKS),--tasks $(TASKS)) $(if $(FRACTIONS),--fractions $(FRACTIONS)) $(if $(SEEDS),--seeds $(SEEDS)) \
	$(if $(BACKBONE),--backbone $(BACKBONE))
BENCH_ARGS := $(SWEEP_ARGS) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --jobs $(JOBS) $(foreach s,$(SET),--set $(s))

.PHONY: install bench bench-paper status leaderboard lint test test-all test-slurm clean

install: $(BIN)/.installed

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[offline,test]'
	touch $@

bench: install
	$(BIN)/klm bench $(BENCH_ARGS)

# make bench-paper TABLE=kam-table6: the sweeps of one paper table (benchmarks/tables.yaml; TABLE=all: everything)
bench-paper: install
	$(if $(TABLE),,$(error name a table: make bench-paper TABLE=kam-table6 (see benchmarks/tables.yaml)))
	$(BIN)/klm bench --table $(TABLE) $(if $(FRACTIONS),--fractions $(FRACTIONS)) $(if $(SEEDS),--seeds $(SEEDS)) \
		$(if $(BACKBONE),--backbone $(BACKBONE)) $(if $(DATA_DIR),--data-dir $(DATA_DIR)) --jobs $(JOBS) $(foreach s,$(SET),--set $(s))

status: install
	$(BIN)/klm status $(SWEEP_ARGS)

leaderboard: install
	$(BIN)/klm leaderboard
	$(BIN)/klm export

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest -q -m "not slow and not slurm"

test-all: lint
	$(BIN)/python -m pytest -q -m "not slurm"

$(BIN)/.slurm-installed: $(BIN)/.installed
	$(BIN)/pip install -q -e '.[slurm]'
	touch $@

# Each test is bounded (a hang fails it); SLURM_TESTS_RUN=1 fails on a skip: the SLURM that started must answer.
test-slurm: $(BIN)/.slurm-installed
	.ci/slurm.sh run env SLURM_TESTS_RUN=1 $(BIN)/python -m pytest -q -m slurm -p no:cacheprovider

clean:
	rm -rf runs .cache
