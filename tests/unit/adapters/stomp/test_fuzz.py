"""Random frame sequences against the STOMP adapter: every frame is served or answered by an
ERROR on its connection; nothing escapes as an exception, and the broker stays consistent."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ringmq.stomp import encode
from tests.unit.adapters.stomp.kit import Kit

DESTINATIONS = [
    "/queue/a",
    "/queue/b",
    "/amq/queue/a",
    "/amq/queue/none",
    "/topic/x.y",
    "/topic/#",
    "/exchange/amq.direct/k",
    "/exchange/nope/k",
    "/temp-queue/t",
    "/reply-queue/zzz",
    "/bogus/x",
    "a",
    "queue://a",
    "topic://t",
    "",
]
VALUES = {
    "destination": st.sampled_from(DESTINATIONS),
    "id": st.sampled_from(["1", "2", "s"]),
    "ack": st.sampled_from(["auto", "client", "client-individual", "bogus"]),
    "transaction": st.sampled_from(["t1", "t2"]),
    "receipt": st.sampled_from(["r1", "r2"]),
    "message-id": st.sampled_from(["2-1", "3-1", "2-2", "x", "9-9-9", "\u00b2-1"]),
    "subscription": st.sampled_from(["1", "2"]),
    "x-max-length": st.sampled_from(["1", "2", "-1", "x"]),
    "x-ring-size": st.sampled_from(["2", "0"]),
    "prefetch-count": st.sampled_from(["0", "1", "x", "\u00b2"]),
    "durable": st.sampled_from(["true", "false"]),
    "requeue": st.sampled_from(["true", "false"]),
    "persistent": st.sampled_from(["true", "false"]),
    "priority": st.sampled_from(["1", "300", "x"]),
    "expires": st.sampled_from(["0", "1", "x"]),
    "AMQ_SCHEDULED_DELAY": st.sampled_from(["0", "10", "x"]),
    "reply-to": st.sampled_from(["/temp-queue/t", "/queue/a"]),
    "subscription-type": st.sampled_from(["ANYCAST", "MULTICAST", "OTHER"]),
    "durable-subscription-name": st.sampled_from(["d"]),
}
COMMANDS = ["SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT"]

frames = st.lists(
    st.tuples(
        st.sampled_from(COMMANDS),
        st.lists(st.sampled_from(sorted(VALUES)), max_size=5, unique=True).flatmap(
            lambda names: st.fixed_dictionaries({n: VALUES[n] for n in names})
        ),
        st.sampled_from([b"", b"x", b"a\x00b"]),
    ),
    max_size=12,
)


@given(version=st.sampled_from(["1.0", "1.1", "1.2"]), script=frames)
def test_random_frames_are_served_or_refused(
    version: str, script: list[tuple[str, dict[str, str], bytes]]
) -> None:
    kit = Kit()
    h = kit.connect(version, client_id="c")
    other = kit.connect()
    for command, headers, body in script:
        if body:
            headers = {**headers, "content-length": str(len(body))}
        kit.feed(h, encode(command, headers, body, version))
        kit.tick(20)
        out = kit.read(h)
        if any(f.command == "ERROR" for f in out):
            assert h.closed
            break
        assert not h.closed
    kit.lose(h)
    assert h.conn_id not in kit.broker.conns
    # the other connection is untouched and the broker still serves it
    kit.frame(other, "SUBSCRIBE", destination="/queue/check", id="c")
    kit.read(other)
    (m,) = kit.frame(other, "SEND", b"ok", destination="/queue/check")
    assert m.body == b"ok"
