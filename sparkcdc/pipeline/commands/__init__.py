"""The operator's commands beside ``run``: ``status``, ``verify``, ``validate``, the live
progress table, the Prometheus metrics and the console they print with. They read the
definition and the run's checkpoint; the run never imports them."""
