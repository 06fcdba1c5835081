"""The ``kafka`` source: reading committed offset ranges of change-event topics, and the
runner that takes them through the pipeline's targets (its options are the definition's)."""
