"""Every published experiment's tables regenerate byte for byte from its committed records:
``--report-only`` into a fresh folder, compared with ``results/<experiment>/``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

PUBLISHED = sorted(path.stem for path in (REPO / "experiments").glob("*.yaml")
                   if "publish_dir:" in path.read_text())
TABLES = ("results.md", "results.csv")


@pytest.fixture(scope="module")
def work(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder laid out as the repository is for the experiments' relative paths, with
    the data of `make splits` (the tuning splits, subsets and ChaosNLI files)."""
    root = tmp_path_factory.mktemp("published")
    (root / "shared").symlink_to(shared_data.parent)
    work = root / "work"
    work.mkdir()
    for name in ("experiments", "results"):
        (work / name).symlink_to(REPO / name)
    made = subprocess.run(["make", "-s", "-C", str(REPO), "splits", f"PY={sys.executable}",
                           f"DATA={work / 'data'}", f"RAW_DATA={shared_data}"],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-3000:]
    return work


def regenerate(work: Path, experiment: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mtdnn.experiment", "--config", f"experiments/{experiment}.yaml",
         "--report-only", f"output_dir={out}", f"stage_dir={out / 'stages'}"],
        cwd=work, capture_output=True, text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})


@pytest.mark.slow
@pytest.mark.parametrize("experiment", PUBLISHED)
def test_published_tables_regenerate_byte_for_byte(work: Path, tmp_path: Path,
                                                   experiment: str) -> None:
    ran = regenerate(work, experiment, tmp_path / experiment)
    assert ran.returncode == 0, ran.stderr[-3000:]
    for name in TABLES:
        published = (REPO / "results" / experiment / name).read_bytes()
        assert (tmp_path / experiment / name).read_bytes() == published, (experiment, name)
    assert "with inputs not fingerprinted" in ran.stdout


def test_every_published_experiment_is_checked() -> None:
    published = {path.name for path in (REPO / "results").iterdir()
                 if (path / "results.md").is_file()}
    assert published == set(PUBLISHED)
