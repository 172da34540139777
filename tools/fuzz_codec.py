"""Coverage-guided fuzzing of the codec and the server connection with atheris (libFuzzer).

Not part of the test suite. Each input is split into chunks and fed to a ``ServerConnection``
(after a valid handshake half the time) and to the standalone decoders; anything but events or
``AMQPError`` is a crash. Internal errors (reply code 541) are crashes too.

Run (bounded)::

    .venv/bin/uv pip install --python .venv/bin/python atheris
    .venv/bin/python tools/fuzz_codec.py -runs=200000 -max_total_time=120 -max_len=2048

libFuzzer options go straight through (``-runs``, ``-max_total_time``, a corpus directory...).
"""

from __future__ import annotations

import sys

import atheris  # type: ignore[import-untyped]

with atheris.instrument_imports():
    from ringmq.amqp import spec
    from ringmq.amqp.frames import PROTOCOL_HEADER, FrameReader, encode_method_frame
    from ringmq.amqp.properties import decode_properties
    from ringmq.amqp.reply_codes import AMQPError, ReplyCode
    from ringmq.amqp.tables import decode_table
    from ringmq.protocol import ServerConnection
    from ringmq.protocol.events import LoginRequested, OpenRequested, ProtocolError

HANDSHAKE = (
    PROTOCOL_HEADER
    + encode_method_frame(
        0,
        spec.ConnectionStartOk(
            {"capabilities": {"connection.blocked": True}}, "PLAIN", b"\0u\0p", "en_US"
        ),
    )
    + encode_method_frame(0, spec.ConnectionTuneOk(2047, 4096, 60))
    + encode_method_frame(0, spec.ConnectionOpen("/"))
    + encode_method_frame(1, spec.ChannelOpen())
)


def _decoders(data: bytes) -> None:
    for fn in (spec.decode_method, decode_properties):
        try:
            fn(data)
        except AMQPError:
            pass
    try:
        decode_table(data, 0)
    except AMQPError:
        pass
    reader = FrameReader(4096)
    reader.feed(data)
    try:
        for _ in range(len(data)):
            if reader.next_frame() is None:
                break
    except AMQPError:
        pass


def _connection(prefix: bytes, chunks: list[bytes]) -> None:
    conn = ServerConnection()
    pending = conn.receive_data(prefix)
    for chunk in [b"", *chunks]:
        pending += conn.receive_data(chunk)
        for _ in range(8):
            if not pending:
                break
            event = pending.pop(0)
            if isinstance(event, ProtocolError) and event.reply_code == ReplyCode.INTERNAL_ERROR:
                raise RuntimeError(f"internal error: {event}")
            if isinstance(event, LoginRequested) and conn.state.value == "authenticating":
                pending += conn.accept_login()
            elif isinstance(event, OpenRequested) and conn.state.value == "opening":
                pending += conn.accept_open()
        conn.data_to_send()


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    with_handshake = fdp.ConsumeBool()
    cuts = sorted(fdp.ConsumeIntInRange(0, 64) for _ in range(fdp.ConsumeIntInRange(0, 4)))
    rest = fdp.ConsumeBytes(fdp.remaining_bytes())
    _decoders(rest)
    chunks, prev = [], 0
    for cut in cuts:
        chunks.append(rest[prev:cut])
        prev = max(prev, cut)
    chunks.append(rest[prev:])
    _connection(HANDSHAKE if with_handshake else b"", chunks)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
