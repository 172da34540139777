"""Replication of a shard's log to followers: the wire codec and both sides' state machines.

Sans-IO (STYLE.md): frames in `codec.py`, the leader's side of a follower's session in
`leader.py`, the follower's in `follower.py`. They read the shard log
(`storage.shardlog.ShardLog`) and apply to a copy (`storage.replica.Replica`) through small
ports; sockets live in `server/replication_leader.py` and `server/replication_follower.py`.
docs/clustering.md, "The replicated log", describes the format, positions and epochs.
"""

from __future__ import annotations

from ringmq.replication.codec import FrameReader, ProtocolError, encode
from ringmq.replication.follower import FollowerSession, ReplicaPort
from ringmq.replication.leader import LeaderSession, LogView

__all__ = [
    "FollowerSession",
    "FrameReader",
    "LeaderSession",
    "LogView",
    "ProtocolError",
    "ReplicaPort",
    "encode",
]
