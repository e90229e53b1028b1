"""The run's configuration: its typed schema, how a run config is resolved from YAML and
key=value overrides, what a resumed run may change, and the help rendered from it."""
