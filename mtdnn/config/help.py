"""Every run config key with its type, default and meaning, read from the config's
dataclass fields (each key's ``help``): the source of ``mtdnn-train --help`` and of the
README's key table (a test holds the README equal to it)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from mtdnn.config.schema import _type_name, to_dict


def config_keys() -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) of every run config key, nested keys dotted."""
    from mtdnn.config.train_config import TaskData, TrainConfig

    rows: list[tuple[str, str, str, str]] = []

    def walk(cls: Any, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            tp, key = hints[item.name], prefix + item.name
            if dataclasses.is_dataclass(tp):
                walk(tp, key + ".")
                continue
            if item.default is not dataclasses.MISSING:
                default = to_dict(item.default)
            elif item.default_factory is not dataclasses.MISSING:
                default = to_dict(item.default_factory())
            else:
                default = "required"
            kind = "a list of task names, or a mapping" if key == "tasks" else _type_name(tp)
            rows.append((key, kind, yaml_text(default), item.metadata.get("help", "")))
            if key == "tasks":
                walk(TaskData, "tasks.<task>.")

    walk(TrainConfig, "")
    return rows


def yaml_text(value: Any) -> str:
    """A default as it would be written in a config file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    return str(value)


def help_epilog() -> str:
    """The keys as ``--help`` lists them."""
    width = max(len(key) for key, *_ in config_keys())
    lines = ["config keys (key=value; nested keys dotted):"]
    for key, kind, default, meaning in config_keys():
        lines.append(f"  {key:<{width}}  {meaning}")
        lines.append(f"  {'':<{width}}    {kind}; default {default}")
    return "\n".join(lines)


def markdown_table() -> str:
    """The keys as the README's table."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, meaning in config_keys():
        # a "|" inside a cell (the choices of a key) would end the cell
        cells = [f"`{key}`", kind, f"`{default}`", meaning]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
