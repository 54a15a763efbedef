# Two entry points on a fresh machine: `make demo` and `make test`. Each creates .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make demo` installs only what the demo needs; `make test` every extra, so every test runs.
DEMO_STAMP := $(VENV)/.stamp-demo
TEST_STAMP := $(VENV)/.stamp-test
PIP := $(BIN)/python -m pip install --progress-bar on

.PHONY: demo test lint venv clean bench fuzz fuzz-onnx fuzz-serve fuzz-mux fuzz-runtime

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# silero-vad declares torch and imports it in __init__; asyncjit only reads its ONNX files.
$(DEMO_STAMP): pyproject.toml $(BIN)/python
	@echo "installing asyncjit with the demo's extras (onnx, audio, cli) into $(VENV) ..."
	$(PIP) -e '.[models,audio,cli]'
	$(PIP) --no-deps silero-vad
	touch $(DEMO_STAMP)

$(TEST_STAMP): pyproject.toml $(BIN)/python
	@echo "installing asyncjit with every extra and the test tools into $(VENV) ..."
	$(PIP) -e '.[test,all]'
	$(PIP) --no-deps silero-vad
	touch $(TEST_STAMP) $(DEMO_STAMP)

venv: $(TEST_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/asyncjit demo && $(BIN)/asyncjit demo --streams 64

# The suite on two processes (pytest-xdist), whole files to a process so a module's fixtures (one
# Ray cluster, one server) start once: CI's two cores run it in about half the time of one.
TEST_WORKERS ?= 2
test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The differential fuzzer (not part of `make test`, which runs a short fixed-seed slice of it):
# random graphs through every compile path against the reference; prints a repro per failure.
MINUTES ?= 10
SEED ?= 1
fuzz: $(TEST_STAMP)
	$(BIN)/python tests/fuzz.py --minutes $(MINUTES) --seed $(SEED)

# Mutated ONNX models (attributes, initializers, inputs, opsets, bytes): typed errors or a run
fuzz-onnx: $(TEST_STAMP)
	$(BIN)/python tests/fuzz.py --onnx --minutes $(MINUTES) --seed $(SEED)

# Misbehaving network clients against `asyncjit serve` on asyncio, uvloop and trio
fuzz-serve: $(TEST_STAMP)
	$(BIN)/python tests/serve_chaos.py --minutes $(MINUTES) --seed $(SEED)

# Misbehaving streams (cancels, timeouts, failed batches, closes, exits) against one StreamMux
fuzz-mux: $(TEST_STAMP)
	$(BIN)/python tests/mux_chaos.py --minutes $(MINUTES) --seed $(SEED)

# Random buffer programs (donation, failures, copies, deletes) from two threads on two devices
fuzz-runtime: $(TEST_STAMP)
	$(BIN)/python tests/runtime_chaos.py --minutes $(MINUTES) --seed $(SEED)

bench: $(TEST_STAMP)
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
