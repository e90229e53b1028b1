"""torchrun with 2 CPU processes (gloo) equals one process on the same global batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from conftest import REPO, head_jsonl
from mtdnn.training.distributed import Distributed
from mtdnn.training.trainer import rank_share


def test_shards_cover_the_batch_with_weights_summing_to_one() -> None:
    for rows in (1, 2, 7, 32):
        shards = [rank_share(rows, rank, 2) for rank in range(2)]
        assert sum(weight for _, weight in shards) == 1.0
        covered = [i for piece, weight in shards if weight for i in range(rows)[piece]]
        assert covered == list(range(rows))


def test_main_first_runs_the_block_on_rank_0_before_the_others(monkeypatch) -> None:
    events = []
    monkeypatch.setattr(Distributed, "barrier", lambda self: events.append((self.rank, "wait")))
    for rank in (0, 1):
        with Distributed(rank, 2).main_first():
            events.append((rank, "fill the cache"))
    # rank 0 fills the cache, then meets rank 1 at the barrier; rank 1 reads only after it
    assert events == [(0, "fill the cache"), (0, "wait"), (1, "wait"), (1, "fill the cache")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("smart", ["true", "false"],
                         ids=["SMART: gradients summed by hand", "plain: DDP"])
def test_two_processes_match_one(prepared_data: Path, tiny_encoder_dir: Path,
                                 tmp_path: Path, smart: str) -> None:
    task_defs = tmp_path / "tasks.yaml"
    task_defs.write_text("rte:\n  type: classification\n  labels: [entailment, not_entailment]\n"
                         "  inputs: [sentence1, sentence2]\n  metrics: [accuracy]\n"
                         "  dropout: 0.0\n")
    train_file = head_jsonl(prepared_data / "rte/train.jsonl", tmp_path / "train.jsonl", 31)
    dev_file = head_jsonl(prepared_data / "rte/dev.jsonl", tmp_path / "dev.jsonl", 8)
    # Dropout off: dropout masks are per process, so only then are the two runs the same
    # function. Batch 7 of 31 rows gives uneven shards (4 + 3) and a last batch of 3.
    common = ["tasks=[rte]", f"task_defs=[{task_defs}]", f"tasks.rte.train={train_file}",
              f"tasks.rte.dev={dev_file}", f"encoder={tiny_encoder_dir}", "encoder_dropout=0",
              "batch_size=7", "max_steps=9", "log_every_steps=1", "progress_bar=false",
              "max_seq_len=48", f"smart.enabled={smart}", f"cache_dir={tmp_path / 'cache'}",
              "optimizer.lr=1e-3", "precision=fp32"]  # bf16 rounds each rank's partial sums
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "train.py", *common, f"output_dir={tmp_path / 'one'}"],
                         cwd=REPO, env=env, capture_output=True, text=True)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                          "train.py", *common, f"output_dir={tmp_path / 'two'}"],
                         cwd=REPO, env=env, capture_output=True, text=True)
    assert two.returncode == 0, two.stderr[-2000:]

    def losses(run: str) -> list[float]:
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [e["loss"] for e in map(json.loads, lines) if e["kind"] == "train"]

    assert len(losses("one")) == 9
    np.testing.assert_allclose(losses("two"), losses("one"), atol=1e-5)
    assert losses("one")[0] != losses("one")[-1]  # it did learn something
    names = ["encoder/model.safetensors", "heads.safetensors"]
    for name in names + (["teacher.safetensors"] if smart == "true" else []):
        a = load_file(tmp_path / "one" / "last" / name)
        b = load_file(tmp_path / "two" / "last" / name)
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5, name
