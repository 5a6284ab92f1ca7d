# Two commands a newcomer runs: `make demo` and `make test`. Both set everything up from nothing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
DOCS_STAMP := $(VENV)/.docs-installed

.PHONY: demo test test-variants lint bench clean gpu-check wheel-check docs docs-serve pictures

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

# The demo needs only the runtime set: torch and gpuwise's core dependencies (no test tools).
# --no-compile: byte-compiling all of torch's files took 3x the install itself; Python
# compiles the modules it imports on first use instead.
$(DEMO_STAMP): requirements-demo.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --no-compile --disable-pip-version-check -r requirements-demo.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)  # profile the built-in naive example; the HTML report lands in gpuwise-demo.html
	$(BIN)/gpuwise demo

$(DOCS_STAMP): requirements-docs.txt $(STAMP)
	$(BIN)/python -m pip install -q -r requirements-docs.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)  # the docs site into site/, warnings are errors
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(DOCS_STAMP)
	$(BIN)/mkdocs serve

pictures: $(STAMP)  # the README's terminal capture (SVG) and HTML screenshot (PNG), regenerated
	$(BIN)/python tools/make_pictures.py

wheel-check: $(STAMP)  # build sdist + wheel, install into a new venv outside the tree, run it there
	PYTHON=$(BIN)/python bash tools/wheel_check.sh

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples tools
	$(BIN)/ruff format --check src tests benchmarks examples tools
	$(BIN)/mypy src

test: lint
	$(BIN)/pytest -q
	$(MAKE) test-variants

# The tests that compare with this machine (sizing, profiling, distributed) again on other
# CPU kernels: 1 and 3 threads, and AVX2 kernels (as on a CPU without AVX-512). Then the
# timing and share tests beside 4 busy processes (tools/under_load.py): a test that cannot
# hold under load is marked `quiet("why")` and skips with that reason there.
VARIANT_TESTS := tests/sizing tests/profiling tests/distributed
LOAD_TESTS := tests/efficiency tests/sizing/speed tests/sizing/hardware tests/profiling
test-variants: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/pytest -q $(VARIANT_TESTS)
	OMP_NUM_THREADS=3 $(BIN)/pytest -q $(VARIANT_TESTS)
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 $(BIN)/pytest -q $(VARIANT_TESTS)
	$(BIN)/python tools/under_load.py --hogs 4 -- $(BIN)/pytest -q $(LOAD_TESTS)

bench: $(STAMP)  # quick pass over every budget; run a script without --quick for README figures
	for b in benchmarks/[a-z]*.py; do $(BIN)/python $$b --quick || exit 1; done

gpu-check: $(STAMP)  # every GPU-only check, one JSON of figures; says so and exits 0 without a GPU
	$(BIN)/python tools/gpu_check.py --out gpu-check.json

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .mypy_cache .ruff_cache

.PHONY: faults
faults: $(STAMP)  # the fault-injection suite: signals, closed stdout, full disk, hostile inputs
	$(BIN)/pytest -q tests/faults
