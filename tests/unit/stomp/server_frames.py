"""Server frames out of bytes, as a STOMP client reads them (no tests of its own)."""

from __future__ import annotations

from dataclasses import dataclass

from ringmq.stomp import V1_2, unescape


@dataclass
class Out:
    command: str
    headers: dict[str, str]
    body: bytes


def parse_server(data: bytes, version: str = V1_2) -> list[Out]:
    """Server frames out of bytes (heart-beat EOLs skipped)."""
    out: list[Out] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 1] == b"\n":
            pos += 1
            continue
        head_end = data.index(b"\n\n", pos)
        lines = data[pos:head_end].decode().split("\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if lines[0] != "CONNECTED":
                k, v = unescape(k, version), unescape(v, version)
            headers.setdefault(k, v)
        start = head_end + 2
        if "content-length" in headers:
            end = start + int(headers["content-length"])
        else:
            end = data.index(b"\x00", start)
        out.append(Out(lines[0], headers, data[start:end]))
        pos = end + 1
    return out
