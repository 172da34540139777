"""Effects are plain values: each kind survives a pickle round trip whole and equal, and
holds no callable and no engine object (session, queue, consumer, broker), so a list of
effects can be sent to another process (issue 26, item 4: the multi-core step)."""

from __future__ import annotations

import dataclasses
import pickle
import typing
from typing import Any

import pytest

from ringmq.core import effects
from ringmq.core.errors import Condition
from ringmq.core.message import Message

_MSG = Message(exchange="x", routing_key="k", properties_bin=b"\x00\x00", body=b"hello")

# One value of every kind, each field set to something other than its default.
SAMPLES: list[Any] = [
    effects.Reply(7, 1, ("queue-declare-ok", "q", 0, 0)),
    effects.ReplyContent(7, 1, ("get-ok", 3), _MSG),
    effects.Deliver(7, 1, "ctag", 5, True, _MSG),
    effects.DeliverReply(7, 1, "amq.rabbitmq.reply-to", 2, "amq.rabbitmq.reply-to.t", _MSG),
    effects.Bounce(7, 1, "NO_ROUTE", _MSG),
    effects.Confirm(7, 1, 9, True, False, "overflow"),
    effects.CancelConsumer(7, 1, "ctag"),
    effects.Drained(7, 1, "ctag", 3),
    effects.CloseConnection(7, Condition.CONNECTION_FORCED, "bye"),
    effects.CloseChannel(7, 1, "ctag", Condition.PRECONDITION_FAILED, "timed out"),
    effects.Block(7, "memory"),
    effects.Unblock(7),
    effects.ActivateConsumer(7, 3),
    effects.DefinitionAnswered(7, 1, 4, Condition.PRECONDITION_FAILED, "inequivalent"),
]

_PLAIN = (int, str, bytes, bool, float, type(None), Condition, Message, tuple)


def test_every_effect_kind_has_a_sample() -> None:
    kinds = set(typing.get_args(effects.Effect))
    assert {type(s) for s in SAMPLES} == kinds


@pytest.mark.parametrize("effect", SAMPLES, ids=lambda e: type(e).__name__)
def test_effect_round_trips_through_pickle(effect: Any) -> None:
    back = pickle.loads(pickle.dumps(effect))
    assert type(back) is type(effect)
    for f in dataclasses.fields(effect):
        mine, theirs = getattr(effect, f.name), getattr(back, f.name)
        if isinstance(mine, Message):
            assert (theirs.exchange, theirs.routing_key, theirs.body) == ("x", "k", b"hello")
            assert theirs.properties_bin == mine.properties_bin
        else:
            assert theirs == mine


@pytest.mark.parametrize("kind", typing.get_args(effects.Effect), ids=lambda k: k.__name__)
def test_effect_fields_are_plain(kind: type) -> None:
    hints = typing.get_type_hints(kind)
    for f in dataclasses.fields(kind):
        hint = hints[f.name]
        if hint is Any:  # an adapter's own frame value, which the core never reads
            assert kind in (effects.Reply, effects.ReplyContent)
            continue
        for t in typing.get_args(hint) or (hint,):
            assert isinstance(t, type), (kind, f.name, t)
            assert issubclass(t, _PLAIN), (kind, f.name, t)
