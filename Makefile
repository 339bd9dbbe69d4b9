# Two set-up commands for users: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv interop-venv jax-venv datatrove-venv test test-slow test-all test-interop test-jax-venv demo bench clean

venv: $(STAMP)

$(STAMP): setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[tensorflow,pipeline,test,plot]"
	touch $(STAMP)

# Fast default suite (slow tests are marked and run by test-slow / test-all), on two processes
# (pytest-xdist): most tests keep one core busy, so two halve the time on a 2-core machine. A third
# gains nothing here (measured 2026-11-29, one after the other on a quiet 2-core machine: 4:57 on two,
# 5:08 on three, which build each worker's fixtures once more: 517 against 566 CPU seconds).
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 2 --dist loadgroup --durations=15 -rs tests

# The slow tests (training runs, benchmark smoke tests, measured memory) on three processes: many of
# them spend part of their time waiting (polling a child process, a Dask cluster, the GCS emulator, a
# timer), so two processes left about a quarter of a 2-core machine idle (CPU seconds against wall time,
# measured 2026-11-29); three kept it 97% busy (25:40 for the suite on a quiet 2-core machine, same day).
# CI runs them after the default suite so that none rots unseen. The 40 slowest are listed at the end
# (CI's whole run must stay under 45 minutes: the list says where the time goes).
test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow -n 3 --dist loadgroup --durations=40 -rs tests

test-all: $(STAMP)
	$(PY) -m pytest -q tests

# Interop tests against the real Hugging Face client (PyTorch + transformers) in their own venv,
# so the default .venv stays free of torch. torch comes first and only as the local CPU build
# (torch==2.13.0+cpu): a plain `torch` from the index resolves to several GB of CUDA packages,
# and with it installed the `interop` extra's torch==2.13.0 is already satisfied.
INTEROP_VENV := .venv-interop
INTEROP_PY := $(INTEROP_VENV)/bin/python
INTEROP_STAMP := $(INTEROP_VENV)/.installed

$(INTEROP_STAMP): setup.py
	test -x $(INTEROP_PY) || $(PYTHON) -m venv $(INTEROP_VENV)
	$(INTEROP_PY) -m pip install -q --upgrade pip
	$(INTEROP_PY) -m pip install -q "torch==2.13.0+cpu"
	$(INTEROP_PY) -m pip install -q -e ".[tensorflow,pipeline,test,interop]"
	touch $(INTEROP_STAMP)

interop-venv: $(INTEROP_STAMP)

test-interop: $(INTEROP_STAMP)
	$(INTEROP_PY) -m pytest -q tests/trainer/conversion/test_interop_transformers.py

# A real `pip install -e ".[jax]"` in its own venv, as a GPU machine or TPU VM running JAX only has it:
# pip's resolution of the extra (none of its dependencies may bring TensorFlow) and the commands run
# where TensorFlow is not installed (tests/test_jax_only_venv.py). pytest only, not the test extra,
# which brings TensorFlow and Beam; --noconftest, since tests/conftest.py imports TensorFlow at start.
JAX_VENV := .venv-jax
JAX_PY := $(JAX_VENV)/bin/python
JAX_STAMP := $(JAX_VENV)/.installed

$(JAX_STAMP): setup.py
	test -x $(JAX_PY) || $(PYTHON) -m venv $(JAX_VENV)
	$(JAX_PY) -m pip install -q --upgrade pip
	$(JAX_PY) -m pip install -q -e ".[jax]" "pytest>=8"
	touch $(JAX_STAMP)

jax-venv: $(JAX_STAMP)

test-jax-venv: $(JAX_STAMP)
	$(JAX_PY) -m pytest -q --noconftest -rs tests/test_jax_only_venv.py

# The corpus-cleaning peer (benchmarks/cleaning.py --peer-python .venv-datatrove/bin/python) in its own venv:
# datatrove with what its MinHash and its Gopher, C4 and FineWeb filters import (spaCy's blank English
# pipeline is its word and sentence splitter: no model to download; xxhash, regex, orjson, tokenizers),
# not its `processing` extra (fastText, trafilatura and more). Not used by any test.
DATATROVE_VENV := .venv-datatrove
DATATROVE_PY := $(DATATROVE_VENV)/bin/python
DATATROVE_STAMP := $(DATATROVE_VENV)/.installed

$(DATATROVE_STAMP):
	test -x $(DATATROVE_PY) || $(PYTHON) -m venv $(DATATROVE_VENV)
	$(DATATROVE_PY) -m pip install -q "datatrove==0.10.1" "spacy==3.8.18" "xxhash==3.8.2" "regex==2026.11.19" \
		"orjson==3.13.0" "tokenizers==0.23.3"
	touch $(DATATROVE_STAMP)

datatrove-venv: $(DATATROVE_STAMP)

# make demo FROM=N: steps N to the last only, on what the earlier steps wrote (demo.py --from-step N)
demo: $(STAMP)
	$(PY) demo.py $(if $(FROM),--from-step $(FROM))

clean:
	rm -rf $(VENV) $(INTEROP_VENV) $(JAX_VENV) build *.egg-info
