"""The etcd keys of a ringmq cluster and the values stored under them (pure).

Layout, under the cluster's name (`[cluster] name`, default "ringmq"):

    /ringmq/<cluster>/secret                  random token followers present to the leader
    /ringmq/<cluster>/nodes/<node>            JSON {"name", "address", "amqp", "http", "stomp",
                                              "mqtt", "stream", "web-stomp", "web-mqtt",
                                              "web-amqp"}, with that node's lease (gone when
                                              the node is)
    /ringmq/<cluster>/shards/<id>/leader      JSON {"node", "epoch"}, with the leader's lease
    /ringmq/<cluster>/shards/<id>/epoch       decimal epoch (activation sequence), no lease
    /ringmq/<cluster>/shards/<id>/isr         JSON sorted list of node names, no lease

A shard's keys are under its id so that several shards per machine (a later issue) reuse them
unchanged; this issue runs shard 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["ClusterKeys", "NodeRecord", "leader_value", "parse_isr", "parse_leader"]


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """The keys of one cluster and one of its shards."""

    cluster: str
    shard: int = 0

    @property
    def root(self) -> str:
        return f"/ringmq/{self.cluster}/"

    @property
    def secret(self) -> str:
        return f"{self.root}secret"

    @property
    def nodes(self) -> str:
        """Prefix of the node records."""
        return f"{self.root}nodes/"

    def node(self, name: str) -> str:
        return f"{self.nodes}{name}"

    @property
    def shard_prefix(self) -> str:
        return f"{self.root}shards/{self.shard}/"

    @property
    def leader(self) -> str:
        return f"{self.shard_prefix}leader"

    @property
    def epoch(self) -> str:
        return f"{self.shard_prefix}epoch"

    @property
    def isr(self) -> str:
        return f"{self.shard_prefix}isr"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What a node advertises: its cluster (replication) address and client ports (the host
    of `address` serves them: followers relay clients there)."""

    name: str
    address: str
    amqp: int | None = None
    http: int | None = None
    stomp: int | None = None
    mqtt: int | None = None
    stream: int | None = None
    web_stomp: int | None = None
    web_mqtt: int | None = None
    web_amqp: int | None = None

    def encode(self) -> bytes:
        return json.dumps(
            {
                "name": self.name,
                "address": self.address,
                "amqp": self.amqp,
                "http": self.http,
                "stomp": self.stomp,
                "mqtt": self.mqtt,
                "stream": self.stream,
                "web-stomp": self.web_stomp,
                "web-mqtt": self.web_mqtt,
                "web-amqp": self.web_amqp,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> NodeRecord | None:
        """The record, or None for a value that is not one (written by something else)."""
        try:
            d: Any = json.loads(data)
            return cls(
                name=str(d["name"]),
                address=str(d["address"]),
                amqp=_port(d, "amqp"),
                http=_port(d, "http"),
                stomp=_port(d, "stomp"),
                mqtt=_port(d, "mqtt"),
                stream=_port(d, "stream"),
                web_stomp=_port(d, "web-stomp"),
                web_mqtt=_port(d, "web-mqtt"),
                web_amqp=_port(d, "web-amqp"),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _port(d: Any, key: str) -> int | None:
    # a record written by an older node lacks the later ports ("stomp", "mqtt", "stream", ...)
    return None if d.get(key) is None else int(d[key])


def leader_value(node: str, epoch: int) -> bytes:
    """The leader key's value: deterministic, so a resign can compare it byte for byte."""
    return json.dumps({"epoch": epoch, "node": node}, sort_keys=True).encode()


def parse_leader(data: bytes | None) -> tuple[str | None, int]:
    """(node, epoch) of a leader key's value; (None, 0) when absent or unreadable."""
    if data is None:
        return None, 0
    try:
        d: Any = json.loads(data)
        return str(d["node"]), int(d["epoch"])
    except (ValueError, KeyError, TypeError):
        return None, 0


def parse_isr(data: bytes | None) -> frozenset[str]:
    if data is None:
        return frozenset()
    try:
        d: Any = json.loads(data)
    except ValueError:
        return frozenset()
    return frozenset(str(x) for x in d) if isinstance(d, list) else frozenset()


def encode_isr(names: frozenset[str]) -> bytes:
    return json.dumps(sorted(names)).encode()
