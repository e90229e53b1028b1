"""Config fields that carry their help and their check: one place that says what a key means
and what it allows, read by validation, ``--help`` and the README's table."""

from __future__ import annotations

from dataclasses import MISSING, field
from typing import Any


def key(
    default: Any = MISSING,
    help: str = "",
    metadata: dict | None = None,
    *,
    default_factory: Any = MISSING,
    cosmetic: bool = False,
    hf_trainer: bool = False,
    aliases: tuple[str, ...] = (),
) -> Any:
    """A config key: its default, what it means (``--help`` and the README's key table
    read it from here) and, in ``metadata``, its range check (:mod:`mtdnn.config.schema`).
    ``cosmetic``: it changes how a run looks or how often it saves, not what it learns (a
    finished run trained with another value stays valid in a grid); ``hf_trainer``: the
    Hugging Face Trainer backend reads it (any other key would be ignored there);
    ``aliases``: what the ecosystem calls it (``learning_rate``), offered in did-you-mean."""
    return field(
        default=default,
        default_factory=default_factory,
        metadata={**(metadata or {}), "help": help, "cosmetic": cosmetic,
                  "hf_trainer": hf_trainer or cosmetic, "aliases": aliases},
    )


def _positive(name: str) -> dict:
    return {"check": (lambda v: v > 0, f"{name} > 0")}


def _ratio() -> dict:
    return {"check": (lambda v: 0.0 <= v < 1.0, "0 <= value < 1")}
