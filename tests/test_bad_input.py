"""Bad input of every kind: exit code 2, a message naming where and what, no traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from bad_input_cases import CASES, Case, run_case, train_args, write_table


@pytest.fixture(scope="session")
def context(tiny_encoder_dir: Path, prepared_data: Path,
            tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A finished tiny run (for 'already holds a run', resume and predict cases)."""
    from mtdnn.config import load_config
    from mtdnn.trainer import train

    tmp = tmp_path_factory.mktemp("context")
    ctx = {"encoder": str(tiny_encoder_dir), "data": str(prepared_data)}
    train(load_config(None, train_args(tmp, ctx)))
    return {**ctx, "run": str(tmp / "run"), "checkpoint": str(tmp / "run" / "best")}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kind}: {c.what}")
def test_bad_input(case: Case, context: dict, tmp_path: Path) -> None:
    code, stderr = run_case(case, tmp_path, context)
    assert code == 2, stderr[-2000:]
    assert case.expect in stderr
    assert "Traceback" not in stderr
    # nothing half-written where predict, export, sweeps and comparisons write
    assert not [name for name in ("out.jsonl", "exported", "sweep", "cmp")
                if (tmp_path / name).exists()]
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "out" / "rte").exists()


def test_at_least_twenty_cases_across_every_kind() -> None:
    kinds = {case.kind for case in CASES}
    assert kinds == {"data file", "task definition", "run config", "CLI argument", "checkpoint"}
    assert len(CASES) >= 20


def test_robustness_doc_is_current(context: dict, tmp_path: Path) -> None:
    """docs/robustness.md is exactly what the cases produce now."""
    doc = Path(__file__).resolve().parent.parent / "docs" / "robustness.md"
    fresh = tmp_path / "robustness.md"
    write_table(fresh, context, tmp_path / "cases")
    if os.environ.get("MTDNN_WRITE_DOCS") == "1":
        doc.write_text(fresh.read_text())
    assert fresh.read_text() == doc.read_text()
