"""`ReplicationLeader.stop()` ends the sessions it serves, not only its listener.

A leader that loses its role stops its replication listener; a follower still connected to
that epoch's session must see the connection end, so that it connects again (to the node's
next epoch, often on the same address). Before the fix the session's socket stayed open with
nobody serving it, and the follower waited on it for good, out of the ISR.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ringmq.server.options import ReplicationSettings
from ringmq.server.replication_leader import ReplicationLeader
from ringmq.storage.store import FileStore


async def test_stop_closes_a_connected_session(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path / "store")
    leader = ReplicationLeader(store, ReplicationSettings(secret=b"s", port=0), "127.0.0.1")
    await leader.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", leader.port)
        await asyncio.sleep(0.05)  # the session is being served: it waits for a hello
        await leader.stop()
        # the session's socket ends (EOF); bounded, against hanging, not timed
        assert await asyncio.wait_for(reader.read(), timeout=10) == b""
        writer.close()
    finally:
        await leader.stop()
        store.close()
