from __future__ import annotations

from pathlib import Path

import pytest

from mtdnn.errors import MtdnnError
from mtdnn.tasks.task_def import load_task_defs, load_task_file

GOOD = """\
rte:
  type: classification
  labels: [entailment, not_entailment]
  inputs: [sentence1, sentence2]
  metrics: [accuracy]
"""


def write(tmp_path: Path, text: str, name: str = "tasks.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_definitions_load_with_expected_tasks() -> None:
    tasks = load_task_defs()
    assert set(tasks) == {"rte", "mrpc", "sst2", "stsb", "cola", "wnli", "qnli", "mnli",
                          "snli", "scitail", "qnli_ranking", "conll2003", "wnut17", "squad"}
    assert tasks["qnli_ranking"].num_outputs == 1 and tasks["conll2003"].num_outputs == 9
    assert tasks["scitail"].labels == ("entails", "neutral")
    assert tasks["snli"].labels == ("entailment", "neutral", "contradiction")
    assert tasks["stsb"].type == "regression" and tasks["stsb"].labels == ()
    assert tasks["stsb"].divergence == "squared_error"
    assert tasks["rte"].divergence == "symmetric_kl"
    assert tasks["mnli"].num_outputs == 3 and tasks["stsb"].num_outputs == 1
    assert tasks["sst2"].inputs == ("sentence",)


def test_task_def_is_frozen(tmp_path: Path) -> None:
    task = load_task_file(write(tmp_path, GOOD))["rte"]
    with pytest.raises(AttributeError):
        task.type = "regression"  # type: ignore[misc]


def test_a_changed_file_is_read_again_and_a_caller_cannot_change_the_next_read(
        tmp_path: Path) -> None:
    """Parsed task files are reused while unchanged; an edit is seen at once, and the mapping
    one caller gets is its own."""
    path = write(tmp_path, GOOD)
    first = load_task_file(path)
    first["extra"] = first.pop("rte")
    assert list(load_task_file(path)) == ["rte"]
    path.write_text(GOOD + "  dropout: 0.2\n")
    assert load_task_file(path)["rte"].dropout == 0.2
    path.write_text(GOOD.replace("rte:", "mrpc:"))
    assert list(load_task_file(path)) == ["mrpc"]


def test_smart_override_loads(tmp_path: Path) -> None:
    text = GOOD + "  smart: {adv_weight: 5.0}\n  dropout: 0.2\n"
    task = load_task_file(write(tmp_path, text))["rte"]
    assert task.smart.adv_weight == 5.0 and task.dropout == 0.2


# (yaml text, key named in the error, words the message must contain)
INVALID = {
    "unknown key": (GOOD + "  labelz: [a, b]\n", "rte.labelz", "unknown key"),
    "wrong type": (GOOD.replace("[accuracy]", "accuracy"), "rte.metrics", "expected a list"),
    "wrong type dropout": (GOOD + "  dropout: high\n", "rte.dropout", "expected a number"),
    "dropout out of range": (GOOD + "  dropout: 1.5\n", "rte.dropout", "out of range"),
    "unknown task type": (GOOD.replace("classification", "rankng"), "rte.type",
                          "did you mean 'ranking'?"),
    "unknown metric": (GOOD.replace("[accuracy]", "[bleu]"), "rte.metrics",
                       "unknown metric 'bleu'"),
    "empty labels": (GOOD.replace("[entailment, not_entailment]", "[]"), "rte.labels",
                     "at least two labels"),
    "duplicate labels": (GOOD.replace("not_entailment]", "entailment]"), "rte.labels",
                         "duplicate label 'entailment'"),
    "numeric labels": (GOOD.replace("[entailment, not_entailment]", "[0, 1]"), "rte.labels[0]",
                       "expected a string"),
    "regression with labels": (GOOD.replace("classification", "regression")
                               .replace("[accuracy]", "[pearson]"), "rte.labels",
                               "has no labels"),
    "metric does not fit type": (GOOD.replace("[accuracy]", "[pearson]"), "rte.metrics",
                                 "does not fit a classification task"),
    "f1 with three labels": (GOOD.replace("not_entailment]", "neutral, contradiction]")
                             .replace("[accuracy]", "[f1]"), "rte.metrics", "exactly two labels"),
    "divergence does not fit type": (GOOD + "  smart: {divergence: squared_error}\n",
                                     "rte.smart.divergence", "symmetric_kl"),
    "three inputs": (GOOD.replace("[sentence1, sentence2]", "[a, b, c]"), "rte.inputs",
                     "one text field or a pair"),
    "reserved input": (GOOD.replace("[sentence1, sentence2]", "[label]"), "rte.inputs",
                       "reserved"),
    "missing key": (GOOD.replace("  type: classification\n", ""), "rte.type", "required"),
    "negative adv weight": (GOOD + "  smart: {adv_weight: -1}\n", "rte.smart.adv_weight",
                            "out of range (allowed: 0 (off) or 1 <= lambda_s <= 5)"),
    "adv weight too large": (GOOD + "  smart: {adv_weight: 20}\n", "rte.smart.adv_weight",
                             "out of range"),
    "bad task name": (GOOD.replace("rte:", "RTE task:"), "RTE task", "invalid task name"),
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_definition_names_file_task_and_key(tmp_path: Path, case: str) -> None:
    text, key, words = INVALID[case]
    path = write(tmp_path, text)
    with pytest.raises(MtdnnError) as caught:
        load_task_file(path)
    message = str(caught.value)
    assert str(path) in message
    assert f"key '{key}'" in message
    assert words in message


def test_duplicate_key_in_one_file_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "  type: regression\n")
    expected = r"tasks\.yaml:6: duplicate key 'type' \(first at line 2\)"
    with pytest.raises(MtdnnError, match=expected):
        load_task_file(path)


def test_task_defined_in_two_files(tmp_path: Path) -> None:
    write(tmp_path, GOOD, "a.yaml")
    write(tmp_path, GOOD, "b.yaml")
    expected = r"b\.yaml: key 'rte': task 'rte' is already defined in .*a\.yaml"
    with pytest.raises(MtdnnError, match=expected):
        load_task_defs(tmp_path)


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD + "  metrics: [accuracy\n")
    with pytest.raises(MtdnnError, match=r"tasks\.yaml:\d+: invalid YAML"):
        load_task_file(path)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(MtdnnError, match="no such task definition file or folder"):
        load_task_defs(tmp_path / "nope.yaml")
