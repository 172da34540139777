"""Whatever a client sends, the handler answers in MQTT's terms and never raises: random
bytes, and random sequences of well-formed packets, on a connected session."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.mqtt import V5, V311, Packet, encode
from tests.unit.adapters.mqtt.kit import Net
from tests.unit.mqtt.test_codec import packets


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([V311, V5]), st.binary(max_size=200))
def test_random_bytes_after_connect(version: int, data: bytes) -> None:
    net = Net()
    c, _ = net.connect("fuzz", version)
    c.send(data)
    c.lose()


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([V311, V5]).flatmap(
        lambda v: st.tuples(st.just(v), st.lists(packets(v), max_size=8))
    )
)
def test_random_packets_after_connect(case: tuple[int, list[Packet]]) -> None:
    version, batch = case
    net = Net()
    watcher, _ = net.connect("watcher", version)
    c, _ = net.connect("fuzz", version, clean=False)
    for p in batch:
        c.send(encode(p, version))
        net.tick(1000)
    c.lose()
    again, ack = net.connect("fuzz", version, clean=False)
    assert ack.reason_code == 0
    again.lose()
    watcher.lose()
