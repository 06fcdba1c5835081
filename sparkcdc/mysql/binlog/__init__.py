"""The binlog, in layers that import only downwards (an import contract holds them):

* ``reader``: ``BinlogReader``, windows and tails of change records from one server, with
  its own reconnects and positions;
* ``fastdecode``: the compiled row decoder's wrapper (``_fastdecode.c`` and its parts), with the Python
  decoder as its fallback;
* ``row_decoding``: row images to canonical values, in Python (``PyRowDecoder``);
* ``protocol``: the replication protocol itself: the dump request, packets, event headers,
  table maps and the binlog column types.

The tests compare this with a reference reader over python-mysql-replication's events
(tests/support/library_reader.py), which overrides the reader's ``_open`` and ``_consume``.
"""
