"""The stream protocol handler driven without a socket: rstream's frames in, rstream's decoder
on what comes out. Connecting (SASL PLAIN, the broker's Tune, Open advertising the address the
client reached), refusals by response code, credit in chunks, a deleted stream's update."""

from __future__ import annotations

from typing import Any

from rstream import OffsetType, schema
from rstream.encoding import decode_frame, encode_frame, encode_publish

from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer, make_login
from ringmq.adapters.stream import StreamHandler
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.core.throttle import LoginGuard
from ringmq.streamproto import FrameReader

NOW = 1_000_000


class Kit:
    def __init__(self, frame_max: int = 1 << 20) -> None:
        self.broker = Broker(BrokerConfig(name_seed=1))
        self.broker.defer_dispatch = True
        peer = Peer("127.0.0.1", 40001, "10.0.0.7", 5552)
        ctx = HandlerContext(
            broker=self.broker,
            conn_id=1,
            peer=peer,
            limits=HandlerLimits(1 << 20, frame_max, 2047, 60),
            login=make_login(self.broker, LoginGuard(), peer, "stream"),
        )
        self.h = StreamHandler(ctx)
        self.reader = FrameReader(1 << 24)

    def send(self, *frames: Any) -> list[Any]:
        wire = b"".join(
            encode_publish(f) if isinstance(f, schema.Publish) else encode_frame(f) for f in frames
        )
        self._apply(self.h.receive_data(wire, NOW))
        self._apply(self.broker.dispatch_pending(NOW))
        return self.received()

    def _apply(self, effects: list[Effect]) -> None:
        for e in effects:
            if getattr(e, "conn_id", None) == 1:
                self.h.apply(e)

    def received(self) -> list[Any]:
        self.reader.feed(self.h.data_to_send())
        out = []
        while (f := self.reader.next_frame()) is not None:
            key, version, content = f
            out.append(decode_frame(key.to_bytes(2, "big") + version.to_bytes(2, "big") + content))
        return out

    def connect(self, password: str = "guest") -> list[Any]:
        got = self.send(schema.PeerProperties(1, []), schema.SaslHandshake(2))
        assert got[1].mechanisms == ["PLAIN"]
        return self.send(schema.SaslAuthenticate(3, "PLAIN", b"\0guest\0" + password.encode()))


def test_connect_tune_and_open_advertise_the_address_the_client_reached() -> None:
    kit = Kit()
    auth, tune = kit.connect()
    assert auth.response_code == 1
    assert (tune.frame_max, tune.heartbeat) == (1 << 20, 60)
    (opened,) = kit.send(schema.Tune(1 << 20, 30), schema.Open(4, "/"))
    assert opened.response_code == 1
    props = {p.key: p.value for p in opened.properties}
    assert props == {"advertised_host": "10.0.0.7", "advertised_port": "5552"}
    (meta,) = kit.send(schema.Metadata(5, ["none"]))
    assert [(b.host, b.port) for b in meta.brokers] == [("10.0.0.7", 5552)]
    assert meta.metadata[0].response_code == 2  # stream does not exist


def test_a_wrong_password_is_an_authentication_failure_then_close() -> None:
    kit = Kit()
    got = kit.connect(password="nope")
    assert got[0].response_code == 8
    assert isinstance(got[1], schema.Close)
    assert kit.h.closed


def test_credit_is_in_chunks_and_a_deleted_stream_ends_its_subscription() -> None:
    kit = Kit()
    kit.connect()
    kit.send(schema.Tune(1 << 20, 0), schema.Open(4, "/"))
    (created,) = kit.send(schema.Create(5, "s", []))
    assert created.response_code == 1
    (again,) = kit.send(schema.Create(6, "s", []))
    assert again.response_code == 5  # already exists
    kit.send(schema.DeclarePublisher(7, 0, "", "s"))
    for i in range(3):  # three publish frames, three stored chunks
        got = kit.send(schema.Publish(0, [schema.Message(i + 1, None, b"\x00\x53\x77\xa1\x01x")]))
        assert [type(f) for f in got] == [schema.PublishConfirm]
    first = schema.OffsetSpec(OffsetType.FIRST)
    got = kit.send(schema.Subscribe(8, 1, "s", first, 1, []))
    assert got[0].response_code == 1
    delivered = [f for f in got[1:] if isinstance(f, schema.Deliver)]
    # one chunk of credit: one stored chunk (the first publish frame's)
    assert [(d.chunk_first_offset, d.num_entries) for d in delivered] == [(0, 1)]
    got = kit.send(schema.Publish(0, [schema.Message(9, None, b"\x00\x53\x77\xa1\x01y")]))
    assert not [f for f in got if isinstance(f, schema.Deliver)]  # no credit left
    got = kit.send(schema.Credit(1, 3))  # three more: the three other chunks, as stored
    assert [(d.chunk_first_offset, d.num_entries) for d in got] == [(1, 1), (2, 1), (3, 1)]
    (deleted, *rest) = kit.send(schema.Delete(10, "s"))
    updates = [f for f in [deleted, *rest] if isinstance(f, schema.MetadataUpdate)]
    assert [(u.metadata_info.code, u.metadata_info.stream) for u in updates] == [(6, "s")]


def test_the_publish_frames_of_one_read_are_one_chunk_and_duplicates_are_left_out() -> None:
    kit = Kit()
    kit.connect()
    kit.send(schema.Tune(1 << 20, 0), schema.Open(4, "/"))
    kit.send(schema.Create(5, "s", []))
    kit.send(schema.DeclarePublisher(7, 0, "ref", "s"))

    def frame(*ids: int) -> schema.Publish:
        return schema.Publish(0, [schema.Message(i, None, b"\x00\x53\x77\xa1\x01x") for i in ids])

    # three frames in one read (a pipelining client): one chunk, one confirm of them all
    got = kit.send(frame(1, 2), frame(3), frame(4, 5))
    assert [(type(f), f.publishing_ids) for f in got] == [(schema.PublishConfirm, [1, 2, 3, 4, 5])]
    # again, with publishing ids already stored: those are confirmed, not stored again
    got = kit.send(frame(4, 5), frame(6))
    assert sorted(i for f in got for i in f.publishing_ids) == [4, 5, 6]
    # and the same ids twice in one read: the second frame's are duplicates of the first's
    got = kit.send(frame(7, 8), frame(7, 8))
    assert sorted(i for f in got for i in f.publishing_ids) == [7, 7, 8, 8]
    got = kit.send(schema.Subscribe(8, 1, "s", schema.OffsetSpec(OffsetType.FIRST), 5, []))
    delivered = [f for f in got[1:] if isinstance(f, schema.Deliver)]
    assert [(d.chunk_first_offset, d.num_entries) for d in delivered] == [(0, 5), (5, 1), (6, 2)]


def test_a_chunk_of_several_frames_stays_within_one_frame() -> None:
    # a consumer with the same frame max must be able to take every chunk
    kit = Kit(frame_max=4096)
    kit.connect()
    kit.send(schema.Tune(4096, 0), schema.Open(4, "/"))
    kit.send(schema.Create(5, "s", []))
    kit.send(schema.DeclarePublisher(7, 0, "", "s"))
    body = b"\x00\x53\x75\xb0" + (1000).to_bytes(4, "big") + b"x" * 1000
    frames = [schema.Publish(0, [schema.Message(3 * f + i, None, body) for i in range(3)])
              for f in range(4)]  # fmt: skip
    got = kit.send(*frames)
    assert sorted(i for f in got for i in f.publishing_ids) == list(range(12))
    got = kit.send(schema.Subscribe(8, 1, "s", schema.OffsetSpec(OffsetType.FIRST), 20, []))
    delivered = [f for f in got[1:] if isinstance(f, schema.Deliver)]
    assert sum(d.num_entries for d in delivered) == 12
    assert 1 < len(delivered) < 12
    assert all(d.num_entries >= 3 for d in delivered)  # at least a frame's worth each
