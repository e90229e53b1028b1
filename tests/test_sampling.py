from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from mtdnn.config import SamplerConfig
from mtdnn.sampling import ProportionalSampler, TemperatureSampler, build_sampler

SIZES = {"big": 1000, "mid": 300, "small": 45}


def test_proportional_epoch_visits_every_batch_once() -> None:
    sampler = ProportionalSampler(SIZES, 32, np.random.default_rng(0))
    plan = sampler.plan_epoch()
    assert len(plan) == sampler.num_batches == 32 + 10 + 2
    assert Counter(ref.task for ref in plan) == {"big": 32, "mid": 10, "small": 2}
    for task, size in SIZES.items():
        seen = np.concatenate([ref.indices for ref in plan if ref.task == task])
        assert sorted(seen.tolist()) == list(range(size))
    assert all(len(ref.indices) <= 32 for ref in plan)


def test_proportional_reshuffles_every_epoch_and_is_seeded() -> None:
    a = ProportionalSampler(SIZES, 32, np.random.default_rng(7))
    b = ProportionalSampler(SIZES, 32, np.random.default_rng(7))
    first_a, first_b = a.plan_epoch(), b.plan_epoch()
    assert [r.task for r in first_a] == [r.task for r in first_b]
    assert all(np.array_equal(x.indices, y.indices) for x, y in zip(first_a, first_b,
                                                                  strict=True))
    second = a.plan_epoch()
    assert [r.task for r in second] != [r.task for r in first_a]  # task interleaving
    first_big = [r.indices.tolist() for r in first_a if r.task == "big"]
    second_big = [r.indices.tolist() for r in second if r.task == "big"]
    assert first_big != second_big  # batch contents within a task


@pytest.mark.parametrize("temperature", [1.0, 2.0, 5.0, 1e6])
def test_temperature_probabilities_follow_the_formula(temperature: float) -> None:
    sampler = TemperatureSampler(SIZES, 32, np.random.default_rng(0), temperature)
    counts = np.array(list(SIZES.values()), dtype=float)
    expected = counts ** (1 / temperature) / np.sum(counts ** (1 / temperature))
    np.testing.assert_allclose(sampler.probabilities, expected, rtol=1e-12)
    if temperature == 1.0:
        np.testing.assert_allclose(sampler.probabilities, counts / counts.sum())
    if temperature == 1e6:
        np.testing.assert_allclose(sampler.probabilities, [1 / 3] * 3, atol=1e-5)


def test_temperature_empirical_frequencies_match() -> None:
    draws = 20_000
    sampler = TemperatureSampler(SIZES, 8, np.random.default_rng(3), 2.0, steps_per_epoch=draws)
    plan = sampler.plan_epoch()
    assert len(plan) == draws
    frequency = Counter(ref.task for ref in plan)
    for task, p in zip(sampler.tasks, sampler.probabilities, strict=True):
        sigma = np.sqrt(draws * p * (1 - p))
        assert abs(frequency[task] - draws * p) < 4 * sigma, task


def test_temperature_sees_every_example_before_repeating() -> None:
    sampler = TemperatureSampler({"a": 50, "b": 50}, 10, np.random.default_rng(1), 1.0,
                                 steps_per_epoch=200)
    firsts = [ref.indices for ref in sampler.plan_epoch() if ref.task == "a"][:5]
    assert sorted(np.concatenate(firsts).tolist()) == list(range(50))


def test_build_sampler_from_config() -> None:
    sampler = build_sampler(SamplerConfig(kind="temperature", temperature=3.0), SIZES, 16, 0)
    assert isinstance(sampler, TemperatureSampler) and sampler.num_batches == 63 + 19 + 3
