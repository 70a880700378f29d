# Every target installs what it needs into .venv (a virtualenv under the repo, from PyPI).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-deep bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

## demo: an offline session showing the whole tool lifecycle (no network, no model)
demo: $(STAMP)
	$(BIN)/python -m yiemagent demo

## test: the test suite (hypothesis "ci" profile)
test: $(STAMP)
	$(BIN)/python -m pytest

## test-deep: the test suite with hypothesis's thorough profile
test-deep: $(STAMP)
	HYPOTHESIS_PROFILE=deep $(BIN)/python -m pytest

## bench: the performance figures the issues ask for, on this machine
bench: $(STAMP)
	$(BIN)/python bench/bench.py

clean:
	rm -rf $(VENV) .hypothesis build *.egg-info
