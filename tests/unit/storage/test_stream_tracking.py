"""A stream's tracking file (stored consumer offsets, publisher sequences) is replaced only by
a copy already on disk: written to a temporary file, fsynced, renamed, and the directory
fsynced (storage/streamfiles.py), so a crash leaves the old file or the new one, whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ringmq.core.streamlog import StreamSpec
from ringmq.storage import journal
from ringmq.storage.store import FileStore


def test_the_tracking_file_is_renamed_into_place_only_after_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, int]] = []  # ("fsync" | "rename", inode)
    real_datasync, real_fsync, real_replace = journal._datasync, os.fsync, os.replace

    def datasync(fd: int) -> None:
        events.append(("fsync", os.fstat(fd).st_ino))
        real_datasync(fd)

    def fsync(fd: int) -> None:
        events.append(("fsync", os.fstat(fd).st_ino))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if os.fspath(dst).endswith("tracking.json"):
            events.append(("rename", os.stat(src).st_ino))
        real_replace(src, dst)

    monkeypatch.setattr(journal, "_datasync", datasync)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)

    store = FileStore.open(tmp_path)
    log = store.open_stream("/\x00s", StreamSpec())
    directory = os.stat(log.directory).st_ino
    for offset in (42, 43):
        events.clear()
        log.tracking.store_offset("consumer", offset)
        store.sync()
        renames = [i for i, (kind, _) in enumerate(events) if kind == "rename"]
        assert len(renames) == 1, events
        at, inode = renames[0], events[renames[0]][1]
        assert ("fsync", inode) in events[:at]  # its data on disk before it takes the name
        assert ("fsync", directory) in events[at:]  # and the rename itself after
        saved = json.loads((log.directory / "tracking.json").read_text())
        assert saved["offsets"] == {"consumer": offset}
    log.tracking.store_offset("consumer", 44)  # left to the close
    store.close()
    again = FileStore.open(tmp_path)
    try:
        assert again.open_stream("/\x00s", StreamSpec()).tracking.offsets == {"consumer": 44}
    finally:
        again.close()
