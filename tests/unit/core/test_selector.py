"""JMS selectors (`ringmq.core.selector`): the JMS specification's examples, the NULL rules,
refusals, and a Hypothesis comparison with a small reference model (Kleene logic as min/max
over 0, 1/2, 1)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.adapters.amqp091.message import from_properties
from ringmq.core.selector import SelectorError, parse


def sel(text: str, **props: Any) -> bool:
    return parse(text).matches(props.get)


# --- the JMS specification's examples (§3.8.1) -------------------------------------------------


def test_the_specification_examples() -> None:
    car = "JMSType = 'car' AND color = 'blue' AND weight > 2500"
    assert sel(car, JMSType="car", color="blue", weight=2600)
    assert not sel(car, JMSType="car", color="blue", weight=2500)
    assert sel("Country IN (' UK', 'US', 'France')", Country="US")
    assert not sel("Country IN (' UK', 'US', 'France')", Country="Peru")
    assert sel("Country NOT IN (' UK', 'US', 'France')", Country="Peru")
    assert sel("phone LIKE '12%3'", phone="123")
    assert sel("phone LIKE '12%3'", phone="12993")
    assert not sel("phone LIKE '12%3'", phone="1234")
    assert sel("word LIKE 'l_se'", word="lose")
    assert not sel("word LIKE 'l_se'", word="loose")
    assert sel("underscored LIKE '\\_%' ESCAPE '\\'", underscored="_foo")
    assert not sel("underscored LIKE '\\_%' ESCAPE '\\'", underscored="bar")
    assert sel("phone NOT LIKE '12%3'", phone="1234")
    assert sel("age BETWEEN 15 AND 19", age=15)
    assert not sel("age BETWEEN 15 AND 19", age=20)
    assert sel("age NOT BETWEEN 15 AND 19", age=20)
    assert sel("prop_name IS NULL")
    assert not sel("prop_name IS NOT NULL")


def test_null_is_unknown_and_unknown_never_matches() -> None:
    assert not sel("missing = 1")
    assert not sel("NOT (missing = 1)")  # NOT unknown is unknown
    assert not sel("missing BETWEEN 1 AND 2")
    assert not sel("missing NOT BETWEEN 1 AND 2")
    assert not sel("missing IN ('a')")
    assert not sel("missing NOT IN ('a')")
    assert not sel("missing LIKE 'a%'")
    assert not sel("missing NOT LIKE 'a%'")
    assert sel("missing = 1 OR TRUE")
    assert not sel("missing = 1 AND TRUE")
    assert not sel("missing = 1 AND FALSE")
    assert sel("NOT (missing = 1 AND FALSE)")  # unknown AND false is false


def test_types_arithmetic_and_keywords() -> None:
    assert sel("a + 2 * 3 = 7", a=1)
    assert sel("(a + 2) * 3 = 9", a=1)
    assert sel("-a = -1 AND +a = 1", a=1)
    assert sel("a / 2 = 3", a=7)  # exact division truncates
    assert sel("a / 2 = -3", a=-7)
    assert sel("a / 2.0 = 3.5", a=7)
    assert not sel("a / 0 = 1", a=7)
    assert sel("a = 1.0", a=1)
    assert sel("a > 1e2", a=101)
    assert not sel("a = '1'", a=1)  # unlike types
    assert not sel("a < 'b'", a="a")  # strings only compare with = and <>
    assert sel("flag = TRUE", flag=True)
    assert sel("flag", flag=True)
    assert not sel("n", n=1)  # not a boolean
    assert sel("s = 'it''s' and S <> 'x' or FALSE", s="it's", S="y")  # keywords in any case
    assert not sel("b = 'x'", b=b"x")  # bytes are no string (message_lookup decodes them)


@pytest.mark.parametrize(
    "bad",
    ["", "a =", "a = = 1", "(a = 1", "a IN ()", "a IN (1)", "a LIKE 1", "a NOT 1", "'x", "a # 1",
     "a LIKE 'x' ESCAPE 'ab'", "a = 1 b"],
)  # fmt: skip
def test_invalid_selectors_are_refused(bad: str) -> None:
    with pytest.raises(SelectorError):
        parse(bad)


def test_a_message_gives_its_headers_and_jms_fields() -> None:
    props = {
        "headers": {"colour": "red", "n": 3, "raw": b"bytes"}, "priority": 7,
        "delivery_mode": 2, "message_id": "id-1", "correlation_id": "c-1", "type": "car",
    }  # fmt: skip
    msg = from_properties("", "q", props, b"", 1000)
    s = parse(
        "colour = 'red' AND n > 2 AND raw = 'bytes' AND JMSPriority = 7 AND "
        "JMSDeliveryMode = 'PERSISTENT' AND JMSMessageID = 'id-1' AND JMSTimestamp = 1000 "
        "AND JMSType = 'car' AND JMSCorrelationID = 'c-1' AND JMSRedelivered IS NULL"
    )
    assert s.matches_message(msg)
    assert not parse("colour = 'blue'").matches_message(msg)
    assert parse("JMSType IS NULL").matches_message(from_properties("", "q", {}, b"", 0))


# --- the reference model -----------------------------------------------------------------------

NAMES = ("a", "b", "c")
VALUES = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from(["x", "y", "xy"]))
UNKNOWN = 0.5


def _model_cmp(op: str, v: Any, lit: Any) -> float:
    if v is None:
        return UNKNOWN
    if isinstance(v, int) != isinstance(lit, int):
        return 0.0
    if isinstance(v, str) and op not in ("=", "<>"):
        return 0.0
    table = {"=": v == lit, "<>": v != lit, "<": v < lit, ">": v > lit, "<=": v <= lit,
             ">=": v >= lit}  # fmt: skip
    return 1.0 if table[op] else 0.0


@st.composite
def leaf(draw: st.DrawFn) -> tuple[str, Any]:
    name = draw(st.sampled_from(NAMES))
    kind = draw(st.sampled_from(["cmp", "null", "between", "in", "like"]))
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "<>", "<", ">", "<=", ">="]))
        lit = draw(st.one_of(st.integers(-3, 3), st.sampled_from(["x", "y"])))
        text = f"{name} {op} " + (f"'{lit}'" if isinstance(lit, str) else str(lit))
        return text, lambda env: _model_cmp(op, env[name], lit)
    if kind == "null":
        neg = draw(st.booleans())
        text = f"{name} IS {'NOT ' if neg else ''}NULL"
        return text, lambda env: 1.0 if (env[name] is None) != neg else 0.0
    neg = draw(st.booleans())
    nt = "NOT " if neg else ""

    def negate(r: float) -> float:
        return 1.0 - r if neg else r

    if kind == "between":
        lo, hi = draw(st.integers(-3, 3)), draw(st.integers(-3, 3))
        text = f"{name} {nt}BETWEEN {lo} AND {hi}"
        return text, lambda env: negate(
            min(_model_cmp(">=", env[name], lo), _model_cmp("<=", env[name], hi))
        )
    if kind == "in":
        opts = draw(st.lists(st.sampled_from(["x", "y", "xy"]), min_size=1, max_size=3))
        text = f"{name} {nt}IN ({', '.join(repr(o) for o in opts)})"

        def in_model(env: dict[str, Any]) -> float:
            v = env[name]
            if v is None:
                return UNKNOWN
            return negate(1.0 if isinstance(v, str) and v in opts else 0.0)

        return text, in_model
    prefix = draw(st.sampled_from(["x", "y", ""]))
    text = f"{name} {nt}LIKE '{prefix}%'"

    def like_model(env: dict[str, Any]) -> float:
        v = env[name]
        if v is None:
            return UNKNOWN
        return negate(1.0 if isinstance(v, str) and v.startswith(prefix) else 0.0)

    return text, like_model


def _combine(children: st.SearchStrategy[tuple[str, Any]]) -> st.SearchStrategy[tuple[str, Any]]:
    def both(op: str, x: tuple[str, Any], y: tuple[str, Any]) -> tuple[str, Any]:
        f = min if op == "AND" else max
        return f"({x[0]}) {op} ({y[0]})", lambda env: f(x[1](env), y[1](env))

    return st.one_of(
        st.builds(lambda x: (f"NOT ({x[0]})", lambda env: 1.0 - x[1](env)), children),
        st.builds(both, st.sampled_from(["AND", "OR"]), children, children),
    )


EXPRS = st.recursive(leaf(), _combine, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(EXPRS, st.fixed_dictionaries(dict.fromkeys(NAMES, VALUES)))
def test_selectors_agree_with_the_reference_model(
    expr: tuple[str, Any], env: dict[str, Any]
) -> None:
    text, model = expr
    assert parse(text).matches(env.get) == (model(env) == 1.0), text
