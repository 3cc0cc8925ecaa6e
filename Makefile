# aiokprod: every target creates the virtualenv and installs what it needs on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-unit lint kafka bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]'
	touch $(STAMP)

## demo: start a local Apache Kafka, run the quickstart against it, stop Kafka
demo: $(STAMP)
	$(PY) -m aiokprod.testing exec --topic quickstart:6 -- $(PY) examples/quickstart.py

## test: every test, unit and integration (starts local Kafka brokers itself)
test: $(STAMP)
	$(PY) -m pytest

## test-unit: only the tests that need no broker
test-unit: $(STAMP)
	$(PY) -m pytest tests/unit

## lint: ruff and mypy --strict
lint: $(STAMP)
	$(VENV)/bin/ruff check aiokprod tests examples
	$(VENV)/bin/ruff format --check aiokprod
	$(VENV)/bin/mypy --strict aiokprod

## kafka: run a local single-node Apache Kafka until Ctrl-C
kafka: $(STAMP)
	$(PY) -m aiokprod.testing run

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
