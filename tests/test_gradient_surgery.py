from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mtdnn.config.resolve import resolve_config
from mtdnn.modeling.gradient_surgery import conflict_rates, pcgrad
from mtdnn.training.trainer import train


def test_conflicting_gradients_end_non_negative() -> None:
    g1, g2 = torch.tensor([1.0, 1.0]), torch.tensor([-1.0, 0.5])
    assert torch.dot(g1, g2) < 0
    rng = np.random.default_rng(0)
    # Each projected gradient is orthogonal to the other task's gradient.
    g1_projected = g1 - torch.dot(g1, g2) / g2.pow(2).sum() * g2
    g2_projected = g2 - torch.dot(g2, g1) / g1.pow(2).sum() * g1
    assert torch.dot(g1_projected, g2) == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(pcgrad([g1, g2], rng), g1_projected + g2_projected)
    assert torch.dot(pcgrad([g1, g2], rng), g1) >= 0 and torch.dot(pcgrad([g1, g2], rng), g2) >= 0
    assert conflict_rates([g1, g2]) == [1.0, 1.0]


def test_conflict_rates_count_each_tasks_conflicting_partners() -> None:
    # task 0 conflicts with task 1 only; task 2 agrees with both
    grads = [torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 2.0]), torch.tensor([0.1, 1.0])]
    assert conflict_rates(grads) == [0.5, 0.5, 0.0]


def test_non_conflicting_gradients_untouched() -> None:
    g1, g2 = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([0.5, 0.0, 3.0])
    torch.testing.assert_close(pcgrad([g1, g2], np.random.default_rng(0)), g1 + g2)


def test_three_tasks_random_order_is_seeded() -> None:
    """The same seed, the same projection order; other seeds, other orders (so a PCGrad that
    ignored its generator would fail here)."""
    generator = torch.Generator().manual_seed(0)
    grads = [torch.randn(50, generator=generator) for _ in range(3)]
    grads[1] = -grads[0] + 0.1 * grads[1]  # conflicting: the order of projections matters
    a = pcgrad(grads, np.random.default_rng(1))
    b = pcgrad(grads, np.random.default_rng(1))
    torch.testing.assert_close(a, b)
    results = {tuple(pcgrad(grads, np.random.default_rng(seed)).round(decimals=5).tolist())
               for seed in range(12)}
    assert len(results) > 1


def test_smart_round_robin_with_pcgrad_and_smart_trains(prepared_data: Path,
                                                        tiny_encoder_dir: Path,
                                                        tmp_path: Path) -> None:
    from conftest import head_jsonl

    overrides = ["tasks=[rte,mrpc]", f"encoder={tiny_encoder_dir}", "batch_size=8",
                 "max_steps=4", "log_every_steps=1", "progress_bar=false", "max_seq_len=32",
                 "sampler.kind=stochastic_round_robin", "pcgrad=true", "smart.enabled=true",
                 f"cache_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'run'}"]
    for task, rows in (("rte", 40), ("mrpc", 16)):
        train_file = head_jsonl(prepared_data / task / "train.jsonl", tmp_path / f"{task}.jsonl",
                                rows)
        dev_file = head_jsonl(prepared_data / task / "dev.jsonl", tmp_path / f"{task}_d.jsonl", 8)
        overrides += [f"tasks.{task}.train={train_file}", f"tasks.{task}.dev={dev_file}"]
    summary = train(resolve_config(None, overrides))
    assert summary["steps"] == 4
    assert set(summary["last"]["metrics"]) == {"rte", "mrpc"}
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    rates = [e["pcgrad_conflicts"] for e in logged if "pcgrad_conflicts" in e]
    assert rates and all(0.0 <= r <= 1.0 for r in rates)
