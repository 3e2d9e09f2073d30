# Two commands for a fresh machine: `make demo` and `make test`. Both set everything up first.
# `make test PY=3.13` (or 3.14, and likewise demo, fuzz, test-verify, test-slow, bench) runs the same
# target under that CPython, inside a Debian root that scripts/pyroot.sh builds once; `make test-all`
# tests 3.11 (this machine's Python), 3.13 and 3.14.
PY ?=
OTHER_PYTHONS := 3.13 3.14
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
EXT_STAMP := minidynamo/.ext-stamp-$(shell $(PYTHON) -c "import sys; print('%d%d' % sys.version_info[:2])")
CSRC := $(wildcard csrc/*.c csrc/*.h)
# Torch is pinned so pip takes the CPU wheel from local disk instead of resolving a CUDA build.
TORCH_PIN := torch==2.13.0
TEST_WORKERS ?= 2
SEED ?= 0
N ?= 1000
FUZZ_OUT ?= fuzz_failures

.PHONY: setup build demo test test-all test-reference test-slow test-verify bench fuzz clean

ifneq ($(PY),)
setup build demo test test-reference test-slow test-verify bench fuzz:
	scripts/pyroot.sh $(PY) $(MAKE) $@ PY= PYTHON=python$(PY) VENV=/opt/venv TEST_WORKERS=$(TEST_WORKERS) \
	    SEED=$(SEED) N=$(N) FUZZ_OUT=$(FUZZ_OUT) FUZZ_ARGS='$(FUZZ_ARGS)' BENCH_ARGS='$(BENCH_ARGS)'
else

setup: $(STAMP) $(EXT_STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -c "import torch" 2>/dev/null || $(VPY) -m pip install -q $(TORCH_PIN)
	$(VPY) -m pip install -q numpy pytest pytest-xdist bytecode setuptools wheel transformers diffusers depyf matplotlib peft torchdiffeq scipy einops \
	    kornia monai torchmetrics torch_geometric gpytorch
	$(VPY) -m pip install -q --no-deps "triton>=3.4"
	touch $@

$(EXT_STAMP): $(STAMP) $(CSRC) setup.py
	$(VPY) -m pip install -q --no-build-isolation --no-deps -e .
	$(VPY) setup.py -q build_ext --inplace
	touch $@

build: setup

demo: setup
	PYTHONPATH=. $(VPY) examples/demo.py

# Tests run in TEST_WORKERS processes (pytest-xdist); the multi-process DDP/FSDP runs are marked slow and
# run by `make test-slow`.
test: setup
	$(VPY) -m pytest -q -n $(TEST_WORKERS) tests

# The test files written for both, run against torch._dynamo instead of minidynamo: cases where
# torch differs are marked there (xfail in reference mode), so this passing is the comparison.
REFERENCE_TESTS = $(shell grep -lE "translator_harness|break_harness|MINIDYNAMO_TEST_REFERENCE" tests/test_*.py)
test-reference: setup
	MINIDYNAMO_TEST_REFERENCE=torch $(VPY) -m pytest -q -n $(TEST_WORKERS) $(REFERENCE_TESTS)

test-slow: setup
	$(VPY) -m pytest -q -n $(TEST_WORKERS) -m slow tests

# Differential fuzzing: N random programs and mutation sequences from SEED, each compiled call compared with
# eager; every failing case is written as a standalone repro script into FUZZ_OUT.
fuzz: setup
	PYTHONPATH=tests:. $(VPY) -m fuzz --seed $(SEED) --n $(N) --out $(FUZZ_OUT) $(FUZZ_ARGS)

# The translator and graph-break suites with every compiled call also checked against eager.
test-verify: setup
	MINIDYNAMO_VERIFY=1 $(VPY) -m pytest -q tests/test_translator_*.py tests/test_graph_breaks_*.py tests/test_with_block_breaks.py

bench: setup
	$(VPY) -c "import matplotlib" 2>/dev/null || $(VPY) -m pip install -q matplotlib
	$(VPY) -m benchmarks $(BENCH_ARGS)

endif

test-all:
	$(MAKE) test PY=
	$(foreach v,$(OTHER_PYTHONS),$(MAKE) test PY=$(v) &&) true

clean:
	rm -rf build *.egg-info minidynamo/_C*.so minidynamo/.ext-stamp*
