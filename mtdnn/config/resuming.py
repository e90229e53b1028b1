"""What a resumed run may change: the keys that must equal the saved run's, and those that
may grow to extend it."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from mtdnn.config.compatibility import with_former_teacher
from mtdnn.config.resolve import resolve_config
from mtdnn.config.schema import to_dict
from mtdnn.config.train_config import TrainConfig
from mtdnn.errors import MtdnnError

# Keys that may grow when a run is resumed: the run is extended, and its schedule is the
# longer run's from there on (as Hugging Face Trainer does).
EXTENDABLE = ("max_steps", "epochs", "min_steps")


# Keys that say how a run is started or shown, not how it trains: a resume may change them
# (a grid replaces a run folder it made itself with ``overwrite``).
MAY_DIFFER_ON_RESUME = ("resume", "overwrite", "progress_bar")


def check_resumable(saved_yaml: str, config: TrainConfig, source: Path) -> None:
    """Resuming with other settings would not continue the same run: name what differs
    from the run's saved config (``source``)."""
    data = yaml.safe_load(saved_yaml)
    if data.get("precision") == "auto":  # written before runs recorded the resolved one,
        data["precision"] = "fp32"       # when auto meant fp32 on a CPU
    saved = as_current(data, source)
    differing = sorted(f.name for f in fields(TrainConfig) if f.name not in MAY_DIFFER_ON_RESUME
                       and getattr(saved, f.name) != getattr(config, f.name)
                       and not extends(saved, config, f.name))
    if differing:
        key = differing[0]
        raise MtdnnError(f"the run to resume has {key}={to_dict(getattr(saved, key))!r}, "
                         f"this one {to_dict(getattr(config, key))!r}", file=source, key=key,
                         allowed="the same config as the run being resumed (only resume, "
                                 "overwrite and progress_bar may change, and max_steps, "
                                 "epochs or min_steps may grow to extend it)")


def as_current(saved: dict[str, Any], source: Path) -> TrainConfig:
    """A run config saved by an older version, read as this version reads it: keys added
    since take their defaults (each keeps the former behaviour: no label smoothing, loss
    weight 1, ...), renamed values their new names. So a run started before a key existed
    resumes under a version that has it; a key whose default changed since keeps the value
    the run had."""
    return resolve_config(with_former_teacher(saved), origin=source)


def extends(saved: TrainConfig, current: TrainConfig, key: str) -> bool:
    """Whether ``current`` lengthens the saved run in ``key``."""
    old, new = getattr(saved, key), getattr(current, key)
    return key in EXTENDABLE and isinstance(new, int) and (old is None or new >= old)
