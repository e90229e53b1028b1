"""One runner for every experiment: named arms × tasks × subsets × seeds, stages in config.

    python -m mtdnn.experiment --config experiments/domain_adaptation.yaml [key=value ...]
    python -m mtdnn.experiment --config ... --report-only   # tables from finished runs only
    python -m mtdnn.experiment --config ... --publish       # also copy records and tables
                                                            # into publish_dir (tracked)
    python -m mtdnn.experiment --config ... --rescore-agreement  # the agreement breakdowns
                                        # again, from the finished runs' final models
    python -m mtdnn.experiment --config ... --jobs 4                # 4 local processes
    python -m mtdnn.experiment --config ... --launcher slurm        # or: --launcher ray

An **arm** is a start point (the plain encoder, a checkpoint folder, or ``stage:<name>``)
plus training keys of its own, run by a backend (``mtdnn``: this project's trainer;
``hf_trainer``: Hugging Face ``Trainer``, the baseline). A **stage** is a multi-task run
the arms can start from; it is trained once per stage seed, and an arm that starts from it
runs every (stage seed, seed) pair, so stage-1 variance is in its spread. Each run fine-
tunes one task on one subset (drawn by ``python -m mtdnn.data_prep subsets``; ``full`` is the
task's whole train file), or, with no ``tasks`` given, trains ``train.tasks`` together.

Each finished run leaves a ``result.json`` (the record): its dev metrics, the training keys
it ran with, its start weights' fingerprint and its logged SMART terms. A run with a
record is skipped (in ``output_dir``, or already published) and an interrupted one resumes
from its last checkpoint. A record whose training keys or start weights differ from the
config's now is an error, not a silent mix. Each stage seed and each run is one job
(:mod:`~mtdnn.experiment.jobs`), run on an engine (:mod:`mtdnn.experiment.engines`):
local processes (``--jobs N``), Slurm through ``submitit``, or a Ray cluster.
Results: ``results.csv`` (one row per run and metric), ``results.md`` (see
:mod:`mtdnn.analysis.tables` for the two layouts) and ``results.png``.

The package's modules, in the order a run meets them: :mod:`~mtdnn.experiment.config`
(the YAML), :mod:`~mtdnn.experiment.grid` (the runs), :mod:`~mtdnn.experiment.records`
(finished runs and their checks), :mod:`~mtdnn.experiment.jobs` (the units of work,
run by :mod:`mtdnn.experiment.engines`),
:mod:`~mtdnn.experiment.stages` (stage 1), :mod:`~mtdnn.experiment.runner` (training the
missing runs), :mod:`~mtdnn.experiment.results` (tables, plots, publishing) and
:mod:`~mtdnn.experiment.command` (the command line).
"""

from typing import Any

from mtdnn.experiment.command import main
from mtdnn.experiment.config import ExperimentConfig, load_experiment

__all__ = ["ExperimentConfig", "load_experiment", "main", "publish", "run_experiment",
           "write_report"]

_LAZY = {"publish": "results", "write_report": "results", "run_experiment": "runner"}


def __getattr__(name: str) -> Any:
    """The runner and the results writers load torch: imported when first used, so that
    the command answers --help and a bad key at once."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"mtdnn.experiment.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'mtdnn.experiment' has no attribute {name!r}")
