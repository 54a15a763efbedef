# Two entry points on a fresh machine: `make demo` and `make test`. Each creates .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-install

.PHONY: demo test lint venv clean bench

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,models]'
	# silero-vad declares torch and imports it in __init__; we only read its data files.
	$(BIN)/python -m pip install -q --no-deps silero-vad
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/asyncjit demo && $(BIN)/asyncjit demo --streams 64

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

# Benchmarks compare against JAX too, so they install the bench extra first.
bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
