# Two commands for a fresh machine: `make demo` and `make test`.
# Each creates .venv in the checkout on first use, with the tested versions of constraints.txt
# (pyproject.toml declares ranges; constraints.txt is the lock of what CI runs).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all setup clean bench-flower-env

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip >/dev/null
	$(PY) -m pip install -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) examples/flex_sfl.py

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(PY) -m pytest -q

# Flower (for benchmarks/flower_fedavg.py only) in its own venv: it pins another Ray.
FLOWER_VENV := .venv-flower
$(FLOWER_VENV)/.installed:
	$(PYTHON) -m venv $(FLOWER_VENV)
	$(FLOWER_VENV)/bin/python -m pip install --upgrade pip >/dev/null
	$(FLOWER_VENV)/bin/python -m pip install 'flwr[simulation]==1.41.0' torch==2.14.1 torchvision==0.29.1 scikit-learn pyarrow
	@touch $@

bench-flower-env: $(FLOWER_VENV)/.installed

clean:
	rm -rf $(VENV) $(FLOWER_VENV) runs .pytest_cache
