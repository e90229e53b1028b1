"""The SMART calibration probe: R_s against ε, in eval and training mode."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from conftest import head_jsonl
from mtdnn.analysis.smart_probe import main
from mtdnn.commandline import run_cli


def test_probe_prints_r_s_growing_with_epsilon(prepared_data: Path, tiny_encoder_dir: Path,
                                               tmp_path: Path) -> None:
    rows = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "rte.jsonl", 16)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        # overrides right after --epsilon's list, as the README writes them
        run_cli(main, ["--task", "rte", "--batches", "2", "--epsilon", "1e-3", "1e-1",
                       f"tasks.rte.train={rows}", f"encoder={tiny_encoder_dir}",
                       f"cache_dir={tmp_path / 'cache'}", "batch_size=8", "precision=fp32"])
    lines = [line for line in printed.getvalue().splitlines() if line.startswith("| 0.")]
    assert len(lines) == 2
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    # ε, η = 100 ε, precision, then R_s, ratio, ‖δ‖∞ in eval and in train mode
    assert [c[1] for c in cells] == ["0.1", "10"]
    for mode in (0, 3):
        small, large = (float(c[3 + mode]) for c in cells)
        assert 0 < small < large
        assert [float(c[5 + mode]) for c in cells] == pytest.approx([1e-3, 1e-1], rel=1e-3)
    # the fresh head is drawn from the run's seed: a second probe prints the same table
    again = io.StringIO()
    with contextlib.redirect_stdout(again):
        run_cli(main, ["--task", "rte", "--batches", "2", "--epsilon", "1e-3", "1e-1",
                       f"tasks.rte.train={rows}", f"encoder={tiny_encoder_dir}",
                       f"cache_dir={tmp_path / 'cache'}", "batch_size=8", "precision=fp32"])
    assert [line for line in again.getvalue().splitlines() if line.startswith("| 0.")] == lines


def test_probe_refuses_a_radius_that_is_not_positive(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_cli(main, ["--task", "rte", "--epsilon", "0"])
    assert exit_.value.code == 2
    assert "key '--epsilon'" in capsys.readouterr().err


def test_probe_reads_a_task_defined_inline_in_the_run_config(tmp_path: Path,
                                                             tiny_encoder_dir: Path) -> None:
    """The probe resolves tasks as training does: an inline definition and its CSV."""
    data = tmp_path / "reviews.csv"
    data.write_text("text,stars\n" + "".join(
        f"{'good' if i % 2 else 'bad'} film {i},{'pos' if i % 2 else 'neg'}\n"
        for i in range(8)))
    config = tmp_path / "run.yaml"
    config.write_text(
        "tasks:\n  sentiment:\n"
        f"    train: {data}\n    columns: {{sentence: text, label: stars}}\n"
        "    definition: {type: classification, inputs: [sentence], labels: [neg, pos]}\n"
        "  rte: {}\n"
        f"encoder: {tiny_encoder_dir}\ncache_dir: {tmp_path / 'cache'}\nprecision: fp32\n")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run_cli(main, ["--config", str(config), "--task", "sentiment", "--batches", "1",
                       "--epsilon", "1e-3", "batch_size=4"])
    assert "SMART probe: task sentiment" in printed.getvalue()
    assert sum(line.startswith("| 0.001") for line in printed.getvalue().splitlines()) == 1


def test_the_probe_batches_as_its_config_says(tmp_path: Path) -> None:
    from mtdnn.analysis.smart_probe import probe_config

    config = tmp_path / "run.yaml"
    config.write_text("tasks: [rte]\nbatch_size: 48\n")
    assert probe_config(str(config), "rte", []).batch_size == 48  # the config's own
    assert probe_config(str(config), "rte", ["batch_size=8"]).batch_size == 8
    assert probe_config(None, "rte", []).batch_size == 16  # no config: quick batches
