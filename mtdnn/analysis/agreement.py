"""Accuracy and KL to human label distributions, broken down by annotator agreement (the
SMART paper's Figure 2, on ChaosNLI's 100 labels per pair).

    python -m mtdnn.agreement report --chaosnli ../shared/data/chaosnli/chaosNLI_snli.jsonl \\
        --dev data/snli/dev.jsonl --predictions encoder=runs/a.jsonl mt-dnn=runs/b.jsonl \\
        --out results/agreement/snli
    python -m mtdnn.agreement exclude --chaosnli ../shared/data/chaosnli/chaosNLI_mnli_m.jsonl \\
        --input data/mnli/dev_matched.jsonl --output data/mnli/dev_matched_no_chaosnli.jsonl
    python -m mtdnn.agreement select --chaosnli ../shared/data/chaosnli/chaosNLI_mnli_m.jsonl \\
        --input data/mnli/dev_matched.jsonl --output data/mnli/dev_matched_chaosnli.jsonl

ChaosNLI (Nie et al., 2020) chose low-agreement pairs of SNLI and MNLI dev: each has 3/2/0
or 3/1/1 agreement among its original 5 annotators, and 100 new labels. Its pairs are
joined to our dev rows by text (lower-cased, all whitespace removed: part of SNLI dev here
is tokenised). Per level (3/2/0, 3/1/1, and the rest of dev, outside ChaosNLI) the report
gives accuracy against the dev label, the entropy of the model's prediction and, where
annotations exist, KL(human ‖ model) to the 100-label distribution and to the original 5
labels, and the KL to the 100 labels at a temperature cross-fitted on the ChaosNLI pairs;
a uniform prediction (1/3 each) is its reference row. ``exclude`` removes ChaosNLI's pairs
from a file, so that a model trained on MNLI dev_matched never sees them; ``select`` keeps
only them (MNLI's breakdown scores those held-out pairs, and dev_mismatched as the rest).
The experiment runner's ``agreement`` key computes the breakdown after each run
(:func:`model_breakdown`) and keeps it in the run's record.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mtdnn.commandline import add_debug_flag, command_parser
from mtdnn.errors import MtdnnError
from mtdnn.files import atomic_write_json, atomic_write_text, check_output, read_jsonl

if TYPE_CHECKING:
    from mtdnn.inference.predictor import Predictor

LABELS = ("entailment", "neutral", "contradiction")  # ChaosNLI's e, n, c order
LEVELS = ("3/2/0", "3/1/1", "rest of dev")
ANNOTATED = LEVELS[:2]  # the levels with annotator distributions, where KL is defined


def pair_key(premise: str, hypothesis: str) -> str:
    """The same pair whatever its tokenisation: lower case, no whitespace, PTB quotes
    (`` '') as plain ones."""
    def norm(text: str) -> str:
        text = text.replace("``", '"').replace("''", '"')
        return re.sub(r"\s+", "", text.lower())

    return norm(premise) + "\t" + norm(hypothesis)


def agreement_level(old_labels: list[str]) -> str:
    """``3/2/0`` or ``3/1/1`` from the original annotators' labels."""
    counts = sorted(Counter(old_labels).values(), reverse=True) + [0, 0]
    return "/".join(str(c) for c in counts[:3])


def load_chaosnli(path: Path) -> dict[str, dict[str, Any]]:
    """pair key -> its agreement level, 100-label and 5-label distributions."""
    pairs = {}
    for line, row in read_jsonl(path):
        try:
            example, old = row["example"], row["old_labels"]
            premise, hypothesis = example["premise"], example["hypothesis"]
            human = np.asarray(row["label_dist"], dtype=float)
        except (KeyError, TypeError, ValueError):
            raise MtdnnError("not a ChaosNLI SNLI/MNLI row (example.premise, "
                             "example.hypothesis, old_labels, label_dist)", file=path,
                             line=line, allowed="chaosNLI_snli.jsonl or chaosNLI_mnli_m.jsonl "
                                                "of ChaosNLI v1.0 (not its αNLI part)") from None
        if human.shape != (len(LABELS),) or not np.isfinite(human).all() or human.sum() <= 0:
            raise MtdnnError(f"label_dist {row['label_dist']!r} is not a distribution over "
                             f"{len(LABELS)} NLI labels", file=path, line=line,
                             allowed="ChaosNLI's SNLI or MNLI part (entailment, neutral, "
                                     "contradiction)")
        five = np.array([sum(label == name for label in old) for name in LABELS], float)
        pairs[pair_key(premise, hypothesis)] = {
            "level": agreement_level(old), "human": human / human.sum(),
            "five": five / max(five.sum(), 1.0)}
    return pairs


def kl_rows(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """KL(p ‖ q) in nats per row; terms where p is 0 add nothing, q is kept off 0."""
    q = np.clip(q, 1e-12, None)
    safe_p = np.where(p > 0, p, 1.0)
    return np.sum(np.where(p > 0, p * np.log(safe_p / q), 0.0), axis=-1)


def kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p ‖ q) in nats of one pair of distributions."""
    return float(kl_rows(p, q))


def entropy(q: np.ndarray) -> float:
    """H(q) in nats: how spread the model's own prediction is, whatever the label."""
    q = q[q > 0]
    return float(-np.sum(q * np.log(q)))


def tempered(model: np.ndarray, temperature: float) -> np.ndarray:
    """Rows of probabilities raised to 1/T and renormalised: softmax(logits / T)."""
    logits = np.log(np.clip(model, 1e-12, None)) / temperature
    logits -= logits.max(axis=1, keepdims=True)
    return np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)


def fitted_temperature(human: np.ndarray, model: np.ndarray) -> float:
    """The T in [0.05, 20] that minimises the mean KL(human ‖ softmax(logits / T))."""
    from scipy.optimize import minimize_scalar

    def mean_kl(log_t: float) -> float:
        return float(np.mean(kl_rows(human, tempered(model, math.exp(log_t)))))

    return math.exp(minimize_scalar(mean_kl, bounds=(math.log(0.05), math.log(20)),
                                    method="bounded", options={"xatol": 1e-4}).x)


def cross_fitted_kl(human: np.ndarray, model: np.ndarray) -> tuple[np.ndarray, float]:
    """Each pair's KL(human ‖ model at temperature T), T fitted on the other half of the
    pairs (alternate pairs, two folds), and the mean of the two T. Temperature scaling
    changes how sure a model is and never which label it ranks first, so the KL left after
    it is what calibration alone cannot remove; a T > 1 says the model was over-sure."""
    folds = np.arange(len(human)) % 2
    result = np.full(len(human), np.nan)
    temperatures = []
    for fold in (0, 1):
        fit, score = folds != fold, folds == fold
        if not fit.any() or not score.any():
            continue
        temperatures.append(fitted_temperature(human[fit], model[fit]))
        result[score] = kl_rows(human[score], tempered(model[score], temperatures[-1]))
    return result, float(np.mean(temperatures)) if temperatures else math.nan


def breakdown(dev: list[dict[str, Any]], predictions: list[dict[str, Any]],
              chaos: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per agreement level: pairs, accuracy (%), mean KL to the 100 and 5 labels, the mean
    entropy of the model's prediction (a model may come closer to the annotators merely
    by being less sure everywhere; the entropy on "rest of dev" tells the two apart), and
    the KL to the 100 labels after a temperature cross-fitted on the ChaosNLI pairs with
    the T used (:func:`cross_fitted_kl`)."""
    by_uid = {p["uid"]: p for p in predictions}
    left_out = 0
    found: dict[str, dict[str, list[float]]] = {
        level: {name: [] for name in ("correct", "kl_100", "kl_5", "entropy")}
        for level in LEVELS}
    annotated: list[tuple[str, np.ndarray, np.ndarray]] = []  # level, human, model
    for row in dev:
        predicted = by_uid.get(row["uid"])
        if predicted is None:
            raise MtdnnError(f"no prediction for dev row '{row['uid']}'", key="--predictions",
                             allowed="predictions of the whole dev file (predict.py)")
        item = chaos.get(pair_key(row["premise"], row["hypothesis"]))
        level = item["level"] if item else LEVELS[2]
        if level not in found:  # e.g. 3/1/0: a pair with only 4 original labels
            left_out += 1
            continue
        found[level]["correct"].append(float(predicted["prediction"] == row.get("label")))
        model = np.array([predicted["probabilities"][name] for name in LABELS])
        found[level]["entropy"].append(entropy(model))
        if item:
            found[level]["kl_100"].append(kl(item["human"], model))
            found[level]["kl_5"].append(kl(item["five"], model))
            annotated.append((level, item["human"], model))

    def mean(values: list[float]) -> float:
        return float(np.mean(values)) if values else math.nan

    result = {level: {"pairs": len(v["correct"]), "accuracy": 100 * mean(v["correct"]),
                      **{name: mean(v[name]) for name in ("kl_100", "kl_5", "entropy")}}
              for level, v in found.items()}
    if annotated:
        levels = np.array([level for level, _, _ in annotated])
        kls, temperature = cross_fitted_kl(np.array([h for _, h, _ in annotated]),
                                           np.array([m for _, _, m in annotated]))
        for level in ANNOTATED:
            result[level]["kl_100_tempered"] = mean(list(kls[levels == level]))
            result[level]["temperature"] = temperature
    for level in LEVELS:
        result[level].setdefault("kl_100_tempered", math.nan)
        result[level].setdefault("temperature", math.nan)
    result["other agreement (left out)"] = {"pairs": left_out}
    return result


REFERENCE = "uniform 1/3 (reference)"


def uniform_breakdown(dev: list[dict[str, Any]],
                      chaos: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """The breakdown of a prediction of 1/3 for every label: a reference that knows nothing
    (ChaosNLI's "chance" baseline, Nie et al., 2020). Its KL to a pair's annotators is
    ln 3 − H(annotators), so a model above it is further from them than knowing nothing, and
    a model merely less sure of every pair moves towards it. It has no accuracy (NaN)."""
    result = breakdown(dev, [{"uid": row["uid"], "prediction": None,
                              "probabilities": dict.fromkeys(LABELS, 1 / 3)} for row in dev],
                       chaos)
    for level in LEVELS:  # no label is ranked first, and every temperature is the same
        result[level]["accuracy"] = result[level]["temperature"] = math.nan
    return result


def scored_rows(files: list[Path]) -> list[dict[str, Any]]:
    """The rows of ``files`` in order, each uid prefixed by its file's number so that two
    files may share uids."""
    return [{**row, "uid": f"{number}:{row['uid']}"}
            for number, file in enumerate(files) for row in read_rows(file)]


def model_breakdown(predictor: Predictor, task: str, files: list[Path],
                    chaosnli: Path) -> dict[str, dict[str, float | None]]:
    """A model's breakdown on the rows of ``files`` (one dev set, or ChaosNLI's held-out
    pairs followed by another dev file as the rest); undefined means are None (JSON)."""
    rows = scored_rows(files)
    scored = predictor.predict([{"premise": r["premise"], "hypothesis": r["hypothesis"]}
                                for r in rows], tasks=[task])
    predictions = [{"uid": row["uid"], **out[task]} for row, out in zip(rows, scored,
                                                                        strict=True)]
    result = breakdown(rows, predictions, load_chaosnli(chaosnli))
    return {level: {name: None if isinstance(value, float) and math.isnan(value) else value
                    for name, value in values.items()} for level, values in result.items()}


MEASURES = (("accuracy", 1, "accuracy %"),  # name, decimals shown, title
            ("kl_100", 3, "KL to the 100 ChaosNLI labels"),
            ("kl_5", 3, "KL to the original 5 labels"),
            ("entropy", 3, "entropy of the model's prediction"),
            ("kl_100_tempered", 3, "KL to the 100 labels at a cross-fitted temperature"),
            ("temperature", 2, "that temperature (mean of the two folds')"))
DECIMALS = {name: decimals for name, decimals, _ in MEASURES}

Breakdowns = dict[str, dict[str, dict[str, float]]]  # model -> level -> measure -> value


def table(results: Breakdowns, spread: Breakdowns | None = None) -> str:
    """Models × levels, a block per measure of :data:`MEASURES`; with ``spread`` (each
    model's std over its runs, NaN for one run), mean ± std."""
    def cell(model: str, level: str, measure: str, decimals: int) -> str:
        # .get: a breakdown recorded before a measure was added lacks it
        value = results[model][level].get(measure, math.nan)
        if math.isnan(value):
            return "—"
        std = spread[model][level].get(measure, math.nan) if spread else math.nan
        return f"{value:.{decimals}f}" + ("" if math.isnan(std) else f" ± {std:.{decimals}f}")

    first = next(iter(results.values()))
    lines = ["| model | " + " | ".join(f"{level} ({first[level]['pairs']:,} pairs)"
                                       for level in LEVELS) + " |",
             "|---" * (len(LEVELS) + 1) + "|"]
    for measure, decimals, title in MEASURES:
        lines.append(f"| **{title}** |" + " |" * len(LEVELS))
        for model in results:
            lines.append(f"| {model} | " + " | ".join(cell(model, level, measure, decimals)
                                                      for level in LEVELS) + " |")
    left_out = first["other agreement (left out)"]["pairs"]
    if left_out:
        lines += ["", f"{left_out} ChaosNLI pairs with another original agreement (e.g. 3/1 "
                      "among only 4 labels) are left out."]
    return "\n".join(lines) + "\n"


def plot(results: Breakdowns, path: Path, spread: Breakdowns | None = None) -> None:
    """Accuracy and the prediction's entropy per level, and KL to the 100 labels as predicted
    and at a cross-fitted temperature per ChaosNLI level, a bar per model (with ``spread``,
    ± one std over its runs); the legend sits below the panels, clear of the bars."""
    from mtdnn.analysis.plots import _pyplot, _save

    plt = _pyplot()
    panels = (("accuracy", LEVELS, "dev accuracy (%)"),
              ("kl_100", ANNOTATED, "KL(ChaosNLI 100 labels ‖ model)"),
              ("kl_100_tempered", ANNOTATED, "the same KL at a cross-fitted temperature"),
              ("entropy", LEVELS, "entropy of the prediction (nats)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(20, 4.6))
    width = 0.8 / max(len(results), 1)
    for number, (model, levels) in enumerate(results.items()):
        for ax, (measure, shown, _) in zip(axes, panels, strict=True):
            errors = np.array([spread[model][level].get(measure, np.nan) for level in shown]
                              if spread else [np.nan])
            ax.bar(np.arange(len(shown)) + number * width,
                   [levels[level].get(measure, np.nan) for level in shown], width, label=model,
                   yerr=None if np.isnan(errors).all() else np.nan_to_num(errors), capsize=3)
    for ax, (_, shown, title) in zip(axes, panels, strict=True):
        ax.set_xticks(np.arange(len(shown)) + 0.4 - width / 2, shown)
        ax.set_ylabel(title)
        ax.grid(True, axis="y", alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center",
               ncol=min(len(results), 4), frameon=False)
    _save(fig, path, rect=(0, 0.08, 1, 1))


def read_rows(path: Path, fields: tuple[str, ...] = ("uid", "premise", "hypothesis"),
              what: str = "a canonical SNLI/MNLI file (data_prep's output)",
              key: str | None = None) -> list[dict[str, Any]]:
    """The rows of a JSONL file, each with ``fields`` (an error names the first without)."""
    rows = []
    for line, row in read_jsonl(path):
        missing = [name for name in fields if not isinstance(row, dict) or name not in row]
        if missing:
            found = ", ".join(row) if isinstance(row, dict) else type(row).__name__
            raise MtdnnError(f"the row has no '{missing[0]}' (it has: {found})", file=path,
                             line=line, key=key, allowed=what)
        rows.append(row)
    return rows


def read_predictions(path: Path) -> list[dict[str, Any]]:
    """predict.py's output for a three-label NLI task."""
    rows = read_rows(path, ("uid", "prediction", "probabilities"),
                     "predict.py's output for an SNLI/MNLI-style task", key="--predictions")
    for line, row in enumerate(rows, start=1):
        probabilities = row["probabilities"]
        if not isinstance(probabilities, dict) or set(probabilities) != set(LABELS):
            names = list(probabilities) if isinstance(probabilities, dict) else probabilities
            raise MtdnnError(f"probabilities over {names}, not the three NLI labels",
                             file=path, line=line, key="--predictions",
                             allowed=f"predictions of a task labelled {', '.join(LABELS)} "
                                     "(SNLI, MNLI)")
    return rows


def json_safe(results: dict[str, dict[str, dict[str, float]]]) -> dict:
    """Undefined means (NaN) as null: JSON has no NaN."""
    return {model: {level: {name: None if isinstance(v, float) and math.isnan(v) else v
                            for name, v in values.items()} for level, values in levels.items()}
            for model, levels in results.items()}


def main(argv: list[str] | None = None) -> None:
    parser = command_parser("mtdnn.agreement", __doc__)
    add_debug_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="accuracy and KL by agreement level")
    report.add_argument("--chaosnli", type=Path, required=True, help="ChaosNLI jsonl")
    report.add_argument("--dev", type=Path, required=True, help="the dev file predicted")
    report.add_argument("--predictions", nargs="+", required=True, metavar="NAME=FILE",
                        help="predict.py outputs of the whole dev file, one per model")
    report.add_argument("--out", type=Path, required=True,
                        help="writes <out>.md, <out>.json and <out>.png")
    report.add_argument("--overwrite", action="store_true",
                        help="replace an earlier report at --out (never an input)")
    for name, text in (("exclude", "drop ChaosNLI's pairs from a file"),
                       ("select", "keep only ChaosNLI's pairs of a file")):
        command = commands.add_parser(name, help=text)
        command.add_argument("--chaosnli", type=Path, required=True, help="ChaosNLI jsonl")
        command.add_argument("--input", type=Path, required=True, help="canonical JSONL")
        command.add_argument("--output", type=Path, required=True, help="canonical JSONL")
    args = parser.parse_args(argv)
    if args.command in ("exclude", "select"):
        check_output(args.output, [args.input, args.chaosnli], key="--output", overwrite=False)
        chaos = load_chaosnli(args.chaosnli)
        rows = read_rows(args.input)
        keep = args.command == "select"
        kept = [r for r in rows if (pair_key(r["premise"], r["hypothesis"]) in chaos) == keep]
        atomic_write_text(args.output, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                               for r in kept))
        print(f"kept {len(kept):,} of {len(rows):,} rows ({len(rows) - len(kept):,} "
              f"{'other' if keep else 'ChaosNLI'} pairs removed): {args.output}")
        return
    models = {}
    for spec in args.predictions:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise MtdnnError(f"{spec!r} is not NAME=FILE", key="--predictions",
                             allowed="e.g. mt-dnn=runs/mt/snli_dev.jsonl")
        models[name] = Path(file)
    inputs = [args.chaosnli, args.dev, *models.values()]
    outputs = [args.out.with_suffix(suffix) for suffix in (".md", ".json", ".png")]
    for output in outputs:
        check_output(output, inputs, key="--out", overwrite=args.overwrite)
    chaos = load_chaosnli(args.chaosnli)
    dev = read_rows(args.dev, key="--dev")
    results = {name: breakdown(dev, read_predictions(file), chaos)
               for name, file in models.items()}
    results[REFERENCE] = uniform_breakdown(dev, chaos)
    text = table(results)
    atomic_write_text(outputs[0], text)
    atomic_write_json(outputs[1], json_safe(results))
    plot(results, outputs[2])
    print(text)

