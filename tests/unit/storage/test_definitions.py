from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from ringmq.storage.definitions import DefinitionLog


def test_put_delete_reopen(tmp_path: Path) -> None:
    d = DefinitionLog(tmp_path)
    d.put("vhost", "/", {"name": "/"})
    d.put("user", "guest", {"tags": ["administrator"]})
    d.put("user", "guest", {"tags": []})
    d.delete("vhost", "/")
    d.delete("vhost", "absent")
    d.close()
    d2 = DefinitionLog(tmp_path)
    assert d2.all() == {"user": {"guest": {"tags": []}}}
    assert d2.get("user", "guest") == {"tags": []}
    assert d2.get("user", "nobody") is None
    d2.close()


def test_compaction_into_snapshot(tmp_path: Path) -> None:
    d = DefinitionLog(tmp_path, compact_after=10)
    for i in range(50):
        d.put("queue", f"q{i % 5}", {"n": i})
    d.close()
    d2 = DefinitionLog(tmp_path, compact_after=10)
    assert (tmp_path / "snapshot.json").exists()
    assert (tmp_path / "log").stat().st_size == 0
    assert d2.all() == {"queue": {f"q{k}": {"n": 45 + k} for k in range(5)}}
    d2.put("queue", "q0", {"n": -1})
    d2.close()
    assert DefinitionLog(tmp_path).get("queue", "q0") == {"n": -1}


def test_torn_log_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = DefinitionLog(tmp_path)
    d.put("policy", "p1", {"pattern": "^a"})
    d.put("policy", "p2", {"pattern": "^b"})
    d.close()
    log_path = tmp_path / "log"
    os.truncate(log_path, log_path.stat().st_size - 2)
    with caplog.at_level(logging.WARNING):
        d2 = DefinitionLog(tmp_path)
    assert d2.all() == {"policy": {"p1": {"pattern": "^a"}}}
    assert "truncating" in caplog.text
    d2.close()
