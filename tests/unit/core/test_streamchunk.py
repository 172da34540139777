"""Stream chunks kept as published (core/streamchunk.py) and single active consumer groups
(core/streamsac.py): a stored chunk is sent as it is, consecutive chunks of core messages are
gathered, a chunk decodes to its messages; a group's next member is active when the active
one leaves."""

from __future__ import annotations

import zlib
from pathlib import Path

import ringmq.adapters.amqp10.message  # noqa: F401 - registers the entry codec
from ringmq.core.message import Message
from ringmq.core.streamchunk import HEADER_SIZE, chunk_info, decode_chunk, gather, osiris_chunk
from ringmq.core.streamlog import MemoryStreamLog, StreamSpec
from ringmq.core.streamsac import ActiveGroups
from ringmq.storage.streamfiles import FileStreamLog

DATA = b"\x00\x53\x75\xa0\x02"  # an AMQP 1.0 message: one data section (vbin8, 2 bytes)


def _entry(body: bytes) -> bytes:
    msg = DATA[:4] + bytes([len(body)]) + body
    return len(msg).to_bytes(4, "big") + msg


def _section(body: bytes) -> bytes:
    return DATA[:4] + bytes([len(body)]) + body


def test_a_chunk_is_its_entries_behind_a_header_with_their_crc() -> None:
    data = _entry(b"ab") + _entry(b"cd")
    c = osiris_chunk(7, 1000, 2, 2, data)
    assert c[HEADER_SIZE:] == data
    assert chunk_info(c) == (7, 1000, 2, len(c))
    assert int.from_bytes(c[32:36], "big") == zlib.crc32(data)
    assert [(o, m.body) for o, m in decode_chunk(c, skip=1)] == [(8, _section(b"cd"))]


def test_stored_chunks_go_as_they_are_and_core_messages_are_gathered() -> None:
    log = MemoryStreamLog(StreamSpec())
    log.append_chunk(_entry(b"ab") + _entry(b"cd"), 2, 2, 1000)  # offsets 0-1
    for body in (b"p0", b"p1", b"p2"):  # offsets 2-4, one chunk each
        log.append([Message("", "s", b"\x00\x00", body)], 2000)  # no 0-9-1 properties
    log.append_chunk(_entry(b"ef"), 1, 1, 3000)  # offset 5
    got = log.read_chunks(0, 10)
    assert [(first, n) for first, n, _ in got] == [(0, 2), (2, 3), (5, 1)]
    assert got[0][2][HEADER_SIZE:] == _entry(b"ab") + _entry(b"cd")  # as stored
    # the 0-9-1 messages as AMQP 1.0 ones (a data section each)
    assert [m.body for _, m in decode_chunk(got[1][2])] == [_section(b"p%d" % i) for i in range(3)]
    assert [(o, m.body) for o, m in log.read(1, 2)] == [(1, _section(b"cd")), (2, b"p0")]
    # the credit bounds the chunks: one chunk, from the one holding the offset
    assert [(first, n) for first, n, _ in log.read_chunks(1, 1)] == [(0, 2)]
    assert gather([], 5) == []


def test_core_messages_are_gathered_only_within_one_timestamp() -> None:
    # a chunk has one timestamp, each of its messages' (clients report it; a reader starting
    # at it must find the message): messages stamped apart are not gathered under the first's
    log = MemoryStreamLog(StreamSpec())
    for ts, body in ((1000, b"p0"), (1000, b"p1"), (1001, b"p2"), (1002, b"p3"), (1002, b"p4")):
        log.append([Message("", "s", b"\x00\x00", body)], ts)
    got = log.read_chunks(0, 10)
    assert [(first, n, chunk_info(c)[1]) for first, n, c in got] == [
        (0, 2, 1000),
        (2, 1, 1001),
        (3, 2, 1002),
    ]


def test_a_stored_chunks_messages_are_routed_by_the_streams_name(tmp_path: Path) -> None:
    # RabbitMQ gives a message published over the stream protocol (no exchange, no routing
    # key of its own) the default exchange and the stream's name when another protocol reads it
    for log in (
        MemoryStreamLog(StreamSpec(), "orders"),
        FileStreamLog(tmp_path, StreamSpec(), "orders"),
    ):
        log.append_chunk(_entry(b"ab") + _entry(b"cd"), 2, 2, 1000)
        log.append([Message("amq.fanout", "", b"\x00\x00", b"p0")], 2000)  # its own kept
        got = [(o, m.exchange, m.routing_key) for o, m in log.read(0, 10)]
        assert got == [(0, "", "orders"), (1, "", "orders"), (2, "amq.fanout", "")]


def test_the_next_member_is_active_when_the_active_one_leaves() -> None:
    groups = ActiveGroups()
    key = ("/", "s", "g")
    assert groups.join(key, (1, 0))
    assert not groups.join(key, (2, 0))
    assert not groups.join(key, (3, 4))
    assert groups.leave(key, (2, 0)) is None  # a waiting one leaves: nothing changes
    assert groups.leave(key, (1, 0)) == (3, 4)
    assert groups.leave(key, (3, 4)) is None
    assert groups.members(key) == []
    assert groups.join(key, (5, 1))  # an empty group again: the first is active
