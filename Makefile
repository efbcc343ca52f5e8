# Two commands for a fresh machine: `make demo` and `make test`.
# Each creates .venv in the checkout on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all setup clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip >/dev/null
	$(PY) -m pip install -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) examples/flex_sfl.py

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
