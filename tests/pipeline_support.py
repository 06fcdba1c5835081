"""Helpers shared by the pipeline tests (``sparkcdc.pipeline`` over the sandbox MariaDB)."""

from __future__ import annotations

import random


def source_yaml(sb, tables: str, server_ids: int) -> str:
    """A pipeline's ``source:`` block capturing ``tables`` from the sandbox ``sb`` as its CDC
    user (the password from ``${TEST_PW}``), over ``server_ids`` random server ids."""
    o = sb.source_options()
    base = random.randint(100_000, 3_000_000_000)
    return f"""source:
  type: mysql
  hostname: {o['hostname']}
  port: {o['port']}
  username: {o['username']}
  password: ${{TEST_PW}}
  tables: {tables}
  server-id: {base}-{base + server_ids - 1}
"""
