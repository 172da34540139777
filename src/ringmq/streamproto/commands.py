"""The RabbitMQ stream protocol's client commands: what `codec.decode` turns a client frame into.

One frozen dataclass per command a client sends (per `deps/rabbitmq_stream/docs/PROTOCOL.adoc` in
rabbitmq-server), and `Command`, their union, which the stream adapter matches on. Plain values:
no behaviour, no I/O; imports nothing from ringmq.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# --- client commands ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PeerProperties:
    correlation_id: int
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class SaslHandshake:
    correlation_id: int


@dataclass(frozen=True, slots=True)
class SaslAuthenticate:
    correlation_id: int
    mechanism: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Tune:
    frame_max: int
    heartbeat_s: int


@dataclass(frozen=True, slots=True)
class Open:
    correlation_id: int
    vhost: str


@dataclass(frozen=True, slots=True)
class Close:
    correlation_id: int
    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class CloseOk:
    correlation_id: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    pass


@dataclass(frozen=True, slots=True)
class Create:
    correlation_id: int
    stream: str
    arguments: dict[str, str]


@dataclass(frozen=True, slots=True)
class Delete:
    correlation_id: int
    stream: str


@dataclass(frozen=True, slots=True)
class Metadata:
    correlation_id: int
    streams: list[str]


@dataclass(frozen=True, slots=True)
class DeclarePublisher:
    correlation_id: int
    publisher_id: int
    reference: str
    stream: str


@dataclass(frozen=True, slots=True)
class DeletePublisher:
    correlation_id: int
    publisher_id: int


@dataclass(frozen=True, slots=True)
class QueryPublisherSequence:
    correlation_id: int
    reference: str
    stream: str


@dataclass(frozen=True, slots=True)
class Publish:
    publisher_id: int
    ids: list[int] = field(default_factory=list)
    """The publishing id of each message, in order; a sub-entry batch's messages all have
    the batch's publishing id."""
    entries: list[memoryview] = field(default_factory=list, compare=False)
    """Each message's entry as it arrived (``[u32 size][message]``, as a chunk holds it), a
    view of `content`, in the order of `ids`; empty when a sub-entry batch came (`bodies`
    then)."""
    bodies: list[bytes] = field(default_factory=list)
    """Each message of a frame with sub-entry batches, in the order of `ids` (empty
    otherwise: `entries` hold them)."""
    refused: list[int] = field(default_factory=list)
    """Publishing ids of sub-entry batches with a compression this broker does not read."""
    content: bytes = field(default=b"", compare=False)
    """The frame's content (`entries` view it)."""

    def messages(self) -> list[tuple[int, bytes]]:
        """(publishing id, message) in order (a copy of each: for the slow paths and tests)."""
        if self.entries:
            return [(i, bytes(e[4:])) for i, e in zip(self.ids, self.entries, strict=True)]
        return list(zip(self.ids, self.bodies, strict=True))


@dataclass(frozen=True, slots=True)
class Subscribe:
    correlation_id: int
    subscription_id: int
    stream: str
    offset_type: int
    offset: int
    credit: int
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    correlation_id: int
    subscription_id: int


@dataclass(frozen=True, slots=True)
class Credit:
    subscription_id: int
    credit: int


@dataclass(frozen=True, slots=True)
class StoreOffset:
    reference: str
    stream: str
    offset: int


@dataclass(frozen=True, slots=True)
class QueryOffset:
    correlation_id: int
    reference: str
    stream: str


@dataclass(frozen=True, slots=True)
class ConsumerUpdateAnswer:
    """The client's answer to the broker's consumer update: where the consumer starts."""

    correlation_id: int
    code: int
    offset_type: int
    offset: int


@dataclass(frozen=True, slots=True)
class StreamStats:
    correlation_id: int
    stream: str


@dataclass(frozen=True, slots=True)
class ExchangeCommandVersions:
    correlation_id: int
    versions: list[tuple[int, int, int]]


@dataclass(frozen=True, slots=True)
class Route:
    correlation_id: int
    routing_key: str
    super_stream: str


@dataclass(frozen=True, slots=True)
class Partitions:
    correlation_id: int
    super_stream: str


@dataclass(frozen=True, slots=True)
class CreateSuperStream:
    correlation_id: int
    name: str
    partitions: list[str]
    binding_keys: list[str]
    arguments: dict[str, str]


@dataclass(frozen=True, slots=True)
class DeleteSuperStream:
    correlation_id: int
    name: str


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A command this broker does not serve (super streams, stream stats...): answered with
    `Code.UNKNOWN_FRAME` when it has a correlation id (`correlation_id` None: none)."""

    key: int
    correlation_id: int | None


Command = (
    PeerProperties
    | SaslHandshake
    | SaslAuthenticate
    | Tune
    | Open
    | Close
    | CloseOk
    | Heartbeat
    | Create
    | Delete
    | Metadata
    | DeclarePublisher
    | DeletePublisher
    | QueryPublisherSequence
    | Publish
    | Subscribe
    | Unsubscribe
    | Credit
    | StoreOffset
    | QueryOffset
    | StreamStats
    | ConsumerUpdateAnswer
    | ExchangeCommandVersions
    | Route
    | Partitions
    | CreateSuperStream
    | DeleteSuperStream
    | Unsupported
)
