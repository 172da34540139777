"""tests/ports.py: named-in-advance ports lie outside what the kernel lends to bind(0)."""

from __future__ import annotations

import socket

import pytest

from tests import ports


def test_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    bottom, top = ports._range()
    given = [*ports.free_ports(20), ports.free_port()]
    assert len(set(given)) == 21
    for port in given:
        assert bottom <= port <= top
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    # the kernel's own choices never land there
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            assert s.getsockname()[1] not in given


def test_a_held_port_is_skipped_and_none_is_given_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    bottom, _ = ports._range()
    trio = [p for p in range(bottom + 500, bottom + 600) if ports._bindable(p)][:3]
    monkeypatch.setattr(ports, "_range", lambda: (trio[0], trio[0] + 2))
    monkeypatch.setattr(ports, "_given", set())
    if trio != [trio[0], trio[0] + 1, trio[0] + 2]:
        pytest.skip("no three consecutive free ports to test with")
    with socket.socket() as held:
        held.bind(("127.0.0.1", trio[1]))
        held.listen(1)
        assert sorted(ports.free_ports(2)) == [trio[0], trio[2]]
    assert ports.free_ports(1) == [trio[1]]
    with pytest.raises(RuntimeError, match="no 1 free ports"):
        ports.free_port()
