"""Hypothesis strategies for AMQP values, methods, properties and frames."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from ringmq.amqp import spec
from ringmq.amqp.properties import BasicProperties
from ringmq.amqp.reply_codes import AMQPError

ALL_METHODS: list[type[spec.Method]] = list(spec.METHODS.values())

_INT_DOMAINS = {
    "octet": st.integers(0, 0xFF),
    "short": st.integers(0, 0xFFFF),
    "long": st.integers(0, 0xFFFFFFFF),
    "longlong": st.integers(0, 0xFFFFFFFFFFFFFFFF),
}


def shortstr(*, ascii_names: bool = False) -> st.SearchStrategy[str]:
    if ascii_names:
        alphabet = st.sampled_from(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:"
        )
        return st.text(alphabet, max_size=40)
    return st.text(max_size=60).filter(lambda s: len(s.encode()) <= 255)


def field_values(*, simple: bool = False, floats: bool = True) -> st.SearchStrategy[Any]:
    """Field-table values whose decode equals what was encoded."""
    scalars: st.SearchStrategy[Any] = st.one_of(
        st.text(max_size=20),
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
    )
    if not simple:  # pamqp (the oracle) cannot encode these faithfully
        scalars = st.one_of(
            scalars,
            st.binary(max_size=20),
            st.none(),
            *([st.floats(allow_nan=False)] if floats else []),
            st.decimals(
                allow_nan=False,
                allow_infinity=False,
                places=3,
                min_value=-1_000_000,
                max_value=1_000_000,
            ),
            st.integers(0, 2**37).map(lambda s: datetime.fromtimestamp(s, UTC)),
        )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(max_size=10), children, max_size=4),
        ),
        max_leaves=6,
    )


def tables(*, simple: bool = False, floats: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(
        st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255),
        field_values(simple=simple, floats=floats),
        max_size=4,
    )


def domain_value(domain: str, *, oracle_safe: bool = False) -> st.SearchStrategy[Any]:
    if domain in _INT_DOMAINS:
        return _INT_DOMAINS[domain]
    if domain == "bit":
        return st.booleans()
    if domain == "shortstr":
        return shortstr(ascii_names=oracle_safe)
    if domain == "longstr":
        if oracle_safe:
            return st.text("abcdefxyz \x00", max_size=40).map(str.encode)
        return st.binary(max_size=60)
    if domain == "table":
        return tables(simple=oracle_safe)
    raise AssertionError(domain)


@st.composite
def methods(
    draw: st.DrawFn, cls: type[spec.Method] | None = None, *, oracle_safe: bool = False
) -> spec.Method:
    klass = cls if cls is not None else draw(st.sampled_from(ALL_METHODS))
    kwargs: dict[str, Any] = {}
    for name, domain in klass.DOMAINS:
        if oracle_safe and name.startswith("reserved_"):
            continue  # pamqp insists on its own values for reserved fields
        if oracle_safe and domain == "longlong":
            kwargs[name] = draw(st.integers(0, 2**63 - 1))  # pamqp packs longlong signed
        else:
            kwargs[name] = draw(domain_value(domain, oracle_safe=oracle_safe))
    return klass(**kwargs)


def properties(*, simple: bool = False) -> st.SearchStrategy[BasicProperties]:
    opt_s = st.none() | shortstr(ascii_names=simple)
    return st.builds(
        BasicProperties,
        content_type=opt_s,
        content_encoding=opt_s,
        headers=st.none() | tables(simple=simple),
        delivery_mode=st.none() | st.integers(0, 255),
        priority=st.none() | st.integers(0, 255),
        correlation_id=opt_s,
        reply_to=opt_s,
        expiration=opt_s,
        message_id=opt_s,
        timestamp=st.none() | st.integers(0, 2**40),
        type=opt_s,
        user_id=opt_s,
        app_id=opt_s,
        cluster_id=opt_s,
    )


def normalise(value: Any) -> Any:
    """Make values from pamqp and ours comparable (pamqp decodes longstr/'S' as str)."""
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return bytes(value)
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, Decimal):
        return value.normalize()
    return value


def error_code(fn: Callable[..., object], *args: object) -> int | None:
    """Call ``fn``; the AMQPError code it raised, or None. Other exceptions propagate."""
    try:
        fn(*args)
    except AMQPError as exc:
        return int(exc.code)
    return None
