"""What each task is: one frozen :class:`TaskDef` per task, loaded from ``task_defs/*.yaml``.

A task definition file maps task names to their definitions::

    rte:
      type: classification
      labels: [entailment, not_entailment]
      inputs: [sentence1, sentence2]
      metrics: [accuracy]      # default: accuracy (classification), pearson, spearman

Everything is validated at load; an error names the file, the task, the key and what is
allowed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mtdnn.config.schema import build, load_yaml
from mtdnn.errors import MtdnnError, did_you_mean
from mtdnn.files import unchanged_stamp
from mtdnn.tasks.task_type import TaskType
from mtdnn.tasks.types import TASK_TYPES

# Every metric some task type computes, in the order the types list them.
METRICS = tuple(dict.fromkeys(m for kind in TASK_TYPES.values() for m in kind.metrics))

# The shipped definitions, wherever the package is installed; "packaged" in a run
# config's task_defs names them.
PACKAGED = "packaged"
DEFAULT_TASK_DEFS_DIR = Path(str(importlib.resources.files("mtdnn.task_defs")))
TASK_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED_FIELDS = ("uid", "label", "group")


@dataclass(frozen=True)
class TaskSmartOverrides:
    """Per-task SMART settings; ``None`` means "use the run's global value"."""

    adv_weight: float | None = field(
        default=None,
        metadata={"help": "lambda_s for this task",
                  "check": (lambda v: v == 0 or 1 <= v <= 5, "0 (off) or 1 <= lambda_s <= 5")},
    )
    divergence: str | None = field(
        default=None, metadata={"help": "divergence l_s; default from the task type"}
    )


@dataclass(frozen=True)
class TaskDef:
    """One task: its type, labels, input fields, metrics, head dropout and SMART overrides."""

    name: str
    type: str  # a registered task type (mtdnn.tasks.types)
    inputs: tuple[str, ...]
    metrics: tuple[str, ...]
    labels: tuple[str, ...] = ()
    dropout: float = field(
        default=0.1, metadata={"check": (lambda v: 0.0 <= v < 1.0, "0 <= dropout < 1")}
    )
    smart: TaskSmartOverrides = TaskSmartOverrides()
    description: str = ""
    # settings only its type reads (e.g. a token-labelling task's label_all_subwords);
    # the type checks them at load
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def task_type(self) -> TaskType:
        return TASK_TYPES[self.type]

    @property
    def divergence(self) -> str:
        """The SMART divergence l_s: the override, else the task type's default."""
        return self.smart.divergence or self.task_type.default_divergence

    @property
    def num_outputs(self) -> int:
        """Width of the head's rows: one logit per label, one score for regression."""
        return self.task_type.width(self)

    def option(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)


def definition_fingerprint(task: TaskDef) -> str:
    """A digest of the definition as loaded: another label order, type or input field is
    another definition (a head trained on one does not answer for the other); the
    description is not part of it."""
    fields = {k: v for k, v in asdict(task).items() if k != "description"}
    return "sha256:" + hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _validate(task: TaskDef, source: Path) -> None:
    def fail(key: str, problem: str, allowed: str | None = None) -> None:
        raise MtdnnError(f"task '{task.name}': {problem}", file=source,
                         key=f"{task.name}.{key}", allowed=allowed)

    kind = task.task_type
    problem = kind.check_inputs(task.inputs)
    if problem:
        fail("inputs", *problem)
    if len(set(task.inputs)) != len(task.inputs) or any(not f.strip() for f in task.inputs):
        fail("inputs", f"input fields must be distinct non-empty names, found {list(task.inputs)}")
    for name in task.inputs:
        if name in RESERVED_FIELDS:
            fail("inputs", f"'{name}' is reserved",
                 f"any field name except {', '.join(RESERVED_FIELDS)}")
    if not task.metrics:
        fail("metrics", "no metrics given", ", ".join(kind.metrics))
    for metric in task.metrics:
        if metric not in METRICS:
            fail("metrics", f"unknown metric '{metric}'", ", ".join(METRICS))
        if metric not in kind.metrics:
            fail("metrics", f"metric '{metric}' does not fit a {task.type} task",
                 ", ".join(kind.metrics))
    problem = kind.labels.check(task.labels)
    if problem:
        fail("labels", *problem)
    problem = kind.check_definition(task)
    if problem:
        fail(*problem)
    for key, value in task.options.items():
        problem = kind.check_option(key, value)
        if problem:
            fail(f"options.{key}", *problem)
    if task.smart.divergence is not None and task.smart.divergence not in kind.divergences:
        fail("smart.divergence", f"divergence '{task.smart.divergence}' does not fit a "
             f"{task.type} task", ", ".join(kind.divergences))


def load_task_file(path: str | Path) -> dict[str, TaskDef]:
    """Load and validate every task defined in one YAML file.

    A grid's report resolves every run's config, each naming the same few files: a file is
    parsed once while it stays unchanged (same size and modification time)."""
    path = Path(path)
    try:
        stamp = unchanged_stamp(path)
    except OSError:
        return _parse_task_file(path)  # its error names the file
    return dict(_parsed_task_file(path, stamp))


@functools.lru_cache(maxsize=64)
def _parsed_task_file(path: Path, stamp: tuple[str, int, int]) -> dict[str, TaskDef]:
    # keyed by the path as given too: the definitions and their errors name it
    return _parse_task_file(path)


def _parse_task_file(path: Path) -> dict[str, TaskDef]:
    data = load_yaml(path)
    if not isinstance(data, dict) or not data:
        raise MtdnnError("expected a mapping of task names to task definitions", file=path)
    return {name: task_from_mapping(name, spec, path) for name, spec in data.items()}


def task_from_mapping(name: Any, spec: Any, source: str | Path | None,
                      prefix: str | None = None) -> TaskDef:
    """One validated task definition from its mapping (a file's entry, or one written
    inline in a run config under ``tasks.<name>.definition``)."""
    prefix = prefix or str(name)
    if not isinstance(name, str) or not TASK_NAME.match(name):
        raise MtdnnError(f"invalid task name {name!r}", file=source, key=str(name),
                         allowed="lower-case letters, digits and _, starting with a letter")
    if isinstance(spec, dict) and "name" in spec:
        raise MtdnnError(f"task '{name}': the task's name is its key", file=source,
                         key=f"{prefix}.name", allowed="remove the key")
    if not isinstance(spec, dict):
        raise MtdnnError(f"task '{name}': expected a mapping, found {type(spec).__name__}",
                         file=source, key=prefix)
    kind = TASK_TYPES.get(spec.get("type"))
    if "type" in spec and isinstance(spec["type"], str) and kind is None:
        raise MtdnnError(f"unknown value {spec['type']!r}"
                         f"{did_you_mean(spec['type'], list(TASK_TYPES))}", file=source,
                         key=f"{prefix}.type", allowed=", ".join(TASK_TYPES))
    if "metrics" not in spec and kind is not None:  # e.g. accuracy for classification
        spec = {**spec, "metrics": list(kind.default_metrics)}
    task = build(TaskDef, {"name": name, **spec}, source=source, prefix=prefix,
                 hidden=("name",))
    _validate(task, source)
    return task


def load_task_defs(paths: Iterable[str | Path] | str | Path = DEFAULT_TASK_DEFS_DIR
                   ) -> dict[str, TaskDef]:
    """Load task definitions from YAML files and/or folders of ``*.yaml`` files
    (``"packaged"``: the shipped ones).

    A task name defined twice (in one file or across files) is an error naming both files.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for path in (DEFAULT_TASK_DEFS_DIR if str(p) == PACKAGED else Path(p) for p in paths):
        if path.is_dir():
            files.extend(sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")))
        elif path.is_file():
            files.append(path)
        else:
            raise MtdnnError("no such task definition file or folder", file=path)
    tasks: dict[str, TaskDef] = {}
    origin: dict[str, Path] = {}
    for file in files:
        for name, task in load_task_file(file).items():
            if name in tasks:
                raise MtdnnError(f"task '{name}' is already defined in {origin[name]}",
                                 file=file, key=name, allowed="each task name once")
            tasks[name], origin[name] = task, file
    return tasks


# The task definitions a checkpoint's heads were built from, in the checkpoint's folder.
CHECKPOINT_TASK_DEFS = "task_defs.yaml"


class RunTasks(Protocol):
    """What :func:`select_tasks` reads of a run config (a
    :class:`mtdnn.config.train_config.TrainConfig`): its task definition files, its tasks
    (each with an optional inline ``definition``) and the checkpoint it starts from."""

    task_defs: tuple[str, ...]
    tasks: Mapping[str, Any]
    init_checkpoint: str | None


def select_tasks(config: RunTasks) -> dict[str, TaskDef]:
    """The task definitions of the run's tasks, in config order: from the task definition
    files, written inline (``tasks.<name>.definition``), or, for a task none of those
    defines, the definition a stage-2 run's ``init_checkpoint`` was trained with."""
    known = load_task_defs(config.task_defs)
    saved = Path(config.init_checkpoint or "") / CHECKPOINT_TASK_DEFS
    if config.init_checkpoint and saved.is_file():
        for name, task in load_task_file(saved).items():
            inline = name in config.tasks and config.tasks[name].definition is not None
            if not inline:
                known.setdefault(name, task)
    for name, spec in config.tasks.items():
        if spec.definition is None:
            continue
        if name in known:
            raise MtdnnError(
                f"task '{name}' is already defined in the task definitions",
                key=f"tasks.{name}.definition",
                allowed="a new task name for an inline definition",
            )
        known[name] = task_from_mapping(
            name, spec.definition, None, prefix=f"tasks.{name}.definition"
        )
    unknown = [name for name in config.tasks if name not in known]
    if unknown:
        raise MtdnnError(
            f"unknown task '{unknown[0]}'{did_you_mean(unknown[0], list(known))}",
            key="tasks",
            allowed=f"tasks defined in {', '.join(config.task_defs)}: {', '.join(known)}",
        )
    return {name: known[name] for name in config.tasks}
