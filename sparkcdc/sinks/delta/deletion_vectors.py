"""Delta deletion vectors, written and read to the protocol's own format (PROTOCOL.md,
"Deletion Vectors").

Why our own: delta-rs reads deletion vectors (its DataFusion scan, ``optimize``) but writes
none (delta-io/delta-rs #4079, #4512): its MERGE rewrites every file that held a changed
row. A deletion vector instead marks rows of a file as deleted, so a batch that updates
2,000 rows of a 2M-row table writes those 2,000 rows again and a few bytes per touched
file, not the table.

The format, as Delta's readers (delta-spark, delta-kernel, delta-rs) expect it:

* the vector: a ``RoaringBitmapArray`` in its *portable* form: the magic number
  1681511377 (int32, little-endian), the number of 32-bit bitmaps (int64, little-endian),
  then per bitmap its high 32 bits (uint32, little-endian) and the bitmap in CRoaring's
  portable serialization; bits are row positions in the data file, counting from 0;
* stored in a file ``deletion_vector_<uuid>.bin`` in the table's folder: a version byte
  (1), then per vector its size (int32, big-endian), its bytes and their CRC-32 (big-endian);
  the descriptor's ``offset`` is where the size starts;
* or inline in the log (``storageType`` ``i``): the vector's bytes in Z85;
* the descriptor names a file by ``storageType`` ``u``: an optional folder prefix and the
  file's UUID in Z85 (20 characters); ``p`` is an absolute path.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkcdc.sinks.positions import distinct_sorted

if TYPE_CHECKING:
    import numpy as np

MAGIC = 1681511377  # the portable RoaringBitmapArray
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_INDEX = {c: i for i, c in enumerate(_Z85)}


class DeletionVectorError(ValueError):
    """A stored deletion vector that is not the protocol's format (a damaged file)."""


def z85_encode(data: bytes) -> str:
    """Z85 of ``data`` padded with zeros to a multiple of 4 bytes, as Delta's Base85Codec."""
    data = data + b"\0" * (-len(data) % 4)
    out = []
    for i in range(0, len(data), 4):
        n = int.from_bytes(data[i:i + 4], "big")
        digits = []
        for _ in range(5):
            n, r = divmod(n, 85)
            digits.append(_Z85[r])
        out.append("".join(reversed(digits)))
    return "".join(out)


def z85_decode(text: str, size: int | None = None) -> bytes:
    if len(text) % 5:
        raise DeletionVectorError(f"Z85 text of {len(text)} characters (not a multiple of 5)")
    out = bytearray()
    for i in range(0, len(text), 5):
        n = 0
        for c in text[i:i + 5]:
            n = n * 85 + _Z85_INDEX[c]
        out += n.to_bytes(4, "big")
    return bytes(out if size is None else out[:size])


def serialize(positions: Iterable[int] | np.ndarray) -> bytes:
    """The portable RoaringBitmapArray of row ``positions`` (any order; repeats once).

    The positions stay in numpy arrays and reach CRoaring as a buffer of 32-bit words
    (``array('I')``), never one Python int each: a batch of random updates marks about a
    position per changed row, and the driver's purge reads every vector it rewrites."""
    import numpy as np
    from pyroaring import BitMap

    p = distinct_sorted(positions)
    highs = p >> 32
    cuts = np.flatnonzero(np.diff(highs)) + 1  # where the high 32 bits change (sorted)
    groups = np.split(p, cuts) if p.size else []
    out = [struct.pack("<iq", MAGIC, len(groups))]
    for g in groups:
        low = (g & 0xFFFFFFFF).astype(np.uint32)
        out.append(struct.pack("<I", int(g[0] >> 32)))
        out.append(BitMap(array("I", low.tobytes())).serialize())
    return b"".join(out)


def deserialize(data: bytes) -> np.ndarray:
    """Row positions of a portable RoaringBitmapArray, ascending (int64)."""
    import numpy as np
    from pyroaring import BitMap

    if len(data) < 12:
        raise DeletionVectorError(f"a deletion vector of {len(data)} bytes")
    magic, n = struct.unpack_from("<iq", data, 0)
    if magic != MAGIC:
        raise DeletionVectorError(f"deletion vector magic number {magic} (want {MAGIC}: the "
                                  "portable format; the native one is not read)")
    at, out = 12, []
    for i in range(n):
        (high,) = struct.unpack_from("<I", data, at)
        bm = BitMap.deserialize(data[at + 4:])
        if i + 1 < n:  # the next bitmap starts after this one's bytes
            at += 4 + len(bm.serialize())
        low = np.frombuffer(bm.to_array(), dtype=np.uint32).astype(np.int64)
        out.append(low + (high << 32) if high else low)
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class Descriptor:
    """A deletion vector as the log's ``add``/``remove`` actions name it."""

    storage_type: str  # u (a file by UUID), i (inline), p (an absolute path)
    path_or_inline: str
    size: int  # bytes of the serialized vector
    cardinality: int  # rows it deletes
    offset: int | None = None  # where its size field starts in the file (u, p)

    def to_action(self) -> dict[str, Any]:
        d: dict[str, Any] = {"storageType": self.storage_type,
                             "pathOrInlineDv": self.path_or_inline,
                             "sizeInBytes": self.size, "cardinality": self.cardinality}
        if self.offset is not None:
            d["offset"] = self.offset
        return d

    @classmethod
    def from_action(cls, d: dict[str, Any] | None) -> Descriptor | None:
        if not d:
            return None
        off = d.get("offset")
        return cls(str(d["storageType"]), str(d["pathOrInlineDv"]), int(d["sizeInBytes"]),
                   int(d["cardinality"]), None if off is None else int(off))

    def file(self, root: Path) -> Path:
        """The file holding the vector (``u``, ``p``)."""
        if self.storage_type == "p":
            p = self.path_or_inline
            return Path(p.removeprefix("file://"))
        prefix, code = self.path_or_inline[:-20], self.path_or_inline[-20:]
        name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(code))}.bin"
        return root / prefix / name if prefix else root / name


def read(root: Path, d: Descriptor) -> np.ndarray:
    """The row positions ``d`` deletes, read from the log (inline) or its file, with the
    file's size and checksum checked."""
    if d.storage_type == "i":
        return deserialize(z85_decode(d.path_or_inline, d.size))
    if d.storage_type not in ("u", "p"):
        raise DeletionVectorError(f"deletion vector storage type {d.storage_type!r}")
    with open(d.file(root), "rb") as f:
        f.seek(d.offset if d.offset is not None else 1)
        head = f.read(4)
        (size,) = struct.unpack(">i", head)
        if size != d.size:
            raise DeletionVectorError(f"{d.file(root)}: a vector of {size} bytes where the log "
                                      f"says {d.size}")
        data = f.read(size)
        (crc,) = struct.unpack(">I", f.read(4))
    if zlib.crc32(data) != crc:
        raise DeletionVectorError(f"{d.file(root)}: checksum mismatch at offset {d.offset}")
    positions = deserialize(data)
    if len(positions) != d.cardinality:
        raise DeletionVectorError(f"{d.file(root)}: {len(positions)} rows where the log says "
                                  f"{d.cardinality}")
    return positions


def write_file(root: Path, vectors: list[np.ndarray], prefix: str = "") -> list[Descriptor]:
    """``vectors`` (row positions each) written into one new file under ``root`` (in folder
    ``prefix`` when given): their descriptors, in order. The file is written whole, then
    renamed into place, so a reader never sees part of it."""

    u = uuid.uuid4()
    folder = root / prefix if prefix else root
    folder.mkdir(parents=True, exist_ok=True)
    parts, out, at = [b"\x01"], [], 1
    code = prefix + z85_encode(u.bytes)
    for positions in vectors:
        ordered = distinct_sorted(positions)
        data = serialize(ordered)
        parts += [struct.pack(">i", len(data)), data, struct.pack(">I", zlib.crc32(data))]
        out.append(Descriptor("u", code, len(data), int(ordered.size), at))
        at += 8 + len(data)
    final = folder / f"deletion_vector_{u}.bin"
    tmp = folder / f".{final.name}.tmp"
    with open(tmp, "wb") as f:
        f.write(b"".join(parts))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    return out
