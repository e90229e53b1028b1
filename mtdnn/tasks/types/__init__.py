"""The task types, one module each, and the registry that names them (``type:`` in a task
definition). A new type is a module here with its ``TASK_TYPE``, and one line below."""

from __future__ import annotations

from mtdnn.tasks.task_type import TaskType
from mtdnn.tasks.types import (
    classification,
    ranking,
    regression,
    span_extraction,
    token_classification,
)

TASK_TYPES: dict[str, TaskType] = {
    module.TASK_TYPE.name: module.TASK_TYPE
    for module in (classification, regression, ranking, token_classification,
                   span_extraction)}
