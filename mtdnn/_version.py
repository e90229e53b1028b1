"""The package version (``setup.cfg`` reads it from here)."""

__version__ = "0.1.0"
