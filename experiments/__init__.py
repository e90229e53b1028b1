"""The experiment configs shipped with mtdnn (``mtdnn-experiment --list-configs``), read as
files by :func:`mtdnn.config.resolve.packaged_experiments`."""
