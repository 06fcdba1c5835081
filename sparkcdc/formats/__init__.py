"""Change-event formats for message buses: encoders that give ``key`` and ``value`` columns
ready for Spark's Kafka sink, and decoders that turn ``value`` back into change rows.

    from sparkcdc import formats
    events = formats.encode(changes, "debezium-json", keys=["id"])
    events.writeStream.format("kafka").option("topic", "shop.orders")...
    rows = formats.decode(kafka_df, "debezium-json", schema="id int, name string")

Formats: ``debezium-json``, ``changelog-json`` (Flink), ``canal-json``. See docs/sinks.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from sparkcdc.errors import ConfigError

FORMATS = ("debezium-json", "changelog-json", "canal-json")


def _module(name: str):
    if name not in FORMATS:
        close = difflib.get_close_matches(str(name), FORMATS, n=1, cutoff=0.4)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(f"unknown change-event format {name!r}",
                          fix=f"{hint}formats: {', '.join(FORMATS)}")
    from sparkcdc.formats import canal, changelog, debezium

    return {"debezium-json": debezium, "changelog-json": changelog, "canal-json": canal}[name]


def encode(df, format: str, keys: Sequence[str] | str | None = None, **kw):
    """Change rows (the source's shape) -> a DataFrame of ``key`` and ``value`` JSON text.
    ``keys`` (the row key) become the message key; changelog-json may go without."""
    mod = _module(format)
    if keys is None:
        if format != "changelog-json":
            raise ConfigError(f"the {format} format needs keys",
                              fix="pass keys=['id'] (the table's primary key)")
        return mod.encode(df, None, **kw)
    keys = [keys] if isinstance(keys, str) else list(keys)
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise ConfigError(f"key columns {missing} are not in the change rows",
                          fix=f"the change rows have: {', '.join(df.columns)}")
    return mod.encode(df, keys, **kw)


def decode(df, format: str, schema):
    """``value`` (string or binary, e.g. from Spark's Kafka source) -> change rows with the
    data columns of ``schema`` (StructType or DDL), then ``_change_type``, ``_database``,
    ``_table``, ``_op_ts``, ``_seq``, then the input's other columns (``key``/``value``
    dropped)."""
    if "value" not in df.columns:
        raise ConfigError("decode needs a 'value' column",
                          fix="pass the Kafka source's DataFrame, or rename the JSON column")
    return _module(format).decode(df, schema)


__all__ = ["FORMATS", "decode", "encode"]
