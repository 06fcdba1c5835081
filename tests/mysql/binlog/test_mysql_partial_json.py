"""Partial JSON updates (``binlog_row_value_options=PARTIAL_JSON``) read from a real MySQL
9.7 (issue 33): random JSON_SET, JSON_REPLACE and JSON_REMOVE on nested paths give the
server's own documents through every twin (the diffs applied in C, by ``json_diff`` over
the compiled decoder's trees, by the Python decoder), and PARTIAL_UPDATE_ROWS events with
and without diffs are decoded whole by the compiled decoder."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest
from mysql_binlog_support import binlog_events, cdc, changes, fresh_db, reader

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.binlog import fastdecode, json_diff, rows_events
from sparkcdc.mysql.binlog.reader import BinlogReader
from sparkcdc.mysql.binlog.row_decoding import PyRowDecoder
from sparkcdc.mysql.binlog.server_lookups import load_table_schema
from sparkcdc.mysql.offsets import current_offset

pytestmark = pytest.mark.timeout(300)


def _paths(doc, prefix="$"):
    """Every path of ``doc`` below the root, MySQL's spelling."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            p = f'{prefix}."{k}"' if not k.isidentifier() else f"{prefix}.{k}"
            yield p, v
            yield from _paths(v, p)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            p = f"{prefix}[{i}]"
            yield p, v
            yield from _paths(v, p)


def _value(rng: random.Random) -> str:
    """A JSON value as SQL."""
    kind = rng.randrange(9)
    if kind == 0:
        return str(rng.randint(-10**12, 10**12))
    if kind == 1:
        return repr(rng.uniform(-1e6, 1e6)) + "e0"  # a double
    if kind == 2:
        return f"CAST({rng.randint(-99999, 99999)}.{rng.randint(0, 9999):04d} AS DECIMAL(12,4))"
    if kind == 3:
        return "'" + rng.choice(["x", "é😀", "tab\\there", "q\"uote"]) * rng.randint(1, 40) + "'"
    if kind == 4:
        return rng.choice(["TRUE", "FALSE", "CAST('null' AS JSON)"])
    if kind == 5:
        return f"JSON_OBJECT('k{rng.randint(0, 9)}', {rng.randint(0, 99)}, 'z', 'zz')"
    if kind == 6:
        return f"JSON_ARRAY({rng.randint(0, 9)}, 'a', JSON_OBJECT('deep', JSON_ARRAY(1.5)))"
    if kind == 7:
        return "CAST('{\"n\": {\"m\": [1, {\"o\": null}]}}' AS JSON)"
    return "CAST(TIMESTAMP '2024-02-29 01:02:03.456' AS JSON)"


def _json_statement(rng: random.Random, doc, column: str) -> str | None:
    paths = list(_paths(doc))
    kind = rng.randrange(6)
    if kind <= 1 and paths:  # replace (or set) existing paths, one to three at once
        chosen = rng.sample(paths, min(len(paths), rng.randint(1, 3)))
        fn = "JSON_REPLACE" if kind == 0 else "JSON_SET"
        args = ", ".join(f"'{p}', {_value(rng)}" for p, _ in chosen)
        return f"{fn}({column}, {args})"
    if kind == 2:  # a new member of an object, or past an array's end (appended)
        holders = [(p, v) for p, v in [("$", doc), *paths] if isinstance(v, (dict, list))]
        p, v = rng.choice(holders)
        leg = f".n{rng.randint(0, 99)}" if isinstance(v, dict) else f"[{len(v) + 3}]"
        return f"JSON_SET({column}, '{p}{leg}', {_value(rng)})"
    if kind == 3 and paths:  # remove a member or an element
        p, _ = rng.choice(paths)
        return f"JSON_REMOVE({column}, '{p}')"
    if kind == 4 and paths:  # nested calls: still a partial update
        p, _ = rng.choice(paths)
        return (f"JSON_SET(JSON_REMOVE({column}, '{p}'), '$.again{rng.randint(0, 9)}', "
                f"{_value(rng)})")
    if paths:
        p, _ = rng.choice(paths)
        return f"JSON_REPLACE({column}, '{p}', {_value(rng)})"
    return None


@pytest.mark.long
def test_partial_json_updates_equal_the_servers_documents(mysql_compressed, monkeypatch):
    """Random JSON_SET, JSON_REPLACE and JSON_REMOVE updates on nested paths (with other
    columns changed in the same statements, and two JSON columns at once): after each, the
    record's documents are the server's own text (``SELECT CAST(j AS CHAR)``), read with
    the diffs applied in C (``_fastjsondiff.c``: json_diff never called), by json_diff over
    the compiled decoder's trees, and by the Python decoder."""
    sb, rng = mysql_compressed, random.Random(7)
    db = fresh_db(sb)
    conn = cdc(sb)
    sb.execute("CREATE TABLE docs (id INT PRIMARY KEY, n INT, j JSON, k JSON)", database=db)
    filler = "f" * 300  # long documents: the server logs small changes as diffs
    with sb.admin_connection(db) as c, c.cursor() as cur:
        for i in range(1, 6):
            cur.execute("INSERT INTO docs VALUES (%s, 0, %s, %s)", (i, json.dumps(
                {"a": {"b": [1, 2.5, {"c": "x", "d": [True, None]}], "e": {"f": {"g": i}}},
                 "filler": filler, "arr": list(range(i))}), json.dumps([filler, {"i": i}])))
    applied = []
    real_apply = json_diff.apply

    def counting(*args, **kw):
        applied.append(args[2])
        return real_apply(*args, **kw)

    monkeypatch.setattr(json_diff, "apply", counting)
    steps = []
    with sb.admin_connection(db) as c, c.cursor() as cur:
        for _ in range(120):
            row = rng.randint(1, 5)
            cur.execute("SELECT CAST(j AS CHAR), CAST(k AS CHAR) FROM docs WHERE id = %s",
                        (row,))
            j, k = (json.loads(x) for x in cur.fetchone())
            sets = ["n = n + 1"]
            for column, doc in (("j", j), ("k", k)):
                if column == "j" or rng.random() < 0.3:
                    expr = _json_statement(rng, doc, column)
                    if expr:
                        sets.append(f"{column} = {expr}")
            before = current_offset(conn)
            cur.execute(f"UPDATE docs SET {', '.join(sets)} WHERE id = %s", (row,))
            after = current_offset(conn)
            cur.execute("SELECT CAST(j AS CHAR), CAST(k AS CHAR) FROM docs WHERE id = %s",
                        (row,))
            steps.append((before, after, row, cur.fetchone(), sets))
    kinds = binlog_events(sb, steps[0][0])
    assert kinds.count("Update_rows_partial") == len(steps), set(kinds)
    twins = ["json_diff", "py decoder"] + (["c", "c, before by key"] if fastdecode.DIFFS_IN_C
                                           else [])
    for twin in twins:
        monkeypatch.setattr(fastdecode, "DIFFS_IN_C", twin.startswith("c"))
        monkeypatch.setenv("SPARKCDC_ROW_DECODER", "py" if twin == "py decoder" else "auto")
        applied.clear()
        rd = reader(conn, db, "docs")
        if twin == "c, before by key":  # the pipeline's: the before image its key alone
            tid = TableId(db, "docs")
            rd = BinlogReader(conn, 7402, {tid: load_table_schema(conn, tid)}, flavor="mysql",
                              decoder=fastdecode.default_decoder(before_keys=True))
        for before, after, row, (j, k), sets in steps:
            [rec] = rd.read_window(before, after)
            assert rec.after["id"] == row
            assert (rec.after["j"], rec.after["k"]) == (j, k), (twin, sets)
            if twin == "c, before by key":
                assert rec.before == {"id": row}
        if twin.startswith("c"):
            assert not applied  # every diff applied in C
        else:
            assert len(applied) >= 100  # most were diffs, not whole documents


def test_partial_update_events_of_tables_without_json(mysql_compressed):
    """With PARTIAL_JSON on, MySQL logs every UPDATE as a PARTIAL_UPDATE_ROWS event, JSON
    column or not: read as any update."""
    sb = mysql_compressed
    db = fresh_db(sb)
    conn = cdc(sb)
    sb.execute("CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(10), d DOUBLE, t TIME(3))",
               "INSERT INTO p VALUES (1, 'a', 1.5, '-00:00:01.5'), (2, 'b', NULL, '838:59:59')",
               database=db)
    start = current_offset(conn)
    sb.execute("UPDATE p SET v = CONCAT(v, v), d = 2.5", "UPDATE p SET id = id + 10",
               database=db)
    end = current_offset(conn)
    assert binlog_events(sb, start).count("Update_rows_partial") == 2
    t1, t2 = -dt.timedelta(seconds=1.5), dt.timedelta(hours=838, minutes=59, seconds=59)
    assert changes(reader(conn, db, "p").read_window(start, end)) == [
        ("u", "p", {"id": 1, "v": "a", "d": 1.5, "t": t1}, {"id": 1, "v": "aa", "d": 2.5, "t": t1}),
        ("u", "p", {"id": 2, "v": "b", "d": None, "t": t2},
         {"id": 2, "v": "bb", "d": 2.5, "t": t2}),
        ("u", "p", {"id": 1, "v": "aa", "d": 2.5, "t": t1},
         {"id": 11, "v": "aa", "d": 2.5, "t": t1}),
        ("u", "p", {"id": 2, "v": "bb", "d": 2.5, "t": t2},
         {"id": 12, "v": "bb", "d": 2.5, "t": t2}),
    ]




def test_partial_update_events_without_diffs_are_decoded_in_c(mysql_compressed, monkeypatch):
    """Every PARTIAL_UPDATE_ROWS event is decoded by the compiled decoder in one call: those
    whose rows hold no JSON diff (every UPDATE of a table without JSON columns; an UPDATE of
    a JSON table that leaves its JSON alone, logged as empty diffs, or sets a whole new
    document) and those with diffs, applied in C (``_fastjsondiff.c``), or with
    ``DIFFS_IN_C`` off by json_diff over trees built in C; none is handed to the Python
    decoder. All equal the Python decoder's."""
    if not fastdecode.CRowDecoder.partial_in_c:
        pytest.fail("the compiled decoder is not built (pip install -e .)")
    sb = mysql_compressed
    db = fresh_db(sb)
    conn = cdc(sb)
    sb.execute("CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(10), d DECIMAL(10,2))",
               "CREATE TABLE q (id INT PRIMARY KEY, n INT, j JSON, k JSON)",
               "INSERT INTO p VALUES (1, 'a', 1.5), (2, NULL, -2)",
               "INSERT INTO q VALUES (1, 0, '{\"a\": [1, 2], \"s\": \"" + "x" * 200 + "\"}', "
               "NULL), (2, 0, '[1]', '{}')", database=db)
    start = current_offset(conn)
    sb.execute("UPDATE p SET v = CONCAT(IFNULL(v, ''), 'z'), d = d * 2",  # no JSON column
               "UPDATE q SET n = n + 1",  # JSON left alone
               "UPDATE q SET k = JSON_OBJECT('whole', id) WHERE id = 1",  # a whole document
               "UPDATE q SET j = JSON_SET(j, '$.a[1]', 5) WHERE id = 1",  # a diff
               "UPDATE q SET n = 7, j = JSON_REMOVE(j, '$[0]') WHERE id = 2",  # a diff
               database=db)
    end = current_offset(conn)
    assert binlog_events(sb, start).count("Update_rows_partial") == 5
    to_python = []
    real = rows_events.decode_partial

    def spy(decoder, tm, schema, *args):
        to_python.append(schema.table_id.table)
        return real(decoder, tm, schema, *args)

    diffs = []
    real_apply = json_diff.apply

    def apply(before, d, column, **kw):
        diffs.append((column, len(d), bool(kw)))
        return real_apply(before, d, column, **kw)

    monkeypatch.setattr(rows_events, "decode_partial", spy)
    monkeypatch.setattr(json_diff, "apply", apply)
    in_c = changes(reader(conn, db, "p", "q").read_window(start, end))
    assert diffs == [] and to_python == []  # every diff applied in C
    monkeypatch.setattr(fastdecode, "DIFFS_IN_C", False)
    assert changes(reader(conn, db, "p", "q").read_window(start, end)) == in_c
    # MySQL flags a JSON column the UPDATE left alone as an empty diff: read in C as the
    # before value; only the JSON_SET's event holds a real diff (the small document
    # JSON_REMOVE changed is logged whole), applied by json_diff over the C parse and render
    assert diffs == [("j", 12, True)] and to_python == []
    schemas = {TableId(db, t): load_table_schema(conn, TableId(db, t)) for t in ("p", "q")}
    in_py = changes(BinlogReader(conn, 7406, schemas, flavor="mysql",
                                 decoder=PyRowDecoder()).read_window(start, end))
    assert in_c == in_py and len(in_c) == 2 + 2 + 1 + 1 + 1
    assert in_c[3][3] == {"id": 2, "n": 1, "j": "[1]", "k": "{}"}
    assert in_c[4][3]["k"] == '{"whole": 1}'
    assert in_c[5][3]["j"] == '{"a": [1, 5], "s": "' + "x" * 200 + '"}'
    assert in_c[6][3] == {"id": 2, "n": 7, "j": "[]", "k": "{}"}
