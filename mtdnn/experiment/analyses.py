"""The hook through which an analysis of each run's final model joins a grid (the
agreement breakdown of Figure 2, :mod:`mtdnn.analysis.agreement_runs`, is one).

The runner knows analyses only by this protocol; the command line hands them in, so the
generic runner imports no paper's analysis. An analysis keeps its measures in each record
under its ``name`` and adds its section to ``results.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from mtdnn.experiment.config import ExperimentConfig
from mtdnn.experiment.grid import Cell


class RunAnalysis(Protocol):
    name: str  # the record's key for its measures

    def check(self, config: ExperimentConfig, path: str | Path | None) -> None:
        """Refuse, at load, a config whose analysis could not run (before any training)."""

    def check_files(self, config: ExperimentConfig) -> None:
        """Refuse, before training, files the analysis needs that are not there."""

    def applies(self, config: ExperimentConfig, cell: Cell) -> bool:
        """Whether this run is analysed."""

    def measure(self, config: ExperimentConfig, cell: Cell, folder: Path,
                precision: str) -> dict[str, Any]:
        """The measures of the run in ``folder`` (its final model in ``folder/last``)."""

    def complete(self, measures: dict[str, Any] | None) -> bool:
        """Whether a record's measures hold everything this version measures."""

    def report(self, config: ExperimentConfig, records: list[dict[str, Any]],
               out: Path) -> str:
        """The analysis's section of ``results.md`` (and its plots in ``out``)."""
