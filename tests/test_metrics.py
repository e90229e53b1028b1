from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mtdnn.tasks.metrics import accuracy, compute_metrics, f1, mcc


def test_binary_metrics_by_hand() -> None:
    predictions = np.array([1, 1, 0, 0, 1, 0])
    labels = np.array([1, 0, 0, 1, 1, 0])
    # tp=2 fp=1 fn=1 tn=2
    assert accuracy(predictions, labels) == pytest.approx(4 / 6)
    assert f1(predictions, labels) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert mcc(predictions, labels) == pytest.approx((2 * 2 - 1 * 1) / math.sqrt(3 * 3 * 3 * 3))


def test_mcc_edge_cases() -> None:
    labels = np.array([0, 1, 2, 1, 0])
    assert mcc(labels, labels) == pytest.approx(1.0)
    assert mcc(np.zeros(5, dtype=int), labels) == 0.0  # constant prediction: undefined → 0


def test_correlations_match_scipy() -> None:
    rng = np.random.default_rng(0)
    labels = rng.uniform(0, 5, 50)
    predictions = labels + rng.normal(0, 1, 50)
    result = compute_metrics(("pearson", "spearman"), predictions, labels)
    assert result["pearson"] == pytest.approx(stats.pearsonr(predictions, labels)[0])
    assert result["spearman"] == pytest.approx(stats.spearmanr(predictions, labels)[0])
    assert compute_metrics(("pearson",), np.ones(5), labels[:5])["pearson"] == 0.0


def test_a_run_starts_without_importing_scipy_stats() -> None:
    """The recipe's modules load scipy.stats only when a correlation is computed."""
    import subprocess
    import sys

    loaded = subprocess.run([sys.executable, "-c", "import sys, mtdnn.training.trainer; "
                             "print('scipy.stats' in sys.modules)"],
                            capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"
