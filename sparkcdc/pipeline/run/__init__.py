"""The run: a pipeline read by one Spark stream, made of parts that call one way
(``loop.Runner`` builds and wires them; docs/design.md, "The run")."""
