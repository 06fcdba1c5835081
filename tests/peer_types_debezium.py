"""Debezium (stub while written)."""
FILES = ()
