"""Configs and records of older versions read as this one reads them: renamed values under
their current names, and the teacher schedule a run had before its default changed."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

from mtdnn.config.smart_config import SMART_PRESETS

# The mean teacher's schedule before `scaled` became the default: a run with a teacher whose
# saved config or record does not name its schedule ran this one.
FORMER_TEACHER_SCHEDULE = "paper"

log = logging.getLogger(__name__)


def with_former_teacher(keys: dict[str, Any]) -> dict[str, Any]:
    """Keys saved before the teacher schedule had another default than the paper's (a
    run's config.yaml, a record's training keys), naming the schedule that run had wherever
    it had a teacher (SMART on, μ > 0 by its keys or their preset). Keys of a run without
    a teacher are left to take today's default: the schedule did nothing there."""
    smart = keys.get("smart")
    if not isinstance(smart, dict) or not smart.get("enabled") or "teacher_schedule" in smart:
        return keys
    preset = SMART_PRESETS.get(smart.get("preset"), {})
    if not smart.get("bregman_weight", preset.get("bregman_weight", 1.0)):
        return keys
    return {**keys, "smart": {**smart, "teacher_schedule": FORMER_TEACHER_SCHEDULE}}


# Values given new names: an old config, or a record of an old run, still reads as the new
# name (with a warning for a config a user writes).
RENAMED_VALUES = {("sampler", "kind"): {"smart": "stochastic_round_robin"}}


def with_current_names(
    data: dict[str, Any], source: str | Path | None = None, warn: bool = True
) -> dict[str, Any]:
    """``data`` with every renamed value under its current name."""
    data = copy.deepcopy(data)
    for (section, name), renamed in RENAMED_VALUES.items():
        part = data.get(section)
        old = part.get(name) if isinstance(part, dict) else None
        if isinstance(old, str) and old in renamed:
            part[name] = renamed[old]
            if warn:
                log.warning(
                    "%s%s.%s: %r is now called %r; the old name still works",
                    f"{source}: " if source else "",
                    section,
                    name,
                    old,
                    renamed[old],
                )
    return data
