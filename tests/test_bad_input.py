"""Bad input of every kind: exit code 2, a message naming where and what, no traceback."""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

import pytest
from bad_input_cases import (
    CASES,
    KINDS,
    Case,
    case_message,
    case_messages,
    last_error_line,
    run_case,
    train_args,
    write_table,
)

# Each case's table message as test_bad_input saw it, by case number: the doc test reads
# them instead of running the cases again (it runs them itself when run alone).
SEEN_MESSAGES: dict[int, str] = {}


@pytest.fixture(scope="session")
def context(tiny_encoder_dir: Path, prepared_data: Path,
            tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A finished tiny run (for 'already holds a run', resume and predict cases)."""
    from mtdnn.config.resolve import resolve_config
    from mtdnn.training.trainer import train

    tmp = tmp_path_factory.mktemp("context")
    ctx = {"encoder": str(tiny_encoder_dir), "data": str(prepared_data)}
    train(resolve_config(None, train_args(tmp, ctx)))
    return {**ctx, "run": str(tmp / "run"), "checkpoint": str(tmp / "run" / "best")}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.kind}: {c.what}")
def test_bad_input(case: Case, context: dict, tmp_path: Path) -> None:
    code, stderr, broken = run_case(case, tmp_path, context)
    assert code == case.code, stderr[-2000:]
    assert case.expect in stderr
    assert "Traceback" not in stderr
    # the one-line error names the file (a path) or the key
    assert re.search(r"key '[^']+'|/", last_error_line(stderr)), stderr
    # and a file it names is this pytest run's (not one an earlier run cached by name)
    for named in re.findall(r"/tmp/pytest-of-[^\s':]+", last_error_line(stderr)):
        assert named.startswith(str(tmp_path.parent)), (named, stderr)
    # earlier files byte-identical; nothing half-written (no predictions, exports,
    # canonical files, results, and no run folder from a start that failed its checks)
    assert not broken
    if case.check is not None:
        case.check(tmp_path)
    number = next(n for n, c in enumerate(CASES, start=1) if c is case)
    SEEN_MESSAGES[number] = case_message(number, stderr, tmp_path)


def test_at_least_ninety_cases_across_every_kind() -> None:
    assert {case.kind for case in CASES} == set(KINDS)
    assert len(CASES) >= 90
    assert len({(case.kind, case.what) for case in CASES}) == len(CASES)


def test_robustness_doc_is_current(context: dict, tmp_path: Path) -> None:
    """docs/robustness.md is exactly what the cases produce now."""
    doc = Path(__file__).resolve().parent.parent / "docs" / "robustness.md"
    fresh = tmp_path / "robustness.md"
    messages = (dict(SEEN_MESSAGES) if len(SEEN_MESSAGES) == len(CASES)
                else case_messages(context, tmp_path / "cases"))
    write_table(fresh, messages)
    old_text, new_text = doc.read_text(), fresh.read_text()
    current = new_text == old_text
    if not current and os.environ.get("MTDNN_WRITE_DOCS") == "1":
        doc.write_text(new_text)
    # fails while the doc is stale, with MTDNN_WRITE_DOCS set or not (set: it is rewritten)
    changed = "\n".join(difflib.unified_diff(
        old_text.splitlines(), new_text.splitlines(), "docs/robustness.md", "now",
        n=0, lineterm=""))
    assert current, "docs/robustness.md was stale" + (
        " and has been rewritten: commit it" if os.environ.get("MTDNN_WRITE_DOCS") == "1"
        else ": MTDNN_WRITE_DOCS=1 .venv/bin/python -m pytest tests/test_bad_input.py -k doc"
    ) + "\n" + changed


def test_outputs_follow_the_umask(context: dict, tmp_path: Path) -> None:
    """Checkpoints, predictions, manifests and exports get the modes a plain open()/mkdir()
    would give under the user's umask, not mkstemp's 0600 / mkdtemp's 0700."""
    from bad_input_cases import GOOD_EXAMPLE, export_args, main_of, subsets_args, write

    from mtdnn.commandline import run_cli

    old = os.umask(0o022)
    try:
        run_cli(main_of("train"), train_args(tmp_path, context))
        checkpoint = tmp_path / "run" / "best"
        run_cli(main_of("predict"), ["--checkpoint", str(checkpoint), "--task", "rte",
                                     "--input", str(write(tmp_path / "in.jsonl", GOOD_EXAMPLE)),
                                     "--output", str(tmp_path / "preds.jsonl"), "--no-progress"])
        run_cli(main_of("export"), export_args(tmp_path, context, tmp_path / "hf",
                                               checkpoint=checkpoint))
        run_cli(main_of("data_prep"), subsets_args(tmp_path, "--count", "2"))
    finally:
        os.umask(old)
    outputs = [checkpoint, *checkpoint.rglob("*"), tmp_path / "run" / "last",
               tmp_path / "preds.jsonl", tmp_path / "preds.jsonl.metrics.json",
               tmp_path / "hf", *(tmp_path / "hf").rglob("*"),
               *(tmp_path / "data" / "rte" / "subsets").rglob("*")]
    modes = {str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777) for p in outputs}
    expected = {name: oct(0o755 if (tmp_path / name).is_dir() else 0o644) for name in modes}
    assert modes == expected
    assert len(modes) > 20
