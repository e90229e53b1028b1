"""A run's randomness: seeded at the start, saved with each resumable checkpoint and
restored on resume, so that a resumed run draws what the uninterrupted one would have."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch; make CPU kernels deterministic."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


@contextlib.contextmanager
def seeded(seed: int, saved: dict[str, Any] | None = None,
           generators: tuple[np.random.Generator, ...] = ()) -> Iterator[None]:
    """Everything built inside draws from generators seeded with ``seed``; on leaving, a
    resumed run's ``saved`` state (:func:`rng_state`) is put back, so that it goes on
    drawing what the uninterrupted run would have."""
    seed_everything(seed)
    yield
    if saved:
        set_rng_state(saved, *generators)


def rng_state(*generators: np.random.Generator) -> dict[str, Any]:
    """Python's, numpy's and torch's (CPU and CUDA) random states, and those of the run's
    own ``generators`` (PCGrad's projection order)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "generators": [generator.bit_generator.state for generator in generators]}


def set_rng_state(state: dict[str, Any], *generators: np.random.Generator) -> None:
    """Put back what :func:`rng_state` saved (a checkpoint saved before the run's own
    generators were kept leaves them as seeded)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    for generator, saved in zip(generators, state.get("generators", []), strict=False):
        generator.bit_generator.state = saved
