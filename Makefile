# Two commands set up and run everything on a fresh machine (Python 3.9+ with venv):
#   make demo   - create .venv, install sysmetrics with its extras, train a tiny Lightning
#                 model with SystemMetricsCallback and print the system metrics it logged
#   make test   - the same setup, then the whole test suite
# constraints.txt pins what the dev/test setup installs (torch's CPU build among them).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
comma := ,
EXTRAS ?= test,dev,lightning,transformers,keras
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: demo host-demo test versions lint bench overhead clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[$(EXTRAS)]'
	touch $@

demo: $(STAMP)
	$(BIN)/python examples/lightning_demo.py

host-demo: $(STAMP)
	$(BIN)/python examples/host_demo.py

test: $(STAMP)
	$(BIN)/python -m pytest

# Each framework's tests, and the report's, at the minimum version pyproject.toml declares
# (tox envs; the
# latest versions are what `make test` runs).
versions: $(STAMP)
	$(BIN)/tox -e lightning-min,transformers-min,keras-min,report-min

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/host_sample.py
	$(BIN)/python benchmarks/callback_cost.py

# The overhead benchmark beside MLflow's and W&B's samplers, in its own environment so the
# peers never enter .venv.
BENCH_VENV ?= .venv-bench
$(BENCH_VENV)/.installed: pyproject.toml constraints.txt benchmarks/requirements.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet -c constraints.txt \
		-e '.[lightning,transformers,keras,openmetrics]' -r benchmarks/requirements.txt
	touch $@

overhead: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) .tox build *.egg-info .pytest_cache .mypy_cache .ruff_cache
