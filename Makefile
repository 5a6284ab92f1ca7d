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

# The docs need MkDocs alone: the API pages are read from src/ without importing it.
$(DOCS_STAMP): requirements-docs.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-docs.txt
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

# `make test` prints how long each part took (tools/parts.py) and uses both cores: the
# tests are independent, and each holds beside busy processes, so two run at a time.
PARTS := $(BIN)/python tools/parts.py
XDIST := -n 2 --dist worksteal
# The suite starts hundreds of Python processes: with PYTHONDONTWRITEBYTECODE set in the
# environment each of them compiled gpuwise's modules (and pytest each test module) again.
# Bytecode goes to the tree's __pycache__ folders (ignored by git; `make clean` removes them).
test test-variants: export PYTHONDONTWRITEBYTECODE =
test: $(STAMP)
	$(PARTS) start
	$(PARTS) run lint -- $(MAKE) --no-print-directory lint
	$(PARTS) run suite -- $(BIN)/pytest -q $(XDIST)
	$(MAKE) --no-print-directory test-variants
	$(PARTS) summary

# The tests that compare with this CPU's kernels, threads or allocator (marked `kernels`)
# again: on 1 thread with AVX2 kernels (as on a small CPU without AVX-512), and on 3 threads
# (more than the cores). Then the tests that measure time or the CPU share (marked
# `timing`) beside 4 busy processes (tools/under_load.py): a test that cannot hold under
# load is marked `quiet("why")` and skips with that reason there.
# Only the files that use a marker are collected for its pass (collecting all of them took
# about 10 s a pass).
marked = $(shell grep -rlE 'mark\.$(1)\b' tests | sort)
VARIANTS = -m kernels $(XDIST) $(call marked,kernels)
test-variants: $(STAMP)
	$(PARTS) run "1 thread, AVX2 kernels (kernels)" -- env OMP_NUM_THREADS=1 \
		ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 $(BIN)/pytest -q $(VARIANTS)
	$(PARTS) run "3 threads (kernels)" -- env OMP_NUM_THREADS=3 $(BIN)/pytest -q $(VARIANTS)
	$(PARTS) run "beside 4 busy processes (timing)" -- $(BIN)/python tools/under_load.py \
		--hogs 4 -- $(BIN)/pytest -q -m timing $(XDIST) $(call marked,timing)

bench: $(STAMP)  # quick pass over every budget; run a script without --quick for README figures
	for b in benchmarks/[a-z]*.py; do $(BIN)/python $$b --quick || exit 1; done

gpu-check: $(STAMP)  # every GPU-only check, one JSON of figures; says so and exits 0 without a GPU
	$(BIN)/python tools/gpu_check.py --out gpu-check.json

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
	find src tests benchmarks examples tools -name __pycache__ -type d -prune -exec rm -rf {} +

.PHONY: faults
faults: $(STAMP)  # the fault-injection suite: signals, closed stdout, full disk, hostile inputs
	$(BIN)/pytest -q tests/faults
