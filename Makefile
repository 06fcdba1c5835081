# Two commands for a newcomer: `make test` (and, once the pipeline lands, `make demo`).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sparkcdc-installed

.PHONY: setup test test-fast clean

setup: $(STAMP)

# Re-runs only when the dependency list changes; a second `make setup` is a no-op.
$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

test: setup
	$(PY) -m pytest tests

test-fast: setup
	$(PY) -m pytest tests -m "not slow"

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
