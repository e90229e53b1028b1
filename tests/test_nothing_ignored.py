"""Settings that cannot act as written are said, and a mapping applies where it was meant:
one test per way a run used to ignore what the user asked without a word."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import pytest

from mtdnn.config.resolve import resolve_config
from mtdnn.errors import MtdnnError


def test_a_config_name_that_is_both_a_local_file_and_a_packaged_config_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mtdnn.config.resolve import config_file, packaged_configs

    monkeypatch.chdir(tmp_path)
    assert config_file("demo_stage1") == packaged_configs()["demo_stage1"]
    Path("demo_stage1.yaml").write_text("tasks: [rte]\n")
    with pytest.raises(MtdnnError, match=r"names both the file demo_stage1.yaml here and the "
                                         r"packaged run config demo_stage1"):
        config_file("demo_stage1")
    assert config_file("demo_stage1.yaml") == Path("demo_stage1.yaml")  # the file, by name
    Path("mine.yaml").write_text("tasks: [rte]\n")
    assert config_file("mine") == Path("mine.yaml")  # a local name alone finds its file


def test_dropping_a_task_the_run_does_not_have_is_an_error_with_did_you_mean() -> None:
    with pytest.raises(MtdnnError, match=r"tasks.sts-b=null drops a task the run does not "
                                         r"have \(did you mean 'stsb'\?\)"):
        resolve_config(None, ["tasks=[rte,stsb]", "tasks.sts-b=null"])
    assert list(resolve_config(None, ["tasks=[rte,stsb]", "tasks.stsb=null"]).tasks) == ["rte"]


def test_output_formats_go_by_the_extension_in_any_case() -> None:
    from mtdnn.inference.writers import output_format

    assert [output_format(Path(name), None) for name in ("p.CSV", "p.csv", "p.Csv", "p.jsonl")
            ] == ["csv", "csv", "csv", "jsonl"]


def test_a_preset_after_an_explicit_key_warns_that_the_key_wins(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("tasks: [rte]\nsmart: {enabled: true, epsilon: 1.0e-3}\n")
    with caplog.at_level(logging.WARNING, logger="mtdnn.config"):
        resolved = resolve_config(config, ["smart.preset=paper"])
    assert resolved.smart.epsilon == 1e-3  # the explicit key wins, in either order ...
    assert "smart.epsilon=0.001 replaces preset paper's epsilon=1e-05" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mtdnn.config"):
        resolve_config(config, ["smart.preset=paper", "smart.epsilon=1e-5"])
    assert "replaces preset" not in caplog.text  # ... and agreeing with it is no news


def test_a_teacher_schedule_without_smart_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mtdnn.config"):
        resolve_config(None, ["tasks=[rte]", "smart.teacher_schedule=paper"])
    assert "smart.teacher_schedule has no effect while smart.enabled is false" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mtdnn.config"):
        resolve_config(None, ["tasks=[rte]", "smart.enabled=true",
                              "smart.teacher_schedule=paper"])
    assert caplog.text == ""


def test_a_warm_up_longer_than_the_run_warns(caplog: pytest.LogCaptureFixture) -> None:
    import torch

    from mtdnn.config.train_config import OptimizerConfig
    from mtdnn.training.optimization import build_scheduler

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with caplog.at_level(logging.WARNING, logger="mtdnn.training.optimization"):
        scheduler = build_scheduler(optimizer, OptimizerConfig(warmup_steps=5000), 20)
    for _ in range(20):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] < 0.005  # what the user was not told
    assert ("optimizer.warmup_steps 5000 is not shorter than the run's 20 steps: the learning "
            "rate never reaches optimizer.lr (at most 0.4% of it)") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mtdnn.training.optimization"):
        build_scheduler(optimizer, OptimizerConfig(warmup_steps=5), 20)
    assert caplog.text == ""


def test_a_scaled_teacher_that_lags_under_one_update_warns(
        caplog: pytest.LogCaptureFixture) -> None:
    import torch

    from mtdnn.config.smart_config import SmartConfig
    from mtdnn.modeling.smart import build_teacher

    model = torch.nn.Linear(2, 2)
    smart = SmartConfig(enabled=True)  # the scaled schedule, μ = 1
    with caplog.at_level(logging.WARNING, logger="mtdnn.modeling.smart"):
        teacher = build_teacher(model, smart, 20)
    assert ("the scaled teacher lags smart.teacher_lag_fraction 0.03 of this run's 20 teacher "
            "updates, under one update: the teacher is the student at every step, so the "
            "Bregman term (μ = 1) is 0 throughout; train for more than 33 steps, or set "
            "smart.teacher_schedule=paper") in caplog.text
    with torch.no_grad():
        model.weight.add_(1.0)
    teacher.update(model)  # β = 0: the teacher becomes the student at once
    assert torch.equal(teacher.snapshot()["model"]["weight"], model.weight)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mtdnn.modeling.smart"):
        build_teacher(model, smart, 34)
    assert caplog.text == ""


def test_a_column_mapping_applies_to_the_users_file_not_the_default_dev_file(
        prepared_data: Path, tmp_path: Path) -> None:
    from mtdnn.data.sources import canonical_files
    from mtdnn.files import read_jsonl
    from mtdnn.tasks.task_def import select_tasks

    rows = [row for _, row in read_jsonl(prepared_data / "rte/train.jsonl")][:4]
    mine = tmp_path / "my.csv"
    with open(mine, "w", newline="") as handle:
        csv.writer(handle).writerows([("premise", "hypothesis", "gold")] + [
            (r["sentence1"], r["sentence2"], r["label"]) for r in rows])
    config = resolve_config(None, [
        "tasks=[rte]", f"tasks.rte.train={mine}", f"data_dir={prepared_data}",
        f"cache_dir={tmp_path / 'cache'}",
        "tasks.rte.columns={sentence1: premise, sentence2: hypothesis, label: gold}"])
    train, dev = canonical_files(config, select_tasks(config))["rte"]
    assert dev == prepared_data / "rte/dev.jsonl"  # read as it is
    assert [row["sentence1"] for _, row in read_jsonl(train)] == [r["sentence1"] for r in rows]


def test_a_misspelt_key_suggests_the_key_meant_in_its_section_or_by_its_common_name() -> None:
    for given, meant in (("lerning_rate", "optimizer.lr"), ("learning_rate", "optimizer.lr"),
                         ("num_train_epochs", "epochs"), ("warmup_steps",
                                                          "optimizer.warmup_steps")):
        with pytest.raises(MtdnnError, match=rf"unknown key '{given}' \(did you mean "
                                             rf"'{meant}'\?\)"):
            resolve_config(None, ["tasks=[rte]", f"{given}=1"])
