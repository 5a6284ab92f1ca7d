# Two commands a newcomer runs: `make demo` and `make test`. Both set everything up from nothing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-variants lint bench clean gpu-check

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpuwise profile

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples tools
	$(BIN)/ruff format --check src tests benchmarks examples tools
	$(BIN)/mypy src

test: lint
	$(BIN)/pytest -q
	$(MAKE) test-variants

# The tests that compare with this machine (sizing, profiling, distributed) again on other
# CPU kernels: 1 and 3 threads, and AVX2 kernels (as on a CPU without AVX-512).
VARIANT_TESTS := tests/sizing tests/profiling tests/distributed
test-variants: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/pytest -q $(VARIANT_TESTS)
	OMP_NUM_THREADS=3 $(BIN)/pytest -q $(VARIANT_TESTS)
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 $(BIN)/pytest -q $(VARIANT_TESTS)

bench: $(STAMP)  # quick pass over every budget; run a script without --quick for README figures
	for b in benchmarks/[a-z]*.py; do $(BIN)/python $$b --quick || exit 1; done

gpu-check: $(STAMP)  # every GPU-only check, one JSON of figures; says so and exits 0 without a GPU
	$(BIN)/python tools/gpu_check.py --out gpu-check.json

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache

.PHONY: faults
faults: $(STAMP)  # the fault-injection suite: signals, closed stdout, full disk, hostile inputs
	$(BIN)/pytest -q tests/faults
