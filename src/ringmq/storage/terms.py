"""Recovery terms: the store's index saved at a clean stop, so a clean start reads one file.

Theory of operation
-------------------
RabbitMQ writes "recovery terms" when it stops cleanly; ringmq does the same. `FileStore.close()`
hands `write()` a JSON-able `meta` dict and a list of flat `array.array` columns (per queue: the
live seqs with their journal locations and body sizes, delivery counts, shared-body refs, due
times; the message store's body index). The file is::

    b"RINGMQT1" | u32 crc32(body) | u64 len(body) | body
    body = u32 len(meta) | meta (JSON, UTF-8) | column 0 | column 1 | ...

`meta["columns"]` lists each column's typecode and length, so `read()` slices them back without
parsing anything per entry. The file is written to a temporary name, fsynced and renamed; the
caller then writes its CLEAN marker and fsyncs the directory.

`read()` returns `None` (with the reason) on a missing file, bad magic, wrong length, checksum
mismatch or a different byte order; the store then also checks that the journal and message
store files are exactly those the terms describe, and replays the journal on any mismatch.
The store deletes the file at every open (`discard`), before anything is appended, so terms can
never describe files that changed after them. No state; file I/O only.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import zlib
from array import array
from pathlib import Path
from typing import Any, Final

NAME: Final = "RECOVERY_TERMS"
_MAGIC: Final = b"RINGMQT1"
_HEAD: Final = struct.Struct("<8sIQ")
_U32: Final = struct.Struct("<I")


def write(directory: Path, meta: dict[str, Any], columns: list[array[Any]]) -> int:
    """Write the terms file durably (tmp + fsync + rename); returns its size in bytes."""
    meta = dict(meta)
    meta["byteorder"] = sys.byteorder
    meta["columns"] = [[c.typecode, len(c)] for c in columns]
    raw_meta = json.dumps(meta, separators=(",", ":")).encode()
    parts: list[bytes] = [_U32.pack(len(raw_meta)), raw_meta]
    parts.extend(c.tobytes() for c in columns)
    crc = 0
    size = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
        size += len(part)
    tmp = directory / (NAME + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_HEAD.pack(_MAGIC, crc, size))
        for part in parts:
            f.write(part)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / NAME)
    return _HEAD.size + size


def read(directory: Path) -> tuple[dict[str, Any], list[array[Any]]] | str:
    """The meta dict and columns of a valid terms file, or why there is none."""
    path = directory / NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "no recovery terms"
    if len(data) < _HEAD.size:
        return "recovery terms truncated"
    magic, crc, size = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC:
        return "recovery terms: bad magic"
    body = memoryview(data)[_HEAD.size :]
    if len(body) != size:
        return f"recovery terms: {len(body)} bytes, expected {size}"
    if zlib.crc32(body) != crc:
        return "recovery terms: checksum mismatch"
    (n_meta,) = _U32.unpack_from(body, 0)
    try:
        meta = json.loads(bytes(body[4 : 4 + n_meta]))
    except ValueError:
        return "recovery terms: bad meta"
    if meta.get("byteorder") != sys.byteorder:
        return "recovery terms: written with another byte order"
    columns: list[array[Any]] = []
    pos = 4 + n_meta
    for typecode, length in meta["columns"]:
        col: array[Any] = array(typecode)
        nbytes = col.itemsize * length
        col.frombytes(body[pos : pos + nbytes])
        pos += nbytes
        columns.append(col)
    if pos != len(body):
        return "recovery terms: columns do not match the meta"
    return meta, columns


def discard(directory: Path) -> None:
    """Delete the terms file (and a leftover temporary one); no-op when absent."""
    for name in (NAME, NAME + ".tmp"):
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            pass
