"""The shipped task definitions (``*.yaml`` here), installed with the package as data and
read with :mod:`importlib.resources`; see :mod:`mtdnn.tasks.task_def` for the format."""
