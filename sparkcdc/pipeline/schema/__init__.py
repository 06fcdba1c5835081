"""How a source table's schema changes reach its targets: what changed between two schemas
(``diff``), the schema events that arrive inside a micro-batch of the stream
(``in_stream``), and what each ``schema.change.behavior`` makes of a change for a target
(``behavior``). The run applies them (``run/schema.py``); the sinks make the changes."""
