from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import REPO
from mtdnn.config.resolve import config_to_yaml, resolve_config
from mtdnn.config.smart_config import SMART_PRESETS
from mtdnn.errors import MtdnnError
from mtdnn.experiment import load_experiment
from mtdnn.tasks.task_def import select_tasks


@pytest.mark.parametrize("path", sorted((REPO / "experiments").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_experiments_are_valid(path: Path) -> None:
    """Every experiment config loads (its arms' and stages' training keys validated) and
    writes under runs/, publishing to results/ if anywhere."""
    experiment = load_experiment(path, [])
    assert experiment.arms and experiment.seeds
    assert experiment.output_dir.startswith("runs/")
    assert experiment.publish_dir is None or experiment.publish_dir.startswith("results/")


@pytest.mark.parametrize("path", sorted((REPO / "mtdnn" / "configs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_train_configs_are_valid(path: Path) -> None:
    assert resolve_config(path).tasks


def test_overrides_and_round_trip(tmp_path: Path) -> None:
    config = resolve_config(REPO / "tests/fixtures/smoke.yaml",
                         ["optimizer.lr=3e-5", "tasks=[rte,sst2]", "sampler.kind=temperature"])
    assert config.optimizer.lr == 3e-5 and list(config.tasks) == ["rte", "sst2"]
    assert config.sampler.kind == "temperature" and config.encoder_layers == 2
    later = resolve_config(None, ["tasks=[rte,mrpc]", "tasks.rte.dev=x.jsonl"])
    assert later.tasks["rte"].dev == "x.jsonl" and later.tasks["mrpc"].dev is None
    again = resolve_config(yaml.safe_load(config_to_yaml(config)))
    assert again == config


@pytest.mark.parametrize("override,words", [
    ("optimizer.lrr=1", "key 'optimizer.lrr': unknown key 'lrr'"),
    ("epochs=two", "key 'epochs': found 'two' (str), expected an integer"),
    ("precision=fp8", "key 'precision': unknown value 'fp8' (allowed: auto, fp32, bf16, fp16)"),
    ("batch_size=0", "key 'batch_size': value 0 is out of range"),
    ("oops", "is not key=value"),
])
def test_bad_overrides_name_the_key(override: str, words: str) -> None:
    with pytest.raises(MtdnnError) as caught:
        resolve_config(REPO / "tests/fixtures/smoke.yaml", [override])
    assert words in str(caught.value)


def test_unknown_key_in_file_names_file(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("tasks: [rte]\nlearning_rate: 1e-5\n")
    with pytest.raises(MtdnnError, match=r"run\.yaml: key 'learning_rate': unknown key"):
        resolve_config(path)


def test_smart_presets_fill_keys_that_are_not_given() -> None:
    reference = resolve_config(None, ["tasks=[rte]", "smart.enabled=true",
                                      "smart.preset=reference"])
    assert (reference.smart.ascent, reference.smart.perturb) == ("reference", "embedding_output")
    assert not reference.smart.share_dropout and reference.smart.bregman_weight == 0
    assert reference.smart.eta == pytest.approx(1e-3) and reference.smart.guard == 1e-6
    mine = resolve_config(None, ["tasks=[rte]", "smart.preset=reference", "smart.bregman_weight=1"])
    assert mine.smart.bregman_weight == 1 and mine.smart.ascent == "reference"
    with pytest.raises(MtdnnError, match="unknown value 'referense' \\(did you mean 'reference'"):
        resolve_config(None, ["tasks=[rte]", "smart.preset=referense"])
    # the calibrated preset moves ε off the paper's inert 1e-5, with η = 100 ε reaching the ball
    calibrated = resolve_config(None, ["tasks=[rte]", "smart.enabled=true",
                                       "smart.preset=calibrated"])
    assert calibrated.smart.epsilon == SMART_PRESETS["calibrated"]["epsilon"] > 1e-5
    assert calibrated.smart.eta == pytest.approx(100 * calibrated.smart.epsilon)
    assert calibrated.smart.bregman_weight == 1 and calibrated.smart.ascent == "paper"


def test_the_teacher_lag_fits_the_run_by_default_and_the_paper_preset_keeps_the_papers(
        tmp_path: Path) -> None:
    """The default teacher schedule is `scaled` (docs/results.md, SMART's mean teacher);
    `preset: paper` is the paper as written, its β too, unless the schedule is named. A run
    config saved before the default changed (no teacher_schedule) reads as the paper's where
    it had a teacher, and as today's where it had none."""
    from mtdnn.config.resuming import as_current
    from mtdnn.config.schema import to_dict

    def schedule(*keys: str) -> str:
        return resolve_config(None, ["tasks=[rte]", "smart.enabled=true", *keys]
                              ).smart.teacher_schedule

    assert schedule() == schedule("smart.preset=calibrated") == "scaled"
    assert schedule("smart.preset=paper") == "paper"
    assert schedule("smart.preset=paper", "smart.teacher_schedule=ramp") == "ramp"
    for keys, former in ((["smart.preset=calibrated"], "paper"),
                         (["smart.bregman_weight=0"], "scaled"),
                         (["smart.enabled=false"], "scaled")):
        saved = to_dict(resolve_config(None, ["tasks=[rte]", "smart.enabled=true", *keys]))
        del saved["smart"]["teacher_schedule"]
        assert as_current(saved, tmp_path / "config.yaml").smart.teacher_schedule == former


def test_the_help_of_best_metric_shows_a_value_the_run_accepts() -> None:
    """The form ``--help`` gives for ``best_metric``, filled in, passes the run's check
    and picks the score it names."""
    import re

    from mtdnn.config.help import config_keys
    from mtdnn.tasks.metrics import check_best_metric, score_of

    meaning = {key: meaning for key, *_, meaning in config_keys()}["best_metric"]
    form = re.search(r"<task>\S<metric>", meaning).group(0)
    example = form.replace("<task>", "rte").replace("<metric>", "accuracy")
    config = resolve_config(None, ["tasks=[rte, mrpc]", f"best_metric={example}"])
    with_dev = list(config.tasks)
    check_best_metric(config.best_metric, select_tasks(config), with_dev)
    scores = {"rte": {"accuracy": 0.75}, "mrpc": {"accuracy": 0.5, "f1": 0.6}}
    assert score_of(scores, config.best_metric) == 0.75


def test_every_key_has_a_meaning_and_the_readme_table_is_current() -> None:
    """``--help`` and the README list every key from one source; MTDNN_WRITE_DOCS=1
    rewrites a stale table (the test still fails that once)."""
    import os
    import re

    from mtdnn.config.help import config_keys, help_epilog, markdown_table

    keys = [key for key, *_ in config_keys()]
    assert len(keys) > 70 and all(meaning for *_, meaning in config_keys())
    assert all(key in help_epilog() for key in keys)
    readme = REPO / "README.md"
    text = readme.read_text()
    pattern = re.compile(r"(<!-- config keys:[^\n]*-->\n)(.*?)(<!-- /config keys -->)", re.S)
    current = pattern.search(text).group(2) == markdown_table()
    # a key's choices ('a' | 'b') must not split its row into more cells than the head has
    for row in markdown_table().splitlines():
        assert len(re.split(r"(?<!\\)\|", row.strip("|"))) == 4, row
    if not current and os.environ.get("MTDNN_WRITE_DOCS"):
        readme.write_text(pattern.sub(lambda m: m.group(1) + markdown_table() + m.group(3),
                                      text))
    # fails while the table is stale, with MTDNN_WRITE_DOCS set or not (set: it is rewritten,
    # and the next run passes)
    assert current, "README's config key table was stale" + (
        " and has been rewritten: commit it" if os.environ.get("MTDNN_WRITE_DOCS") else
        ": MTDNN_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_config.py -k readme")


def test_a_preset_switched_on_the_command_line_replaces_the_earlier_presets_keys(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from mtdnn.config.resolve import resolve_config

    path = tmp_path / "smart.yaml"
    path.write_text("tasks: [rte]\nsmart: {enabled: true, preset: calibrated}\n")
    assert resolve_config(path).smart.epsilon == 1e-3
    switched = resolve_config(path, ["smart.preset=paper"])
    assert (switched.smart.preset, switched.smart.epsilon) == ("paper", 1e-5)
    # a key given next to the preset still wins over it
    assert resolve_config(path, ["smart.epsilon=1e-4"]).smart.epsilon == 1e-4
    with caplog.at_level("WARNING"):
        resolve_config(None, ["tasks=[rte]", "smart.preset=reference"])
    assert "smart.preset 'reference' has no effect while smart.enabled is false" in caplog.text


def test_a_task_set_to_null_on_the_command_line_leaves_the_run(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("tasks:\n  sentiment:\n    definition: {type: classification, "
                    "inputs: [sentence], labels: [neg, pos]}\n  rte: {}\n")
    assert list(resolve_config(path).tasks) == ["sentiment", "rte"]
    assert list(resolve_config(path, ["tasks.sentiment=null"]).tasks) == ["rte"]


def test_one_way_in_the_same_keys_give_the_same_config_by_every_form() -> None:
    """A YAML with command-line overrides, the same YAML with Python keys, and a mapping
    all resolve alike; nothing outside mtdnn.config.train_config builds a TrainConfig itself."""
    import re

    from mtdnn.config.schema import to_dict
    from mtdnn.config.train_config import TrainConfig

    by_strings = resolve_config("demo_stage1", ["optimizer.lr=3e-5", "tasks=[rte]",
                                                "smart.enabled=true", "smart.preset=paper"])
    by_keys = resolve_config("demo_stage1", keys={"optimizer": {"lr": 3e-5}, "tasks": ["rte"],
                                                  "smart": {"enabled": True,
                                                            "preset": "paper"}})
    by_mapping = resolve_config(to_dict(by_keys))
    assert by_strings == by_keys == by_mapping == resolve_config(by_keys)
    assert isinstance(by_strings, TrainConfig) and by_strings.optimizer.lr == 3e-5
    builders = [p for p in (REPO / "mtdnn").rglob("*.py")
                if re.search(r"build\(TrainConfig|TrainConfig\(", p.read_text())]
    assert [p.name for p in builders] == ["resolve.py"]


def test_list_configs_shows_whole_first_sentences() -> None:
    from mtdnn.cli import list_configs
    from mtdnn.config.resolve import packaged_configs

    listed = dict(line.split(None, 1) for line in list_configs().splitlines()[:-1])
    assert set(listed) == set(packaged_configs())
    for name, description in listed.items():
        prose = " ".join(line.lstrip("# ").strip()
                         for line in packaged_configs()[name].read_text().splitlines()
                         if line.startswith("#"))
        assert description.endswith(".") and prose.startswith(description), name
    # a description longer than a line is not cut where the comment's first line ends
    assert listed["demo_stage1"].endswith("proportional sampling.")
