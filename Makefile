# Two commands for a fresh machine: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
EXT_STAMP := minidynamo/.ext-stamp
CSRC := $(wildcard csrc/*.c csrc/*.h)
# Torch is pinned so pip takes the CPU wheel from local disk instead of resolving a CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: setup build demo test test-slow test-verify bench fuzz clean

setup: $(STAMP) $(EXT_STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_PIN)
	$(PY) -m pip install -q numpy pytest pytest-xdist bytecode setuptools wheel transformers depyf matplotlib peft torchdiffeq scipy
	$(PY) -m pip install -q --no-deps "triton>=3.4"
	touch $@

$(EXT_STAMP): $(STAMP) $(CSRC) setup.py
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .
	$(PY) setup.py -q build_ext --inplace
	touch $@

build: setup

demo: setup
	PYTHONPATH=. $(PY) examples/demo.py

# Tests run in TEST_WORKERS processes (pytest-xdist); the multi-process DDP/FSDP runs are marked slow and
# run by `make test-slow`.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) tests

test-slow: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m slow tests

# Differential fuzzing: N random programs and mutation sequences from SEED, each compiled call compared with
# eager; every failing case is written as a standalone repro script into FUZZ_OUT.
SEED ?= 0
N ?= 1000
FUZZ_OUT ?= fuzz_failures
fuzz: setup
	PYTHONPATH=tests:. $(PY) -m fuzz --seed $(SEED) --n $(N) --out $(FUZZ_OUT) $(FUZZ_ARGS)

# The translator and graph-break suites with every compiled call also checked against eager.
test-verify: setup
	MINIDYNAMO_VERIFY=1 $(PY) -m pytest -q tests/test_translator_*.py tests/test_graph_breaks_*.py tests/test_with_block_breaks.py

bench: setup
	$(PY) -c "import matplotlib" 2>/dev/null || $(PY) -m pip install -q matplotlib
	$(PY) -m benchmarks

clean:
	rm -rf build *.egg-info minidynamo/_C*.so $(EXT_STAMP)
