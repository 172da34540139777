"""The broker's fast constructors build the same immutable objects as the dataclasses do."""

from __future__ import annotations

import dataclasses

import pytest

from ringmq.amqp import spec
from ringmq.core.broker import _new_deliver, _new_send_content
from ringmq.core.effects import SendContent
from ringmq.core.message import Message


def test_fast_constructors_equal_the_dataclasses() -> None:
    deliver = _new_deliver("ctag", 7, True, "ex", "rk")
    assert deliver == spec.BasicDeliver("ctag", 7, True, "ex", "rk")
    assert deliver.encode() == spec.BasicDeliver("ctag", 7, True, "ex", "rk").encode()
    msg = Message("ex", "rk", b"\x00\x00", b"body")
    effect = _new_send_content(3, 2, deliver, msg)
    assert effect == SendContent(3, 2, deliver, msg)
    assert type(effect) is SendContent
    with pytest.raises(dataclasses.FrozenInstanceError):
        effect.channel = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        deliver.delivery_tag = 8  # type: ignore[misc]
