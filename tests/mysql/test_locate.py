"""Chunk membership decided by the server's collation, not Python's string order."""

from sparkcdc.core.offsets import BinlogOffset
from sparkcdc.core.schema import Column, TableId, TableSchema
from sparkcdc.core.stream_filter import FinishedSplit
from sparkcdc.mysql.connection import ConnectionOptions
from sparkcdc.mysql.locate import Locator


def _opts(sb):
    i = sb.info
    return ConnectionOptions(i.host, i.port, i.cdc_user, i.cdc_password)


def test_text_keys_located_in_server_collation(mariadb):
    t = TableId("d", "t")
    ci = TableSchema(t, (Column("k", "varchar(20)", False, "utf8mb4", "utf8mb4_general_ci"),),
                     ("k",), "k")
    hw = BinlogOffset("binlog.000001", 4)
    splits = [FinishedSplit(t, None, "m", hw), FinishedSplit(t, "m", None, hw)]
    loc = Locator(_opts(mariadb))
    try:
        # Python: "Z" < "a" < "m"; general_ci: "a" < "m" < "Z", "M" == "m", "é" == "e"
        got = loc.locate(ci, splits, ["Z", "a", "M", "m", "é", "zz", None, "l'quote\\"])
        assert got == [1, 0, 1, 1, 0, 1, 0, 0]
        assert loc.in_chunk(ci, "b", "f", ["B", "é", "f", "F", "a"]) == [True, True, False, False, False]
        binary = TableSchema(t, (Column("k", "varchar(20)", False, "utf8mb4", "utf8mb4_bin"),),
                             ("k",), "k")
        assert loc.locate(binary, splits, ["Z", "a", "M"]) == [0, 0, 0]
    finally:
        loc.close()
