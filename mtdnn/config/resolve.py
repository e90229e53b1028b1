"""The one way in to a run config: a YAML file (or a packaged config by name) plus
``key=value`` overrides, resolved into a validated :class:`~mtdnn.config.train_config.TrainConfig`.

``resolve_config("mtdnn_glue", ["optimizer.lr=3e-5", "tasks=[rte,mrpc]"])`` parses the
YAML, applies each override (the value is parsed as YAML), applies a SMART preset once and
validates the whole; unknown keys and wrong types are errors that name the key."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from mtdnn.config.compatibility import with_current_names
from mtdnn.config.schema import build, load_yaml, to_dict
from mtdnn.config.smart_config import SMART_PRESETS, SmartConfig, check_smart
from mtdnn.config.train_config import TrainConfig
from mtdnn.errors import MtdnnError, did_you_mean

log = logging.getLogger(__name__)


def apply_override(data: dict[str, Any], override: str) -> None:
    """Set ``a.b.c=value`` in a nested dict; the value is parsed as YAML."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise MtdnnError(
            f"override {override!r} is not key=value",
            key=override,
            allowed="key=value, e.g. optimizer.lr=3e-5",
        )
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    parts = key.strip().split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise MtdnnError(f"'{part}' is not a mapping, cannot set '{key}'", key=key)
        node = child
    node[parts[-1]] = value


def _normalise(data: dict[str, Any], source: str | Path | None = None) -> dict[str, Any]:
    """Accept ``tasks: [rte, mrpc]`` as shorthand for ``tasks: {rte: {}, mrpc: {}}``."""
    tasks = data.get("tasks")
    if isinstance(tasks, str):
        raise MtdnnError(
            f"found the single name {tasks!r}, expected a list",
            file=source,
            key="tasks",
            allowed=f"a list, even of one task: tasks=[{tasks}] (on the command "
            f"line) or tasks: [{tasks}] (in YAML)",
        )
    if isinstance(tasks, (list, tuple)):
        data["tasks"] = {str(name): {} for name in tasks}
    elif isinstance(tasks, dict):
        data["tasks"] = {name: spec or {} for name, spec in tasks.items()}
    return data


PACKAGED_CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def packaged_configs() -> dict[str, Path]:
    """The run configs shipped with the package (``mtdnn/configs``), by name."""
    return {path.stem: path for path in sorted(PACKAGED_CONFIGS.glob("*.yaml"))}


def packaged_experiments() -> dict[str, Path]:
    """The experiment configs shipped with the package (the repository's ``experiments/``,
    installed as ``mtdnn.experiments``), by name."""
    import importlib.resources

    folder = Path(str(importlib.resources.files("mtdnn.experiments")))
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}


def first_sentence(text: str) -> str:
    """The first sentence of a YAML file's opening comment, however many lines it spans
    (the comment's text up to its first full stop, or all of its prose), so that
    ``--list-configs`` never cuts a description mid-sentence."""
    import re

    prose = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        words = line.lstrip("#").strip()
        if line.startswith("#  ") or not words:  # an indented command, not prose
            break
        prose.append(words)
    found = re.match(r"(.+?\.)(\s|$)", " ".join(prose))
    return found.group(1) if found else " ".join(prose)


def config_file(path: str | Path, kind: str = "run") -> Path:
    """A config file: ``path`` itself where it exists, else the packaged config of that
    name (a run config, ``demo_stage1``, or ``configs/demo_stage1.yaml`` as the clone used
    to hold it; an experiment, ``kind="experiment"``: ``demo`` or ``experiments/demo.yaml``).
    A name that is both a file here and a packaged config is an error naming both."""
    given = Path(path)
    packaged, folder = ((packaged_experiments(), "experiments") if kind == "experiment"
                        else (packaged_configs(), "configs"))
    local = [given.with_name(given.name + suffix) for suffix in (".yaml", ".yml")
             if not given.suffix and given.with_name(given.name + suffix).is_file()]
    if given.exists():
        return given
    name = given.stem if given.suffix in (".yaml", ".yml") else given.name
    if name in packaged and (given.parent == Path(".") or given.parent.name == folder):
        if local:
            raise MtdnnError(
                f"'{path}' names both the file {local[0]} here and the packaged {kind} "
                f"config {name} ({packaged[name]})", file=path, key="--config",
                allowed=f"--config {local[0]} for the file, or --config {packaged[name]} "
                        "for the packaged one")
        return packaged[name]
    if local:
        return local[0]
    command = "mtdnn-experiment" if kind == "experiment" else "mtdnn-train"
    raise MtdnnError(
        f"no such config file, and no packaged {kind} config of that name",
        file=path,
        allowed="a YAML file, or a packaged config: "
        + ", ".join(packaged)
        + f" ({command} --list-configs)",
    )


def load_mapping(
    path: str | Path | None, overrides: list[str] = (), packaged: bool = False
) -> dict[str, Any]:
    """A YAML file's top-level mapping (empty without a file) with ``key=value`` overrides
    laid over it; the experiment runners validate the result into their own dataclass.
    With ``packaged``, ``path`` may name a packaged run config (:func:`config_file`)."""
    if path is not None and packaged:
        path = config_file(path)
    data = load_yaml(path) if path is not None else None
    if data is not None and not isinstance(data, dict):
        raise MtdnnError(
            f"expected a mapping of config keys, found {type(data).__name__}",
            file=path,
            allowed="key: value lines at the top level",
        )
    data = data or {}
    for override in overrides:
        apply_override(data, override)
    return data


def warn_inert_preset(config: TrainConfig) -> TrainConfig:
    """A SMART preset named while SMART is off does nothing: say so."""
    if config.smart.preset is not None and not config.smart.enabled:
        log.warning(
            "smart.preset '%s' has no effect while smart.enabled is false (add "
            "smart.enabled=true to train with SMART)",
            config.smart.preset,
        )
    return config


def warn_settings_that_cannot_act(given: Any, smart: SmartConfig) -> None:
    """Say which of the user's SMART keys (``given``, as written) will not act as written in
    the resolved ``smart``: one that replaces its preset's value (explicit keys win over a
    preset, in either order), and any set away from its default while SMART is off."""
    if not isinstance(given, dict):
        return
    preset = SMART_PRESETS.get(smart.preset or "", {})
    for name in given:
        if name in preset and getattr(smart, name) != preset[name]:
            log.warning("smart.%s=%s replaces preset %s's %s=%s (a key given explicitly wins "
                        "over a preset, wherever and in whatever order it is given)", name,
                        getattr(smart, name), smart.preset, name, preset[name])
    default = SmartConfig()
    inert = [name for name in given if name not in ("enabled", "preset")
             and hasattr(default, name) and getattr(smart, name) != getattr(default, name)]
    if inert and not smart.enabled:
        log.warning("smart.%s has no effect while smart.enabled is false (add "
                    "smart.enabled=true to train with SMART)", ", smart.".join(inert))


def with_preset(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its SMART preset's keys filled in under the keys given next to it.
    Applied once, when the config is built, so that a preset switched by a later override
    replaces the earlier preset's keys instead of inheriting them."""
    smart = data.get("smart")
    if isinstance(smart, dict) and smart.get("preset") in SMART_PRESETS:
        return {**data, "smart": {**SMART_PRESETS[smart["preset"]], **smart}}
    return data


def resolve_config(
    source: TrainConfig | str | Path | dict[str, Any] | None = None,
    overrides: Iterable[str] = (),
    /,
    *,
    keys: dict[str, Any] | None = None,
    origin: str | None = None,
    tasks_later: bool = False,
) -> TrainConfig:
    """The one way in to a run config: the command line, ``mtdnn.train()``, the experiment
    runner and the probe all come through here.

    ``source`` is a :class:`TrainConfig`, a run config YAML (a path or a packaged config's
    name) or a mapping of keys. ``keys`` are laid over it as Python values (nested mappings
    merged; ``tasks`` replaces the source's tasks), then ``overrides`` as ``key=value``
    strings (the command line's form; ``tasks.<t>=null`` drops a task). Renamed values
    take their current names, a SMART preset is applied once, and everything is validated:
    a mistake of the file's own names the file (or ``origin``), one that only the
    overrides make names the command line. ``tasks_later``: training keys whose tasks
    come from elsewhere (an experiment's arm), checked without them.
    """
    path = None
    if source is None:  # resume=<run> alone continues the run from its saved config
        source = resumed_run_config(keys, overrides)
    if isinstance(source, TrainConfig):
        data = to_dict(source)
    elif isinstance(source, dict):
        data = copy.deepcopy(source)
    else:
        path = config_file(source) if source is not None else None
        data = load_mapping(path)
    named = origin or path
    # Old names in the source, renamed (and said) once, naming the source; the overrides'
    # are renamed when the whole is validated.
    data = with_current_names(data, named)
    if named is not None and (keys or overrides):
        # The source alone first, so that its mistakes name it ...
        _validated(copy.deepcopy(data), named, tasks_later=True)
    if keys:
        data = merged(data, {k: v for k, v in keys.items() if k != "tasks"})
        if "tasks" in keys:
            data["tasks"] = keys["tasks"]
    for override in overrides:
        # Normalise between overrides so that `tasks=[rte] tasks.rte.dev=x` works.
        known = list(_normalise(data).get("tasks") or {})
        apply_override(data, override)
        dropped_task(data, override, known)
    # ... and what is wrong only after the overrides names the command line.
    if overrides or (named is None and source is None and not keys):
        named = "command line"
    config = _validated(with_checkpoint_sources(data), named, tasks_later)
    warn_settings_that_cannot_act(data.get("smart"), config.smart)
    return warn_inert_preset(config)


def with_checkpoint_sources(data: dict[str, Any]) -> dict[str, Any]:
    """A stage-2 run (``init_checkpoint``) on a task of the checkpoint that names no data of
    its own reads the data the checkpoint's run declared for it (its train, dev and column
    mapping), as that run's config.yaml says: a task defined inline in stage 1 needs
    nothing but its name in stage 2."""
    init = data.get("init_checkpoint")
    saved_file = Path(init) / "config.yaml" if isinstance(init, str) else None
    tasks = _normalise(dict(data)).get("tasks")
    if saved_file is None or not saved_file.is_file() or not isinstance(tasks, dict):
        return data
    saved = (load_yaml(saved_file) or {}).get("tasks") or {}
    filled = {}
    for name, spec in tasks.items():
        declared = saved.get(name) if isinstance(saved, dict) else None
        own = {k for k in ("train", "dev") if (spec or {}).get(k)}
        if isinstance(declared, dict) and not own:
            spec = {**{k: declared[k] for k in ("train", "dev", "columns")
                       if declared.get(k)}, **(spec or {})}
        filled[name] = spec
    return {**data, "tasks": filled}


def resumed_run_config(keys: dict[str, Any] | None, overrides: Iterable[str]) -> Path | None:
    """The saved config of the run (or checkpoint) that ``resume`` names, when no config is
    given: what Hugging Face's ``resume_from_checkpoint`` needs nothing else for."""
    resume = (keys or {}).get("resume")
    for override in overrides:
        key, _, value = override.partition("=")
        if key.strip() == "resume" and value.strip():
            resume = value.strip()
    if not isinstance(resume, str):
        return None
    saved = Path(resume) / "config.yaml"
    return saved if saved.is_file() else None


def _validated(
    data: dict[str, Any], source: str | Path | None, tasks_later: bool = False
) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from plain data."""
    data = with_current_names(_normalise(dict(data), source), source)
    if tasks_later:
        data.setdefault("tasks", {})
    config = build(TrainConfig, with_preset(data), source=source)
    check_smart(config.smart, source)
    if config.pcgrad and config.optimizer.grad_accum_steps > 1:
        raise MtdnnError(
            "pcgrad projects each step's task gradients; it cannot be combined with "
            "gradient accumulation",
            file=source,
            key="pcgrad",
            allowed="pcgrad=false, or optimizer.grad_accum_steps=1",
        )
    if not config.tasks and not tasks_later:
        raise MtdnnError(
            "no tasks given",
            file=source,
            key="tasks",
            allowed="a list of task names, e.g. tasks=[rte,mrpc]",
        )
    return config


def dropped_task(data: dict[str, Any], override: str, known: list[str]) -> None:
    """``tasks.<name>=null`` on the command line takes the task out of the run; naming a
    task the run does not have (``known``: its tasks before the override) is an error, or
    a misspelt drop would leave the task in without a word."""
    key, _, value = override.partition("=")
    parts = key.strip().split(".")
    tasks = data.get("tasks")
    if (
        len(parts) == 2
        and parts[0] == "tasks"
        and value.strip() in ("null", "~", "")
        and isinstance(tasks, dict)
    ):
        if parts[1] not in known:
            raise MtdnnError(
                f"tasks.{parts[1]}=null drops a task the run does not have"
                f"{did_you_mean(parts[1], known)}", key=f"tasks.{parts[1]}",
                allowed="one of the run's tasks: " + (", ".join(known) or "none"))
        tasks.pop(parts[1], None)


def config_to_yaml(config: TrainConfig) -> str:
    """The resolved config as YAML (what the run folder records)."""
    return yaml.safe_dump(to_dict(config), sort_keys=False)


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` laid over it, nested mappings merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        both_maps = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both_maps else value
    return out
