# Everything from a fresh machine to a green test run: `make test`. `make demo` runs the example
# and serves its console until Ctrl-C; `make demo DEMO_ARGS=--once` runs it and exits.
# `make check` is the inner loop: lint and the tests not marked slow, in under 2 minutes.
# Both run in JOBS pytest-xdist workers, each with its own servers (JOBS=0, or
# PYTEST_ARGS="-p no:xdist", runs them in this one process), and list the 20 slowest tests.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Reinstall only when the package metadata changes.
STAMP := $(VENV)/.stamp-install
# Most tests wait (workers starting, leases expiring), but the real workers of 3 pytest-xdist
# workers are as much as 2 cores take without starving the timing of each other's tests (at 4,
# 3 or 4 tests a full run failed so, once the limit and slow-down tests came).
JOBS ?= 3
PARALLEL := $(if $(filter no:xdist,$(PYTEST_ARGS)),,-n $(JOBS) --dist loadgroup)

.PHONY: venv services test check demo lint compat

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,django,postgres]'
	touch $@

services:
	bash tools/ensure-services.sh

test: venv services
	$(PY) -m pytest $(PARALLEL) --durations=20 $(PYTEST_ARGS)

# Lint, the unit tests, and the integration and Django tests not marked slow (a test that takes
# over 2 s on its own is marked slow; the run lists unmarked ones that did). `make test` runs all.
check: lint services
	$(PY) -m pytest tests/unit tests/integration tests/django -m "not slow" $(PARALLEL) \
		--durations=20 $(PYTEST_ARGS)

demo: venv services
	$(PY) example_project/run_demo.py $(DEMO_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy celery_fairqueue

# Celery's own integration tests (of the installed Celery's sdist), plain and with FairTask as
# task_cls; fails when a test passes plain but not fair (docs/compatibility.md).
compat: venv services
	$(PY) -m pip install --quiet --disable-pip-version-check -r tools/compat/requirements.txt
	$(PY) tools/compat/run.py $(COMPAT_ARGS)
