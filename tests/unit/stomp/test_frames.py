"""The STOMP frame codec: round trips, escaping per version, bodies with NULs, limits, and
every stream fed whole, byte by byte and with trailing bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.stomp import (
    V1_0,
    V1_1,
    V1_2,
    Frame,
    FrameError,
    FrameLimits,
    FrameReader,
    encode,
    escape,
    unescape,
)


def read_all(data: bytes, *, version: str = V1_2, chunk: int = 0, **limits: int) -> list[Frame]:
    reader = FrameReader(FrameLimits(**limits), version=version)
    out: list[Frame] = []
    pieces = [data] if not chunk else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        reader.feed(piece)
        while (f := reader.next_frame()) is not None:
            out.append(f)
    return out


header_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12
)


@given(
    headers=st.dictionaries(header_text.filter(bool), header_text, max_size=5),
    body=st.binary(max_size=40),
    version=st.sampled_from([V1_1, V1_2]),
)
def test_round_trip_with_content_length(headers: dict[str, str], body: bytes, version: str) -> None:
    hdrs = {k: v for k, v in headers.items() if k != "content-length"}
    if version == V1_1:  # 1.1 has no escape for CR
        hdrs = {k.replace("\r", ""): v.replace("\r", "") for k, v in hdrs.items()}
        hdrs = {k: v for k, v in hdrs.items() if k and k != "content-length"}
    wire = encode("SEND", [*hdrs.items(), ("content-length", str(len(body)))], body, version)
    for chunk in (0, 1, 7):
        frames = read_all(wire + b"\n\r\n" + wire, version=version, chunk=chunk)
        assert len(frames) == 2
        for f in frames:
            assert f.command == "SEND"
            assert f.body == body
            assert {k: v for k, v in f.headers.items() if k != "content-length"} == hdrs


def test_body_without_content_length_ends_at_the_first_nul() -> None:
    frames = read_all(b"SEND\ndestination:/queue/a\n\nhello\x00\n\nSEND\ndestination:b\n\n\x00")
    assert [(f.headers["destination"], f.body) for f in frames] == [
        ("/queue/a", b"hello"),
        ("b", b""),
    ]


def test_content_length_carries_nul_bytes() -> None:
    body = b"a\x00b\x00\x00c"
    wire = b"SEND\ndestination:q\ncontent-length:6\n\n" + body + b"\x00"
    assert read_all(wire, chunk=1)[0].body == body


def test_crlf_lines_are_accepted() -> None:
    f = read_all(b"SEND\r\ndestination:q\r\nx:y\r\n\r\nbody\x00")[0]
    assert f.headers == {"destination": "q", "x": "y"}
    assert f.body == b"body"


def test_repeated_header_first_wins() -> None:
    f = read_all(b"SEND\ndestination:a\ndestination:b\n\n\x00")[0]
    assert f.headers["destination"] == "a"


@pytest.mark.parametrize(
    ("raw", "version", "value"),
    [
        ("a\\cb\\nc\\\\d", V1_1, "a:b\nc\\d"),
        ("a\\rb", V1_2, "a\rb"),
        ("a\\cb", V1_0, "a\\cb"),  # 1.0 has no escapes
    ],
)
def test_unescape_per_version(raw: str, version: str, value: str) -> None:
    assert unescape(raw, version) == value


@pytest.mark.parametrize(("raw", "version"), [("a\\rb", V1_1), ("a\\tb", V1_2), ("a\\", V1_2)])
def test_undefined_escape_is_a_frame_error(raw: str, version: str) -> None:
    with pytest.raises(FrameError):
        unescape(raw, version)


def test_connect_headers_are_not_unescaped() -> None:
    f = read_all(b"CONNECT\nlogin:a\\cb\n\n\x00", version=V1_2)[0]
    assert f.headers["login"] == "a\\cb"


def test_escape_round_trips() -> None:
    text = "a:b\nc\\d\re"
    assert unescape(escape(text, V1_2), V1_2) == text
    assert escape("a\nb", V1_0) == "a b"
    assert encode("CONNECTED", {"k": "a:b"}, b"", V1_2) == b"CONNECTED\nk:a:b\n\n\x00"


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"FOO\n\n\x00", "unknown command"),
        (b"MESSAGE\n\n\x00", "unexpected command"),
        (b"SEND\nno-colon\n\n\x00", "malformed header"),
        (b"SEND\ncontent-length:x\n\n\x00", "invalid content-length"),
        (b"SEND\ncontent-length:2\n\nabc\x00", "malformed frame"),
        (b"SEND\ncontent-length:99999999\n\n", "frame too large"),
        (b"\xff\xfe\n\n\x00", "malformed frame"),
        (b"\rX", "malformed frame"),
    ],
)
def test_bad_frames(wire: bytes, message: str) -> None:
    with pytest.raises(FrameError) as exc:
        read_all(wire, max_body=1000)
    assert exc.value.message == message


def test_limits_refuse_before_buffering_everything() -> None:
    with pytest.raises(FrameError, match="frame too large"):
        read_all(b"SEND\n\n" + b"x" * 200, max_body=100)
    with pytest.raises(FrameError, match="header too long"):
        read_all(b"SEND\nk:" + b"v" * 300, max_header_bytes=100)
    with pytest.raises(FrameError, match="too many headers"):
        read_all(b"SEND\n" + b"a:b\n" * 5 + b"\n\x00", max_headers=3)


def test_partial_frames_need_more_and_compact() -> None:
    reader = FrameReader()
    reader.feed(b"SEND\ndestination:q\n\nab")
    assert reader.next_frame() is None
    reader.feed(b"c\x00\n")
    f = reader.next_frame()
    assert f is not None
    assert f.body == b"abc"
    assert reader.next_frame() is None
    reader.compact()
    assert reader.buffered == 0


@given(st.binary(max_size=200))
def test_random_bytes_yield_frames_or_frame_errors(data: bytes) -> None:
    try:
        read_all(data, chunk=3, max_body=64, max_header_bytes=64, max_headers=4)
    except FrameError:
        pass


@given(
    headers=st.dictionaries(header_text.filter(bool), header_text, max_size=5),
    body=st.binary(max_size=30),
)
def test_stomp_py_reads_what_we_write(headers: dict[str, str], body: bytes) -> None:
    # stomp.py's frame parser as an oracle for 1.2 escaping and content-length bodies
    stomp_utils = pytest.importorskip("stomp.utils")
    hdrs = {k: v for k, v in headers.items() if k != "content-length"}
    hdrs["content-length"] = str(len(body))
    wire = encode("MESSAGE", hdrs, body, V1_2)
    parsed = stomp_utils.parse_frame(wire[:-1])
    assert parsed.cmd == "MESSAGE"
    assert parsed.headers == hdrs
    assert parsed.body == body
