"""The publishing side of one stream-protocol connection: publishers, publishes, confirms.

Theory of operation
-------------------
`Publishing` belongs to one `StreamHandler` and runs inside its core calls. A declared
publisher has an id, a stream and maybe a reference. Publish frames come in runs: the
publish frames a read brought, in order (`publish`), handled in one core call.

* A run of frames of one publisher whose messages are simple entries is appended to the
  stream as one chunk, the entries as they arrived (`Publisher.publish_chunk`,
  core/streamchunk.py), with one core confirm for the run: a client pipelining frames of 100
  messages gets chunks of the frames that arrived together, as Osiris' writer makes one chunk
  of what reached it meanwhile. A chunk is never larger than one frame of this connection
  could carry (`chunk_max`: a consumer's frame max is the same as a publisher's by default)
  and never holds more than the header's u16 entry count.
* A frame with sub-entry batches is published message by message to the default exchange
  under the stream's name.

Either way the publishing ids wait for the core's confirm (`confirming`: publish seq ->
publisher, publishing ids), answered as PublishConfirm / PublishError. With a reference, a
publishing id not above the last one the stream stored for it (`Tracking.writers`) is a
duplicate: confirmed, not stored (RabbitMQ's de-duplication).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ringmq.adapters.amqp10.message import build
from ringmq.adapters.stream.replies import confirm_frame, wrapped
from ringmq.core.broker import Broker
from ringmq.core.effects import Confirm
from ringmq.core.entities import QueueEntity
from ringmq.core.session import Session
from ringmq.core.streamchunk import HEADER_SIZE
from ringmq.streamproto import codec as sp
from ringmq.streamproto import commands as sc
from ringmq.streamproto.codec import Code, Key, Writer

__all__ = ["MAX_ENTRIES", "Publisher", "Publishing"]

MAX_ENTRIES: Final = 0xFFFF
"""Most entries in one chunk (the header's entry count is a u16)."""
_DELIVER_HEAD: Final = 32
"""More than a Deliver frame adds before a chunk (frame header, subscription, chunk's offset)."""


@dataclass(slots=True)
class Publisher:
    stream: str
    reference: str


class Publishing:
    """One connection's publishers (see the module docstring).

    Args:
        broker: the core.
        send: queues a frame for the client.
        stream: the stream queue of a name in the connection's vhost (None: not one).
        chunk_max: the most bytes of one chunk (the connection's frame max).
    """

    def __init__(
        self,
        broker: Broker,
        send: Callable[[bytes], None],
        stream: Callable[[str], QueueEntity | None],
        chunk_max: int,
    ) -> None:
        self.broker = broker
        self._send = send
        self._stream = stream
        self.chunk_data_max = max(1, chunk_max - HEADER_SIZE - _DELIVER_HEAD)
        self.publishers: dict[int, Publisher] = {}
        self.confirming: dict[int, tuple[int, list[int]]] = {}
        """Publish seq -> (publisher id, publishing ids), waiting for the core's confirm."""

    def declare(self, cmd: sc.DeclarePublisher, s: Session) -> None:
        corr = cmd.correlation_id
        if self._stream(cmd.stream) is None:
            code = Code.STREAM_DOES_NOT_EXIST
        elif cmd.publisher_id in self.publishers:
            code = Code.PRECONDITION_FAILED
        else:
            self.broker.publisher.exchange_for(s, "")  # write permission on the default
            self.publishers[cmd.publisher_id] = Publisher(cmd.stream, cmd.reference)
            code = Code.OK
        self._send(sp.simple_response(Key.DECLARE_PUBLISHER, corr, code))

    def delete(self, cmd: sc.DeletePublisher) -> None:
        gone = self.publishers.pop(cmd.publisher_id, None)
        code = Code.OK if gone is not None else Code.PUBLISHER_DOES_NOT_EXIST
        self._send(sp.simple_response(Key.DELETE_PUBLISHER, cmd.correlation_id, code))

    def publish(self, cmds: list[sc.Publish], s: Session, now_ms: int) -> None:
        """A read's publish frames, in order: runs of one publisher's simple entries as
        chunks, the others frame by frame."""
        run: list[sc.Publish] = []
        for cmd in cmds:
            if cmd.entries and not cmd.refused:
                if run and run[0].publisher_id != cmd.publisher_id:
                    self._publish_run(run, s, now_ms)
                    run = []
                run.append(cmd)
                continue
            if run:
                self._publish_run(run, s, now_ms)
                run = []
            self._publish_messages(cmd, s, now_ms)
        if run:
            self._publish_run(run, s, now_ms)

    def _target(
        self, pid: int, cmds: list[sc.Publish], s: Session
    ) -> tuple[Publisher, QueueEntity] | None:
        # The publisher and its stream, or None once the client is told why not.
        pub = self.publishers.get(pid)
        if pub is None:
            self._errors(pid, [i for c in cmds for i in c.ids], Code.PUBLISHER_DOES_NOT_EXIST)
            return None
        q = self._stream(pub.stream)
        if q is None or q.stream is None:
            self._errors(pid, [i for c in cmds for i in c.ids], Code.STREAM_DOES_NOT_EXIST)
            return None
        self.broker.publisher.exchange_for(s, "")
        return pub, q

    def _publish_run(self, run: list[sc.Publish], s: Session, now_ms: int) -> None:
        # Frames of simple entries of one publisher (duplicates left out) as they arrived:
        # as few chunks as `chunk_data_max` and `MAX_ENTRIES` allow.
        pid = run[0].publisher_id
        got = self._target(pid, run, s)
        if got is None:
            return
        pub, q = got
        log = q.stream
        assert log is not None
        ref = pub.reference
        last = log.tracking.writers.get(ref, -1) if ref else -1
        publish_chunk = self.broker.publisher.publish_chunk
        limit = self.chunk_data_max
        ids: list[int] = []
        parts: list[memoryview] = []
        dups: list[int] = []
        size = 0

        def cut() -> None:
            nonlocal size, ids, parts
            seq = publish_chunk(s, q, b"".join(parts), len(parts), len(parts), now_ms)
            if seq:
                self.confirming[seq] = (pid, ids)
            if ref:
                log.tracking.set_writer(ref, ids[-1])
            ids, parts, size = [], [], 0

        # frame by frame (list operations, no per-message statement): a frame's entries
        # join the chunk whole, unless they would take it past the limits
        for cmd in run:
            frame_ids, entries = cmd.ids, cmd.entries
            # the entries' bytes: the content less the publisher id, count and publishing ids
            # (at most that: a v2 frame's filter values are counted too)
            nbytes = len(cmd.content) - 5 - 8 * len(frame_ids)
            if last >= 0 and min(frame_ids) <= last:
                dups += [i for i in frame_ids if i <= last]
                keep = [n for n, i in enumerate(frame_ids) if i > last]
                frame_ids = [frame_ids[n] for n in keep]
                entries = [entries[n] for n in keep]
                if not frame_ids:
                    continue
            if ref:  # the next frame's duplicates of these too (the tracking is set at a cut)
                last = max(last, max(frame_ids))
            if parts and (size + nbytes > limit or len(parts) + len(frame_ids) > MAX_ENTRIES):
                cut()
            for at in range(0, len(frame_ids), MAX_ENTRIES):  # once, but for tiny messages
                if at:
                    cut()
                ids += frame_ids[at : at + MAX_ENTRIES]
                parts += entries[at : at + MAX_ENTRIES]
                size += nbytes
        if parts:
            cut()
        if dups:
            self._send(confirm_frame(pid, dups))

    def _publish_messages(self, cmd: sc.Publish, s: Session, now_ms: int) -> None:
        # A frame with sub-entry batches: message by message through the default exchange.
        pid = cmd.publisher_id
        if cmd.refused:
            if pid in self.publishers:
                self._errors(pid, cmd.refused, Code.PRECONDITION_FAILED)
            else:
                self._errors(pid, cmd.ids + cmd.refused,
                             Code.PUBLISHER_DOES_NOT_EXIST)  # fmt: skip
                return
        got = self._target(pid, [cmd], s)
        if got is None:
            return
        pub, q = got
        log = q.stream
        assert log is not None
        b = self.broker
        vh, x = b.publisher.exchange_for(s, "")
        tracking = log.tracking
        ref = pub.reference
        last = tracking.writers.get(ref, -1) if ref else -1
        messages = cmd.messages()
        dups = [i for i, _ in messages if i <= last] if ref else []
        for pub_id, data in messages:
            if pub_id <= last:
                continue
            try:
                msg = build(data, exchange="", routing_key=pub.stream, now_ms=now_ms)
            except ValueError:
                msg = build(wrapped(data), exchange="", routing_key=pub.stream, now_ms=now_ms)
            b.publisher.publish(msg, session=s, vhost=vh, exchange=x, now_ms=now_ms)
            self.confirming[s.publish_seq] = (pid, [pub_id])
            if ref:
                tracking.set_writer(ref, pub_id)
        if dups:
            self._send(confirm_frame(pid, dups))

    def _errors(self, pid: int, ids: list[int], code: Code) -> None:
        if ids:
            w = Writer().u8(pid).count(len(ids))
            for i in ids:
                w.u64(i).u16(code)
            self._send(w.frame(Key.PUBLISH_ERROR))

    def confirmed(self, c: Confirm) -> None:
        """One confirm (or refusal) of publish `seq`, or of every one up to it (`multiple`)."""
        settled: dict[int, list[int]] = {}
        waiting = self.confirming
        if c.multiple:
            while waiting:
                seq = next(iter(waiting))
                if seq > c.seq:
                    break
                pid, ids = waiting.pop(seq)
                settled.setdefault(pid, []).extend(ids)
        elif c.seq in waiting:
            pid, ids = waiting.pop(c.seq)
            settled[pid] = ids
        for pid, ids in settled.items():
            if c.ok:
                self._send(confirm_frame(pid, ids))
            else:
                self._errors(pid, ids, Code.INTERNAL_ERROR)
