"""The run's schema handling, at the bottom of the run: how a source table's schema changes
reach its targets. ``diff`` says what changed between two schemas, ``in_stream`` conforms
rows to a target's schema and finds the rows around a schema event inside a micro-batch,
``behavior`` says what each ``schema.change.behavior`` makes of a change for a target. The
parts above use them: ``schema_events.SchemaInStream`` applies a batch's events in binlog
order, ``shapes`` and the task writers conform rows; the sinks make the changes."""
