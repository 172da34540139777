"""The call protocol (`core/call.py`): one dispatch rule, safe nesting, and nobody outside
`core/` touching the call fields of `State`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Deliver, Effect, Reply
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchange import Exchange
from ringmq.core.message import Message
from ringmq.core.session import Session
from ringmq.core.vhost import VHost
from tests.unit.core.corekit import Core

SRC = Path(__file__).resolve().parents[3] / "src" / "ringmq"
FIRST, SECOND = "first reply", "second reply"
"""An adapter's reply frames, opaque to the core (`Reply.frame`)."""
CALL_FIELDS = frozenset({"out", "now_ms", "calling", "dirty", "eager", "defer_dispatch"})
"""The fields of `State` that only the core touches (`Calls` and the owners)."""


# ---------------------------------------------------------------------- the guard
def _state_names(tree: ast.AST) -> set[str]:
    # Names bound to a broker's `State`: assigned from `<anything>.state`, or annotated `State`
    # where the module imports `ringmq.core.state`.
    core_state = any(
        isinstance(n, ast.ImportFrom) and n.module == "ringmq.core.state" for n in ast.walk(tree)
    )
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr == "state":
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        if core_state and isinstance(node, ast.AnnAssign | ast.arg):
            ann = node.annotation
            if ann is not None and "State" in ast.unparse(ann):
                target = node.target if isinstance(node, ast.AnnAssign) else node
                if isinstance(target, ast.Name):
                    names.add(target.id)
                elif isinstance(target, ast.arg):
                    names.add(target.arg)
    return names


def call_field_uses(source: str) -> list[str]:
    """`X.state.<field>` and `<name bound to a State>.<field>` in `source`, as text."""
    tree = ast.parse(source)
    names = _state_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in CALL_FIELDS:
            continue
        base = node.value
        if (isinstance(base, ast.Attribute) and base.attr == "state") or (
            isinstance(base, ast.Name) and base.id in names
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def outside_core_uses(root: Path) -> list[str]:
    """Every use of a call field of `State` in the modules under `root` outside `core/`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] == "core":
            continue
        found += [f"{rel}:{u}" for u in call_field_uses(path.read_text(encoding="utf-8"))]
    return found


def test_nothing_outside_the_core_touches_the_call_fields_of_state() -> None:
    assert outside_core_uses(SRC) == []


@pytest.mark.parametrize(
    "source",
    [
        "b.state.out.append(x)",
        "self.broker.state.dirty",
        "broker.state.eager = False",
        "state = self.broker.state\nif state.dirty and state.defer_dispatch: pass",
        "st = broker.state\nst.out = []",
        "def f(s: State) -> None:\n    s.now_ms = 1\nfrom ringmq.core.state import State",
    ],
)
def test_the_guard_sees_a_use(source: str) -> None:
    assert call_field_uses(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "self.dirty.add(c)",  # the server's own set of connections
        "conns.dirty.discard(c)",
        "broker.defer_dispatch = True",  # the broker's switch for the server
        "ev.state.outcome",
        "request.state.principal",
        "out = broker.calls.begin(0)\nbroker.calls.end(publish=True)",
        "def f(s: State) -> None:\n    s.out = 1",  # some other State (the module imports none)
    ],
)
def test_the_guard_leaves_other_names_alone(source: str) -> None:
    assert call_field_uses(source) == []


# ---------------------------------------------------------------------- the rule
def _consumed_queue() -> tuple[Core, Session]:
    # A plain queue "q" with a consumer on a channel of its own; returns the publisher's.
    k = Core()
    sub = k.open()
    k.declare(sub, "q")
    k.consume(sub, "q", "c", no_ack=True)
    return k, k.open()


def _args(b: Broker, s: Session, body: bytes) -> tuple[Session, VHost, Exchange, Message]:
    # What `Publisher.publish` takes for a publish of `body` to "q" on session `s`.
    vh, x = b.publisher.exchange_for(s, "")
    return s, vh, x, Message("", "q", b"\x00\x00", body)


def _publish(b: Broker, ch: Session, body: bytes, now_ms: int) -> None:
    s, vh, x, msg = _args(b, ch, body)
    b.publisher.publish(msg, session=s, vhost=vh, exchange=x, now_ms=now_ms)


def _publish_call(
    b: Broker, form: str, ch: Session, body: bytes, now_ms: int, publish: bool
) -> list[Effect]:
    # One publish as one call, in each form the protocol offers.
    if form == "with":
        with b.call(now_ms, publish=publish) as out:
            _publish(b, ch, body, now_ms)
        return out
    if form == "pair":
        out = b.calls.begin(now_ms)
        _publish(b, ch, body, now_ms)
        b.calls.end(publish)
        return out
    assert form == "publish"
    assert publish
    return b.calls.publish(*_args(b, ch, body), False, now_ms)


def _delivered(effects: list[Effect]) -> list[bytes]:
    return [e.message.body for e in effects if isinstance(e, Deliver)]


RULE = [
    # (defer, publish, dispatched at the end of the call)
    (False, False, True),
    (False, True, True),
    (True, False, True),
    (True, True, False),  # the only case that waits for `dispatch_pending`
]
FORMS = [
    (form, *row)
    for form in ("with", "pair", "publish")
    for row in RULE
    if form != "publish" or row[1]
]


@pytest.mark.parametrize(("form", "defer", "publish", "dispatched_now"), FORMS)
def test_a_call_dispatches_at_its_end_unless_a_deferred_publish(
    form: str, defer: bool, publish: bool, dispatched_now: bool
) -> None:
    k, pub = _consumed_queue()
    b = k.broker
    b.defer_dispatch = defer
    out = _publish_call(b, form, pub, b"m", k.now, publish)
    assert _delivered(out) == ([b"m"] if dispatched_now else [])
    assert _delivered(b.dispatch_pending(k.now)) == ([] if dispatched_now else [b"m"])


@pytest.mark.parametrize("form", ["with", "pair", "publish"])
def test_a_deferred_publish_to_an_eager_queue_dispatches_at_once(form: str) -> None:
    # A limited queue must hand out what it holds before the next publish counts against it.
    k = Core()
    sub = k.open()
    k.declare(sub, "q", {"x-max-length": 1})
    k.consume(sub, "q", "c", no_ack=True)
    pub = k.open()
    b = k.broker
    b.defer_dispatch = True
    assert _delivered(_publish_call(b, form, pub, b"m", k.now, True)) == [b"m"]


def _refused_after_publishing(b: Broker, ch: Session, now_ms: int) -> list[Effect]:
    # A call that publishes, then fails; returns its effect list.
    kept: list[list[Effect]] = []

    def refused() -> None:
        with b.call(now_ms) as out:
            kept.append(out)
            _publish(b, ch, b"m", now_ms)
            raise BrokerError(Condition.PRECONDITION_FAILED, "refused after the publish")

    with pytest.raises(BrokerError):
        refused()
    return kept[0]


def test_an_aborted_call_dispatches_nothing_and_the_next_call_does() -> None:
    k, pub = _consumed_queue()
    b = k.broker
    assert _delivered(_refused_after_publishing(b, pub, k.now)) == []
    with b.call(k.now) as out:
        pass
    assert _delivered(out) == [b"m"]


def test_an_aborted_pair_dispatches_nothing() -> None:
    k, pub = _consumed_queue()
    b = k.broker
    out = b.calls.begin(k.now)
    _publish(b, pub, b"n", k.now)
    b.calls.abort()
    assert _delivered(out) == []
    assert _delivered(b.dispatch_pending(k.now)) == [b"n"]


def _outside_any_call(b: Broker) -> bool:
    # Between calls, `emit` refuses: no call was left open (or taken for the outer one).
    try:
        b.calls.emit(Reply(9, 1, FIRST))
    except AssertionError:
        return True
    return False


def test_a_refused_publish_call_is_aborted() -> None:
    # An Artemis FAIL address refuses the second publish (no confirms): the call ends there.
    full = {"q": {"address-full-policy": "FAIL", "max-size-messages": 1}}
    k = Core(BrokerConfig(name_seed=7, address_settings=full))
    ch = k.open()
    k.declare(ch, "q")
    b = k.broker
    assert _publish_call(b, "publish", ch, b"first", k.now, True) == []
    assert _outside_any_call(b)
    with pytest.raises(BrokerError, match="FAIL"):
        b.calls.publish(*_args(b, ch, b"second"), False, k.now)
    assert _outside_any_call(b)


def test_the_end_of_every_form_leaves_no_call_open() -> None:
    k, pub = _consumed_queue()
    b = k.broker
    for form in ("with", "pair", "publish"):
        _publish_call(b, form, pub, b"m", k.now, True)
        assert _outside_any_call(b)
    _refused_after_publishing(b, pub, k.now)
    assert _outside_any_call(b)


# ---------------------------------------------------------------------- nesting
def test_a_nested_whole_call_leaves_the_outer_call_current() -> None:
    # Effects emitted after a whole call made inside a call belong to the outer call: the
    # inner one (channel_closed, as MQTT's takeover makes) has its own list.
    k = Core()
    closing = k.open()
    b = k.broker
    first = Reply(9, 1, FIRST)
    second = Reply(9, 1, SECOND)
    with b.call(k.now) as out:
        b.calls.emit(first)
        inner = b.channel_closed(closing.conn_id, closing.channel, k.now)
        b.calls.emit(second)
    assert out == [first, second]
    assert first not in inner
    assert second not in inner


def test_a_nested_call_that_raised_leaves_the_outer_call_current() -> None:
    k, pub = _consumed_queue()
    b = k.broker
    after = Reply(9, 1, FIRST)
    with b.call(k.now) as out:
        with pytest.raises(BrokerError), b.call(k.now + 5):
            raise BrokerError(Condition.NOT_FOUND, "inner refused")
        b.calls.emit(after)
        _publish(b, pub, b"m", k.now)
    assert out[0] == after
    assert _delivered(out) == [b"m"]
    assert _outside_any_call(b)


def test_a_publish_call_inside_a_call_nests() -> None:
    k, pub = _consumed_queue()
    b = k.broker
    after = Reply(9, 1, FIRST)
    with b.call(k.now) as out:
        inner = b.calls.publish(*_args(b, pub, b"m"), False, k.now)
        b.calls.emit(after)
    assert _delivered(inner) == [b"m"]
    assert out == [after]


def test_a_nested_call_dispatches_what_the_outer_call_marked() -> None:
    # The inner call's end applies the rule to every dirty queue, the outer call's included:
    # the deliveries of the outer's publish come in the inner call's effects.
    k, pub = _consumed_queue()
    b = k.broker
    b.defer_dispatch = True
    with b.call(k.now, publish=True) as out:
        _publish(b, pub, b"m", k.now)
        with b.call(k.now) as inner:
            pass
    assert _delivered(inner) == [b"m"]
    assert _delivered(out) == []


def test_emit_outside_a_call_is_a_bug() -> None:
    assert _outside_any_call(Broker())
