"""A run on disk: its folder, the checkpoint format, its loop state, randomness, provenance
and the trackers it logs to."""
