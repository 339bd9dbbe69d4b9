# Two set-up commands for users: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test test-slow test-all demo bench clean

venv: $(STAMP)

$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[pipeline,test,plot]"
	touch $(STAMP)

# Fast default suite (slow tests are marked and run by test-slow / test-all).
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow tests

test-all: $(STAMP)
	$(PY) -m pytest -q tests

demo: $(STAMP)
	$(PY) demo.py

clean:
	rm -rf $(VENV) build *.egg-info
