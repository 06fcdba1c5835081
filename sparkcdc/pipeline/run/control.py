"""Requests to a running pipeline, through its checkpoint: ``sparkcdc snapshot``, ``pause``
and ``resume`` write one here, the running loop takes it at its next look (about a second)
and answers beside it. No write access to the source is needed (Debezium's signals need a
table there), and a request made while no pipeline runs waits for the next start.

Layout under the checkpoint::

    control/<time>-<id>.json         a request: kind, table pattern, when
    control/<time>-<id>.done.json    its answer: the tables it applied to, the ones it
                                     skipped and why
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sparkcdc.errors import ConfigError

KINDS = ("snapshot", "pause", "resume")


@dataclass(frozen=True)
class Request:
    path: Path
    kind: str
    tables: str  # a regular expression matched against 'database.table'
    where: str | None = None  # snapshot: only the rows where this SQL condition holds

    def matches(self, table: str) -> bool:
        return re.fullmatch(self.tables, table) is not None


@dataclass
class Answer:
    applied: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # table -> why

    def to_dict(self) -> dict:
        return {"applied": self.applied, "skipped": self.skipped}


def _dir(checkpoint: Path) -> Path:
    return Path(checkpoint) / "control"


def _done_path(path: Path) -> Path:
    return path.with_name(path.name[:-len(".json")] + ".done.json")


def submit(checkpoint: Path, kind: str, tables: str, where: str | None = None) -> Path:
    """Write a request; the path it waits at."""
    if kind not in KINDS:
        raise ValueError(kind)
    try:
        re.compile(tables)
    except re.error as e:
        raise ConfigError(f"--tables is not a valid regular expression: {tables!r} ({e})",
                          fix="match 'database.table', escaping dots: 'shop\\.orders'") from None
    d = _dir(checkpoint)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"kind": kind, "tables": tables, "where": where,
                               "at": time.time()}))
    os.replace(tmp, path)
    return path


def pending(checkpoint: Path) -> list[Request]:
    """Requests not answered yet, oldest first."""
    d = _dir(checkpoint)
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob("*.json")):
        if p.name.endswith(".done.json") or _done_path(p).exists():
            continue
        try:
            data = json.loads(p.read_text())
            out.append(Request(p, data["kind"], data["tables"], data.get("where")))
        except (OSError, ValueError, KeyError):
            continue  # half written: the next look takes it
    return out


def answer(req: Request, ans: Answer) -> None:
    done = _done_path(req.path)
    tmp = done.with_suffix(".tmp")
    tmp.write_text(json.dumps(ans.to_dict()))
    os.replace(tmp, done)


def wait(path: Path, timeout: float) -> Answer | None:
    """The answer to the request at ``path``, or None if none came within ``timeout``."""
    done = _done_path(path)
    deadline = time.monotonic() + timeout
    while True:
        if done.exists():
            try:
                data = json.loads(done.read_text())
                return Answer(list(data["applied"]), dict(data["skipped"]))
            except (OSError, ValueError, KeyError):
                pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)
