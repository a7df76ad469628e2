# make demo: create .venv, install the package alone (its runtime dependencies), then validate,
# preview and render every example offline.
# make test: create .venv, add the test extra (and, as root, Debian's OpenMPI and OpenSSH for
# the real MPI test), lint and run the test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.runtime
STAMP := $(VENV)/.installed

.PHONY: demo test check lint docs bench fuzz clean system-packages

# Real MPI runs in the tests need Debian's OpenMPI and OpenSSH server, the dashboard's tests
# a real browser (Debian's chromium), `entrypoints`' tests a real OCI registry (Debian's
# docker-registry, started by the tests on 127.0.0.1): installed when this runs as root with
# apt-get (CI), otherwise those tests skip and say why.
SYSTEM_PACKAGES := openmpi-bin openssh-server openssh-client chromium docker-registry

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --upgrade pip

# The demo needs the runtime alone; the tests add the frameworks they run for real. The
# package's bytecode is written once here, as a wheel's install writes it: an editable install
# leaves it to the first import, which writes none where PYTHONDONTWRITEBYTECODE is set (each
# command, and each of the tests' processes, would compile every module again). pip runs with
# -qq: errors still show, setuptools' notice that an install is editable does not.
$(RUNTIME): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -qq -e .
	$(BIN)/python -m compileall -q aichor_iac
	touch $(RUNTIME)

# The stores' tests run real servers: MLflow's and moto's (PyPI, the test extra) and Azurite,
# Microsoft's Azure Storage emulator (npm): without npm, Azure's tests skip and say why.
#
# rfc3987-syntax comes with jupyter_server (jupyter-events asks for jsonschema[format-nongpl])
# and is then removed: jsonschema imports it whenever it is installed, and its import builds 35
# Earley parsers, a second of CPU in every process that imports jsonschema (Ray imports it:
# every Ray daemon, driver and worker of the tests' clusters; Kubeflow's SDK too). A Ray node's
# start then costs 7 CPU-s rather than 17, the real Ray tests half their CPU. jsonschema does
# without it (no `iri` format check, which no test's schema uses).
$(STAMP): $(RUNTIME)
	$(BIN)/python -m pip install -qq -e '.[test]'
	$(BIN)/python -m pip uninstall -qq -y rfc3987-syntax
	@if command -v npm >/dev/null; then \
	  npm install --prefix $(VENV)/azurite --no-audit --no-fund --silent 'azurite@^3.35' >/dev/null \
	  || echo "azurite: npm could not install it; the Azure Blob Storage tests will skip"; \
	fi
	touch $(STAMP)

# Each example validated, previewed and rendered into out/NAME/, again only once it, its stack
# file or the package has changed (the README and Getting started run make demo more than once).
EXAMPLES := $(basename $(notdir $(wildcard examples/*.yaml)))
PACKAGE := $(shell find aichor_iac -type f -not -path '*/__pycache__/*')

demo: $(RUNTIME) $(EXAMPLES:%=out/%/.demo)
	@echo "every example validated, previewed and rendered into out/"

out/%/.demo: examples/%.yaml stacks/Pulumi.%.yaml $(RUNTIME) $(PACKAGE)
	@echo "== $<"
	@$(BIN)/aichor-iac validate $<
	@$(BIN)/aichor-iac preview $< --stack-config stacks/Pulumi.$*.yaml
	@$(BIN)/aichor-iac render $< --stack-config stacks/Pulumi.$*.yaml -o out/$* > /dev/null
	@echo "rendered into out/$*/"
	@touch $@

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

system-packages:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null) \
	  || echo "system-packages: could not install $(SYSTEM_PACKAGES); the tests that need them will skip"; \
	fi

# Three processes: most slow tests wait on real processes (the cores were a third idle at
# two: a fresh clone's pytest 19.7 min at two, 17.3 at three, quiet); the real Ray clusters in
# one of them, one at a time (tests/kube.py: ONE_RAY_CLUSTER_AT_A_TIME; before Ray's processes
# lost rfc3987-syntax's second each, above, a cluster starved at three); the tests that look at
# the whole machine's state run alone afterwards, collected from the files that mark some
# (collecting every file again takes 15 s).
EXCLUSIVE = $(shell grep -rl --include='*.py' 'mark.exclusive' tests)
# mypy runs among the tests (tests/test_types.py), beside the processes that wait on theirs,
# rather than alone before them (42 s of one core on a fresh clone).
test: $(STAMP) system-packages
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 3 --dist loadgroup -m "not exclusive"
	$(BIN)/python -m pytest -m exclusive $(EXCLUSIVE)

# The quick tier, for the edit-run loop: lint, types and every test but the slow ones (real
# frameworks, servers, a browser, the docs' commands, pods on the local cluster: make test
# runs those too, as CI does).
check: lint
	$(BIN)/python -m pytest -n 2 -m "not slow and not exclusive"

# The documentation site into site/, strictly: a broken link, anchor or API reference fails
# (tests/test_docs.py runs the same build).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

bench: $(STAMP)
	$(BIN)/python benchmarks/weight.py
	$(BIN)/python benchmarks/render.py
	$(BIN)/python benchmarks/limits.py
	$(BIN)/python benchmarks/lifecycle.py
	$(BIN)/python benchmarks/structure.py
	$(BIN)/python benchmarks/startup.py
	$(BIN)/python benchmarks/progress.py
	$(BIN)/python benchmarks/sweeps.py
	$(BIN)/python benchmarks/dashboard.py
	$(BIN)/python benchmarks/dashboard_memory.py 180 100
	$(BIN)/python benchmarks/records.py
	$(BIN)/python benchmarks/keeper.py
	$(BIN)/python benchmarks/suite.py

# 100,000 seeded mutations of the examples: the table of outcomes (tests/fuzz.py says which).
fuzz: $(STAMP)
	$(BIN)/python tests/fuzz.py 100000

clean:
	rm -rf $(VENV) out site .pytest_cache .ruff_cache
