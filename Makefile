# Two commands set up and run everything on a fresh machine (Python 3.9+ with venv):
#   make demo   - create .venv, install sysmetrics with its extras, train a tiny Lightning
#                 model with SystemMetricsCallback and print the system metrics it logged
#   make test   - the same setup, then the whole test suite
#   make docs   - the documentation site (site/), built with warnings as errors
# constraints.txt pins what the dev/test setup installs (torch's CPU build among them).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
comma := ,
EXTRAS ?= test,dev,lightning,transformers,keras
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
# tox creates its envs with uv (tox-uv), which reads no pip configuration: it gets pip's
# find-links (where a machine may keep torch's CPU build) unless it was given its own.
export UV_FIND_LINKS ?= $(PIP_FIND_LINKS)

.PHONY: demo host-demo setup test versions pythons lint docs screenshots bench overhead diagnosis gpu-check gpu-wheels wheel-check clean

# $(call install,VENV,ARGS): pip install ARGS into the virtual environment VENV, through
# uv where pip can install uv (the test setup in about 55 s where pip alone takes 100 s on
# the CI machine, the same versions: constraints.txt pins them; uv reads UV_FIND_LINKS,
# above, not pip's configuration), else, or where uv fails, with pip itself. uv compiles
# the modules' bytecode as pip does only when asked: without it, where
# PYTHONDONTWRITEBYTECODE is set (as on the CI machine), each process compiled torch's
# modules again at import, and the parallel pass took 642 s instead of 396.
install = $(1)/bin/python -m pip install --quiet uv \
	&& $(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python $(2) \
	|| $(1)/bin/python -m pip install --quiet $(2)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(call install,$(VENV),-c constraints.txt -e '.[$(EXTRAS)]')
	touch $@

demo: $(STAMP)
	$(BIN)/python examples/lightning_demo.py

host-demo: $(STAMP)
	$(BIN)/python examples/host_demo.py

# The suite in two passes, both run whatever the first says: the tests that compare a CPU
# share or a host-wide counter with what they did (marker `serial`) alone, after all the
# others on TEST_WORKERS processes (pytest-xdist; 0: in this process). 4 by default: the
# suite is mostly sleeps and child processes, and on the CI machine's 2 CPUs 4 workers
# took the first pass from about 14 min to 5.5; the timing-bound tests that failed beside
# them now compare with what their processes really got (CONTRIBUTING.md, "Tests").
# The tox envs of `make pythons` use it too. TEST_SERIAL_STARTED, where set, is a file
# made as the serial pass starts (.ci/run starts the linters beside that pass on it).
TEST_WORKERS ?= 4
export TEST_WORKERS
# The test setup alone (what `make test` makes first).
setup: $(STAMP)

test: $(STAMP)
	@status=0; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not serial" || status=$$?; \
	test -z "$$TEST_SERIAL_STARTED" || touch "$$TEST_SERIAL_STARTED"; \
	$(BIN)/python -m pytest -p no:xdist -m serial || status=$$?; \
	exit $$status

# Each framework's tests, and the report's, at the minimum version pyproject.toml declares
# (tox envs; the latest versions are what `make test` runs): the envs side by side (each
# one pytest process, about one CPU). Their files hold no test marked `serial` (tox.ini;
# report-min's are all `kernel` too). `make pythons` keeps its envs in a tox folder of
# their own (.tox/pythons): the two may run at once.
MIN_ENVS = lightning-min,transformers-min,keras-min,report-min
versions: $(STAMP)
	$(BIN)/tox run-parallel --parallel 4 --parallel-no-spinner -e $(MIN_ENVS)

# The engine, record and report tests on the oldest and newest Python that pyproject.toml
# declares (tox envs engine-py39, engine-py313). pyenv's shims run only the `pyenv global`
# version, so each interpreter is looked for in pyenv's versions first, then on PATH, and
# handed to tox (--discover) and to uv, which creates tox's envs and looks for them on PATH
# alone (their folders first; it downloads no Python); one that is absent is skipped with
# the reason (exit 0: tox would fail a run whose every env it skipped). The two envs run
# side by side: their tests are the sleep-bound engine's, not the `serial` ones (tox.ini).
PYENV_ROOT ?= $(HOME)/.pyenv
pythons: $(STAMP)
	@envs=; found=; dirs=; for v in 3.9 3.13; do \
		py=$$(ls -d $(PYENV_ROOT)/versions/$$v.*/bin/python$$v 2>/dev/null | sort -V | tail -n 1); \
		test -n "$$py" || py=$$(command -v python$$v || true); \
		env=engine-py$$(echo $$v | tr -d .); \
		if test -n "$$py" && "$$py" -c '' 2>/dev/null; then \
			found="$$found $$py"; envs="$$envs,$$env"; dirs="$$dirs$$(dirname $$py):"; \
		else echo "$$env: skipped, no Python $$v (neither in $(PYENV_ROOT)/versions nor on PATH)"; fi; \
	done; \
	test -z "$$envs" || { set -x; PATH="$$dirs$$PATH" UV_PYTHON_DOWNLOADS=never \
		$(BIN)/tox run-parallel --parallel 2 --parallel-no-spinner --workdir .tox/pythons \
			--discover $$found -e $${envs#,}; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/), in its own environment; its reference pages
# are generated from the code's declarations (docs_hooks/hooks.py, sysmetrics/_docs.py; outside docs/, so not published).
DOCS_VENV ?= .venv-docs
$(DOCS_VENV)/.installed: pyproject.toml constraints.txt constraints-torch.txt
	test -x $(DOCS_VENV)/bin/python || $(PYTHON) -m venv $(DOCS_VENV)
	$(call install,$(DOCS_VENV),-c constraints.txt -e '.[docs]')
	touch $@

docs: $(DOCS_VENV)/.installed
	$(DOCS_VENV)/bin/mkdocs build --strict

# Every picture of the README and docs remade from real runs (scripts/screenshots.py): a
# recording of examples/plain_loop.py, its report page in headless Chromium, its findings
# text beside it (tests/test_docs.py checks it against today's rules), TensorBoard of the
# demo. Without Chromium the browser pictures are skipped with the reason.
screenshots: $(STAMP)
	$(BIN)/python scripts/screenshots.py

bench: $(STAMP)
	$(BIN)/python benchmarks/host_sample.py
	$(BIN)/python benchmarks/callback_cost.py

# The labelled diagnosis suite (benchmarks/diagnosis, issue 32): each scenario a real job,
# one at a time (about 15 minutes in all), judged against its label; prints per-rule
# precision and recall and top-cause accuracy. DIAGNOSIS_ARGS=--quick: the quick subset.
diagnosis: $(STAMP)
	$(BIN)/python benchmarks/diagnosis/suite.py $(DIAGNOSIS_ARGS)

# The overhead benchmark beside MLflow's and W&B's samplers, in its own environment so the
# peers never enter .venv.
BENCH_VENV ?= .venv-bench
$(BENCH_VENV)/.installed: pyproject.toml constraints.txt benchmarks/requirements.txt
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(call install,$(BENCH_VENV),-c constraints.txt \
		-e '.[lightning,transformers,keras,openmetrics]' -r benchmarks/requirements.txt)
	touch $@

overhead: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/overhead.py

# The GPU checks (benchmarks/gpu_check.py), on a Linux machine with an NVIDIA GPU, offline:
# under 15 minutes on one GPU, results in $(GPU_CHECK_OUT)/ (summary.txt, checks.json). It
# uses the machine's Python and its torch/Lightning/transformers/Keras, and installs what
# it lacks only from $(GPU_WHEELS)/. Without a GPU it says so in one line and exits 0.
GPU_CHECK_OUT ?= gpu-check
GPU_WHEELS ?= .gpu-wheels
gpu-check:
	$(PYTHON) benchmarks/gpu_check.py --out $(GPU_CHECK_OUT) --wheels $(GPU_WHEELS)

# Run beforehand where there is network: the wheels gpu-check may install, for CPython
# $(GPU_WHEELS_PYTHON) on x86-64 Linux (no torch, no CUDA libraries), into $(GPU_WHEELS)/.
GPU_WHEELS_PYTHON ?= 3.12
gpu-wheels:
	$(PYTHON) -m pip download --quiet --dest $(GPU_WHEELS) --only-binary=:all: \
		--python-version $(GPU_WHEELS_PYTHON) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 --platform any \
		$$($(PYTHON) benchmarks/gpu_check.py --requirements)
	@du -sh $(GPU_WHEELS); ls $(GPU_WHEELS) | wc -l

# The wheel is what users get: build the sdist and wheel, install the wheel in a fresh venv
# away from the checkout, import every module, record, report and deploy (.ci/wheel_check.py).
wheel-check: $(STAMP)
	$(BIN)/python .ci/wheel_check.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(DOCS_VENV) site .tox build *.egg-info .pytest_cache .mypy_cache .ruff_cache \
		$(GPU_CHECK_OUT)
