"""The live files of a Delta table, read from its log, with what delta-rs does not show:
each file's ``add`` action whole, its deletion vector descriptor included.

Why: a commit that marks rows of a file deleted removes the file's ``add`` (with the
deletion vector it had) and adds it again with the new one (PROTOCOL.md, "Deletion
Vectors"); delta-rs' ``get_add_actions`` gives neither the descriptor nor the action. The
replay is the protocol's: the last checkpoint (``_last_checkpoint``), then every JSON
commit after it in order, a file known by its path and its deletion vector's id.

Only local folders are read (the tables whose changes the tasks write,
``files.supported``). ``DeltaLog`` keeps what it read and reads only newer commits when
asked again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_COMMIT = re.compile(r"^(\d{20})\.json$")


def _dv_id(dv: dict[str, Any] | None) -> str:
    if not dv:
        return ""
    off = dv.get("offset")
    return f"{dv['storageType']}{dv['pathOrInlineDv']}" + ("" if off is None else f"@{off}")


def last_checkpoint(root: Path) -> int | None:
    """The version of the table's last checkpoint (``_last_checkpoint``), None if it has
    none or the file cannot be read (a checkpoint is then due)."""
    try:
        return int(json.loads((root / "_delta_log" / "_last_checkpoint").read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class DeltaLog:
    """The table at ``root``: its version and live ``add`` actions (``files``, by path)."""

    def __init__(self, root: Path):
        self.root = root
        self.dir = root / "_delta_log"
        self.version = -1
        self._live: dict[tuple[str, str], dict[str, Any]] = {}
        self.protocol: dict[str, Any] = {}
        self.metadata: dict[str, Any] = {}
        self._last_ino = -1  # the last commit read, as a file (``newest``)

    def refresh(self) -> DeltaLog:
        """Read the commits after the ones read so far (from the last checkpoint, the first
        time or when older commits were cleaned up)."""
        versions = sorted(int(m.group(1)) for p in self.dir.iterdir()
                          if (m := _COMMIT.match(p.name)))
        if not versions:
            return self
        if self.version < 0 or (versions[0] > self.version + 1):
            self._from_checkpoint()
        for v in versions:
            if v > self.version:
                self._apply(self.dir / f"{v:020d}.json")
                self.version = v
        try:
            self._last_ino = (self.dir / f"{self.version:020d}.json").stat().st_ino
        except OSError:
            self._last_ino = -1
        return self

    def newest(self) -> bool:
        """Whether what was read is still the table's newest state, told by two file
        checks instead of a listing of the log: no commit after the last one read, and
        that one still the same file (a table made again in its folder restarts its
        versions)."""
        if self.version < 0:
            return False
        try:
            same = (self.dir / f"{self.version:020d}.json").stat().st_ino == self._last_ino
        except OSError:
            return False
        return same and not (self.dir / f"{self.version + 1:020d}.json").exists()

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        return {path: add for (path, _dv), add in self._live.items()}

    def has_feature(self, name: str) -> bool:
        return name in (self.protocol.get("readerFeatures") or ()) and name in (
            self.protocol.get("writerFeatures") or ())

    def _from_checkpoint(self) -> None:
        self._live, self.version = {}, -1
        last = self.dir / "_last_checkpoint"
        if not last.exists():
            return
        import pyarrow.parquet as pq

        v = int(json.loads(last.read_text())["version"])
        parts = sorted(self.dir.glob(f"{v:020d}.checkpoint*.parquet"))
        for part in parts:
            t = pq.read_table(part)
            for row in t.to_pylist():
                if row.get("protocol"):
                    self.protocol = row["protocol"]
                if row.get("metaData"):
                    self.metadata = row["metaData"]
                add = row.get("add")
                if add:
                    add = {k: v for k, v in add.items() if v is not None}
                    pv = add.get("partitionValues")
                    if isinstance(pv, list):  # a map read as pairs
                        add["partitionValues"] = dict(pv)
                    self._live[(add["path"], _dv_id(add.get("deletionVector")))] = add
        self.version = v

    def _apply(self, commit: Path) -> None:
        for line in commit.read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                a = action["add"]
                self._live[(a["path"], _dv_id(a.get("deletionVector")))] = a
            elif "remove" in action:
                r = action["remove"]
                self._live.pop((r["path"], _dv_id(r.get("deletionVector"))), None)
            elif "protocol" in action:
                self.protocol = action["protocol"]
            elif "metaData" in action:
                self.metadata = action["metaData"]
