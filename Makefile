# make demo: create .venv, install, then validate, preview and render every example offline.
# make test: create .venv, install with the test extra, lint and run the test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	@set -e; for m in examples/*.yaml; do \
	  stack=stacks/Pulumi.$$(basename $$m .yaml).yaml; \
	  echo "== $$m"; \
	  $(BIN)/aichor-iac validate $$m; \
	  $(BIN)/aichor-iac preview $$m --stack-config $$stack; \
	  $(BIN)/aichor-iac render $$m --stack-config $$stack -o out/$$(basename $$m .yaml) > /dev/null; \
	  echo "rendered into out/$$(basename $$m .yaml)/"; \
	done

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) lint
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/render.py

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache
