from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mtdnn.config.train_config import SamplerConfig
from mtdnn.data.sampling import (
    AnnealedSampler,
    CycleRoundRobin,
    ProportionalSampler,
    ShuffleRoundRobin,
    StochasticRoundRobin,
    TemperatureSampler,
    build_sampler,
)

SIZES = {"big": 1000, "mid": 300, "small": 45}


def test_proportional_epoch_visits_every_batch_once() -> None:
    sampler = ProportionalSampler(SIZES, 32, np.random.default_rng(0))
    plan = [step[0] for step in sampler.plan_epoch()]
    assert len(plan) == sampler.num_steps == 32 + 10 + 2
    assert Counter(ref.task for ref in plan) == {"big": 32, "mid": 10, "small": 2}
    for task, size in SIZES.items():
        seen = np.concatenate([ref.indices for ref in plan if ref.task == task])
        assert sorted(seen.tolist()) == list(range(size))
    assert all(len(ref.indices) <= 32 for ref in plan)


def test_proportional_reshuffles_every_epoch_and_is_seeded() -> None:
    a = ProportionalSampler(SIZES, 32, np.random.default_rng(7))
    b = ProportionalSampler(SIZES, 32, np.random.default_rng(7))
    first_a, first_b = ([s[0] for s in x.plan_epoch()] for x in (a, b))
    assert [r.task for r in first_a] == [r.task for r in first_b]
    assert all(np.array_equal(x.indices, y.indices) for x, y in zip(first_a, first_b,
                                                                  strict=True))
    second = [s[0] for s in a.plan_epoch()]
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
    frequency = Counter(step[0].task for step in plan)
    for task, p in zip(sampler.tasks, sampler.probabilities, strict=True):
        sigma = np.sqrt(draws * p * (1 - p))
        assert abs(frequency[task] - draws * p) < 4 * sigma, task


def test_temperature_sees_every_example_before_repeating() -> None:
    sampler = TemperatureSampler({"a": 50, "b": 50}, 10, np.random.default_rng(1), 1.0,
                                 steps_per_epoch=200)
    firsts = [s[0].indices for s in sampler.plan_epoch() if s[0].task == "a"][:5]
    assert sorted(np.concatenate(firsts).tolist()) == list(range(50))


def test_build_sampler_from_config() -> None:
    sampler = build_sampler(SamplerConfig(kind="temperature", temperature=3.0), SIZES, 16, 0)
    assert isinstance(sampler, TemperatureSampler) and sampler.num_steps == 63 + 19 + 3


def frequencies(plan: list) -> Counter:
    return Counter(ref.task for step in plan for ref in step)


def test_uniform_is_equal_probabilities() -> None:
    sampler = build_sampler(SamplerConfig(kind="uniform", steps_per_epoch=30_000), SIZES, 8, 0)
    np.testing.assert_allclose(sampler.probabilities, [1 / 3] * 3)
    frequency = frequencies(sampler.plan_epoch())
    sigma = np.sqrt(30_000 * (1 / 3) * (2 / 3))
    assert all(abs(frequency[t] - 10_000) < 4 * sigma for t in SIZES)


def test_annealed_moves_from_proportional_to_uniform() -> None:
    sampler = AnnealedSampler(SIZES, 8, np.random.default_rng(0), epochs=3,
                              steps_per_epoch=30_000)
    counts = np.array(list(SIZES.values()), dtype=float)
    for epoch, alpha in enumerate([1.0, 0.5, 0.0]):
        frequency = frequencies(sampler.plan_epoch())
        expected = counts ** alpha / np.sum(counts ** alpha)
        np.testing.assert_allclose(sampler.probabilities, expected, err_msg=f"epoch {epoch}")
        for task, p in zip(SIZES, expected, strict=True):
            assert abs(frequency[task] - 30_000 * p) < 4 * np.sqrt(30_000 * p * (1 - p))


def test_cycle_round_robin_holds_every_task_in_every_step() -> None:
    sampler = CycleRoundRobin(SIZES, 32, np.random.default_rng(0))
    plan = sampler.plan_epoch()
    assert len(plan) == sampler.num_steps == 32  # the largest task's batches
    assert all([ref.task for ref in step] == list(SIZES) for step in plan)
    small = np.concatenate([step[2].indices for step in plan])  # 45 examples cycled
    assert set(small.tolist()) == set(range(45)) and len(small) > 45


def test_shuffle_round_robin_uniform_single_task_steps() -> None:
    sampler = ShuffleRoundRobin(SIZES, 1, np.random.default_rng(0))
    plan = sampler.plan_epoch()
    assert len(plan) == 1000 and all(len(step) == 1 for step in plan)
    frequency = frequencies(plan)
    sigma = np.sqrt(1000 * (1 / 3) * (2 / 3))
    assert all(abs(frequency[t] - 1000 / 3) < 4 * sigma for t in SIZES)


@pytest.mark.parametrize("seed", range(5))
def test_stochastic_round_robin_sees_every_batch_exactly_once(seed: int) -> None:
    sampler = StochasticRoundRobin(SIZES, 32, np.random.default_rng(seed))
    for _ in range(2):  # two epochs
        plan = sampler.plan_epoch()
        assert len(plan) == 32
        assert all(step and step[0].task == "big" for step in plan)  # the largest: always
        for task, size in SIZES.items():
            seen = np.concatenate([r.indices for step in plan for r in step if r.task == task])
            assert sorted(seen.tolist()) == list(range(size)), task


def test_stochastic_round_robin_inclusion_probability() -> None:
    # Away from the forced end, a task with n batches joins a step with probability n / M.
    sampler = StochasticRoundRobin({"big": 100, "small": 25}, 1, np.random.default_rng(0))
    joined = []
    for _ in range(400):
        plan = sampler.plan_epoch()
        joined.append(sum(any(r.task == "small" for r in step) for step in plan[:50]))
    rate = np.mean(joined) / 50
    assert abs(rate - 0.25) < 0.01


@pytest.mark.parametrize("kind", ["proportional", "stochastic_round_robin", "temperature"])
def test_group_by_length_pads_less_and_stays_random(kind: str) -> None:
    rng = np.random.default_rng(0)
    sizes = {"a": 3000, "b": 500}
    lengths = {t: rng.integers(5, 128, n) for t, n in sizes.items()}

    def padding(group: bool, seed: int) -> tuple[float, list]:
        config = SamplerConfig(kind=kind, group_by_length=group)
        plan = build_sampler(config, sizes, 32, seed, lengths=lengths).plan_epoch()
        refs = [r for step in plan for r in step]
        waste = sum(len(r.indices) * lengths[r.task][r.indices].max()
                    - lengths[r.task][r.indices].sum() for r in refs)
        return waste, refs

    random_waste, _ = padding(False, 1)
    grouped_waste, refs = padding(True, 1)
    assert grouped_waste < 0.1 * random_waste
    if kind != "temperature":  # an epoch still visits every example once
        for task, n in sizes.items():
            seen = np.concatenate([r.indices for r in refs if r.task == task])
            assert sorted(seen.tolist()) == list(range(n))
    _, other = padding(True, 2)
    assert [r.indices.tolist() for r in refs[:5]] != [r.indices.tolist() for r in other[:5]]


def test_group_by_length_keeps_small_tasks_random() -> None:
    """A small task is not sorted whole (that would repeat the same batches every epoch):
    chunks hold size // (4 × batch) batches, as HF's LengthGroupedSampler."""
    lengths = {"small": np.arange(240)}
    sampler = build_sampler(SamplerConfig(group_by_length=True), {"small": 240}, 16, 0,
                            lengths=lengths)
    epochs = [{tuple(sorted(r.indices.tolist())) for step in sampler.plan_epoch() for r in step}
              for _ in range(2)]
    assert epochs[0] != epochs[1]
    # 240 // 64 = 3 batches per chunk: each chunk of 48 is sorted, so a batch spans a
    # narrower length range than a random batch but is not one of the 15 fixed slices.
    spans = [max(b) - min(b) for b in epochs[0]]
    assert np.mean(spans) < 0.5 * 240
    assert epochs[0] != {tuple(range(i, i + 16)) for i in range(0, 240, 16)}


def test_the_former_name_smart_still_reads_with_a_warning(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """``sampler.kind: smart`` (before the rename that keeps it apart from SMART the
    regulariser) loads as ``stochastic_round_robin``, and a record that says ``smart``
    compares equal to a config that says the new name."""
    from mtdnn.config.resolve import resolve_config
    from mtdnn.experiment.config import without_cosmetic

    with caplog.at_level("WARNING"):
        config = resolve_config(None, ["tasks=[rte]", "sampler.kind=smart"])
    assert config.sampler.kind == "stochastic_round_robin"
    assert "'smart' is now called 'stochastic_round_robin'" in caplog.text
    caplog.clear()
    old_file = tmp_path / "old.yaml"
    old_file.write_text("tasks: [rte]\nsampler: {kind: smart}\n")
    with caplog.at_level("WARNING"):
        assert resolve_config(old_file, ["epochs=2"]).sampler.kind == "stochastic_round_robin"
    assert caplog.text.count("is now called") == 1 and str(old_file) in caplog.text
    old = {"sampler": {"kind": "smart", "group_by_length": True}, "epochs": 3}
    new = {"sampler": {"kind": "stochastic_round_robin", "group_by_length": True}, "epochs": 3}
    assert without_cosmetic(old) == without_cosmetic(new)
    assert without_cosmetic({"sampler": {"kind": "cycle"}}) != without_cosmetic(new)
