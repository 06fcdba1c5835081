"""gh-ost's and pt-online-schema-change's helper tables and swaps, recognised by name and
statement (mysql/online_schema.py); the tools themselves run in
tests/pipeline/test_online_schema_change.py."""

from __future__ import annotations

from sparkcdc.core.schema import TableId
from sparkcdc.mysql.online_schema import helper_of, helpers, swap


def test_helper_names_and_whose_they_are():
    assert helper_of("_orders_gho") == ("orders", "gho")
    assert helper_of("_orders_new") == ("orders", "new")
    assert helper_of("_my_table_del") == ("my_table", "del")
    assert helper_of("orders") is None and helper_of("_orders_tmp") is None
    tables = [TableId("d", n) for n in ("orders", "_orders_gho", "_orders_ghc", "_lone_new")]
    # a helper name whose table is not there is an ordinary table
    assert helpers(iter(tables)) == {TableId("d", "_orders_gho"), TableId("d", "_orders_ghc")}
    assert helpers([TableId("e", "_orders_new"), TableId("d", "orders")]) == set()


def test_the_swap_statements_of_both_tools():
    assert swap("RENAME TABLE `d`.`t` TO `d`.`_t_old`, `d`.`_t_new` TO `d`.`t`", None, "d.t")
    assert swap("rename /* gh-ost */ table `d`.`t` to `d`.`_t_del`, `d`.`_t_gho` to `d`.`t`",
                None, "d.t")
    assert swap("RENAME TABLE t TO _t_del, _t_gho TO t", "d", "d.t")
    assert not swap("RENAME TABLE t TO _t_old", "d", "d.t")  # renamed away only
    assert not swap("RENAME TABLE t TO u, _t_new TO t", "d", "d.t")  # not to a helper name
    assert not swap("RENAME TABLE t TO _t_old, _x_new TO t", "d", "d.t")  # another's helper
    assert not swap("RENAME TABLE t TO _t_old, _t_new TO t", "d", "d.u")
