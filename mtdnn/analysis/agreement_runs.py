"""Figure 2's agreement breakdown as an analysis of a grid's runs (the runner's hook,
:class:`mtdnn.experiment.analyses.RunAnalysis`): each NLI run's final model scored on
ChaosNLI's low-agreement pairs, and the breakdown's tables and plots in ``results.md``.

The grid is read through the config and cells the runner hands in (an experiment's
``agreement:`` section: task -> ChaosNLI file, the scored rows and, optionally, subsets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mtdnn.analysis import agreement, selection, statistics
from mtdnn.errors import MtdnnError


class AgreementAnalysis:
    """Accuracy and KL to the human label distribution by annotator agreement."""

    name = "agreement"

    def check(self, config: Any, path: str | Path | None) -> None:
        """Figure 2's breakdown needs a three-label NLI task, known before the first run
        trains (not after it)."""
        from mtdnn.tasks.task_def import load_task_defs

        if not config.agreement:
            return
        known = load_task_defs(config.train.get("task_defs", ("packaged",)))
        for task in config.agreement:
            definition = known.get(task)
            if definition is not None and tuple(sorted(definition.labels)) != tuple(
                    sorted(agreement.LABELS)):
                raise MtdnnError(f"task '{task}' has labels {list(definition.labels)}: the "
                                 "agreement breakdown compares three NLI labels with "
                                 "ChaosNLI's", file=path, key=f"agreement.{task}",
                                 allowed=f"a task labelled {', '.join(agreement.LABELS)} "
                                         "(snli, mnli)")

    def check_files(self, config: Any) -> None:
        """The breakdown's files exist (checked before training, not at load: a report of
        finished runs needs none of them)."""
        for task, spec in config.agreement.items():
            for name, file in (("chaosnli", spec.chaosnli),
                               *((f"rows[{i}]", f) for i, f in enumerate(spec.rows))):
                if not Path(file).is_file():
                    raise MtdnnError("file not found", file=file,
                                     key=f"agreement.{task}.{name}",
                                     allowed="an existing file (make splits writes them)")

    def applies(self, config: Any, cell: Any) -> bool:
        spec = config.agreement.get(cell.task)
        return (spec is not None and config.arms[cell.arm].backend == "mtdnn"
                and (spec.subsets is None or cell.subset in spec.subsets))

    def measure(self, config: Any, cell: Any, folder: Path, precision: str) -> dict[str, Any]:
        """The Figure 2 breakdown of the run's final model (``folder/last``)."""
        from mtdnn.inference.predictor import Predictor

        spec = config.agreement[cell.task]
        return agreement.model_breakdown(Predictor(folder / "last", precision=precision),
                                         cell.task, [Path(f) for f in spec.rows],
                                         Path(spec.chaosnli))

    def complete(self, measures: dict[str, Any] | None) -> bool:
        return all(set(agreement.DECIMALS) <= set((measures or {}).get(level, {}))
                   for level in agreement.LEVELS)

    def report(self, config: Any, records: list[dict[str, Any]], out: Path) -> str:
        text = ""
        for task in config.agreement:
            reference = uniform_reference(config.agreement[task])  # the same for every subset
            subsets = config.subsets[task] if isinstance(config.subsets, dict) \
                else config.subsets
            for subset in subsets:
                text += agreement_section(records, task, subset, list(config.arms),
                                          out / f"agreement_{task}_{subset}.png",
                                          config.baseline, reference)
        return text


def uniform_reference(spec: Any) -> dict[str, dict[str, float]]:
    return agreement.uniform_breakdown(agreement.scored_rows([Path(f) for f in spec.rows]),
                             agreement.load_chaosnli(Path(spec.chaosnli)))


def agreement_section(records: list[dict[str, Any]], task: str, subset: str, arms: list[str],
                      plot_path: Path, baseline: str | None = None,
                      reference: dict[str, dict[str, float]] | None = None) -> str:
    """Each arm's breakdown over its runs of ``task`` on ``subset`` (Figure 2): mean ± std,
    its plot, and each arm's differences from ``baseline`` (else the first arm with runs)
    with Welch's p; ``reference`` (a uniform prediction's breakdown) is shown as a last row,
    outside the comparisons."""
    runs = {arm: found for arm in arms if (found := {
        selection.run_key(r): r["agreement"] for r in records
        if r["arm"] == arm and r["task"] == task and r["subset"] == subset
        and r.get("agreement")})}
    if not runs:
        return ""

    def keyed(arm: str, level: str, measure: str) -> statistics.Keyed:
        return {run: np.nan if found[level].get(measure) is None else found[level][measure]
                for run, found in runs[arm].items()}

    def values(arm: str, level: str, measure: str) -> list[float]:
        return list(keyed(arm, level, measure).values())

    first = next(iter(next(iter(runs.values())).values()))
    names = {arm: f"{arm} (n={len(found)})" for arm, found in runs.items()}
    measures = list(agreement.DECIMALS)  # a record made before a measure existed shows "—"
    # the pair counts are the dev file's, the same in every run: kept as counts
    means = {names[arm]: {level: {"pairs": first[level]["pairs"], **{
        m: float(np.mean(values(arm, level, m))) for m in measures}} for level in first}
        for arm in runs}
    spread = {names[arm]: {level: {m: float(np.std(values(arm, level, m), ddof=1))
                                   if len(runs[arm]) > 1 else np.nan for m in measures}
                           for level in agreement.LEVELS} for arm in runs}
    if reference:
        means[agreement.REFERENCE] = reference
        spread[agreement.REFERENCE] = {level: {} for level in agreement.LEVELS}
    agreement.plot(means, plot_path, spread)
    text = (f"\n### {task} ({subset}): accuracy and KL(human ‖ model) by annotator "
            f"agreement\n\nMean ± std over each arm's runs; plot: {plot_path.name}.\n\n"
            + agreement.table(means, spread))
    base = baseline if baseline in runs else next(iter(runs))
    return text + agreement_differences(keyed, list(runs), base)


def agreement_differences(keyed: Any, arms: list[str], base: str) -> str:
    """Each arm's breakdown minus ``base``'s, with Welch's p; ``keyed(arm, level,
    measure)`` gives an arm's runs' values."""
    others = [arm for arm in arms if arm != base]
    if not others:
        return ""
    heads = {"accuracy": "accuracy", "kl_100": "KL to 100", "kl_100_tempered": "KL at T"}
    columns = [("accuracy", level) for level in agreement.LEVELS] + [
        (m, level) for m in ("kl_100", "kl_100_tempered") for level in agreement.ANNOTATED]
    lines = statistics.table_head([f"{heads[m]} {level}" for m, level in columns], first="pair")

    def gap(arm: str, measure: str, level: str) -> str:
        ours, theirs = keyed(arm, level, measure), keyed(base, level, measure)
        if np.isnan([*ours.values(), *theirs.values()]).any():  # recorded before the measure
            return "—"
        return statistics.difference(ours, theirs, agreement.DECIMALS[measure])

    for arm in others:
        lines.append(f"| {arm} − {base} | " + " | ".join(
            gap(arm, m, level) for m, level in columns) + " |")
    return (f"\nDifferences from {base} (accuracy in points, KL in nats; "
            f"{statistics.WELCH_UNITS}; {len(others) * len(columns)} comparisons, not corrected "
            "for multiple comparisons):\n\n" + "\n".join(lines) + "\n")
