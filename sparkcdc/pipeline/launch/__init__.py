"""Starting Spark for a pipeline: the session and its settings, a standalone cluster's
checks, the warm Python workers and the cache of classes they preload. Nothing here knows
a source or a sink."""
