"""JMS message selectors: the SQL-92 subset of the JMS specification (§3.8.1), pure.

Theory of operation
-------------------
`parse(text)` tokenizes a selector and parses it by recursive descent into an AST of tuples;
`Selector.matches(lookup)` evaluates it against a message whose identifiers `lookup` resolves
(None: the identifier is NULL, absent). `message_lookup` builds that function for a core
`Message`: the JMS header fields from the message's neutral fields (`JMSDeliveryMode`,
`JMSPriority`, `JMSMessageID`, `JMSTimestamp`) and its form's properties (`JMSCorrelationID`,
`JMSType`), every other name from its application headers (AMQP 1.0 application-properties,
AMQP 0-9-1 headers).

The language: literals (strings in single quotes with '' for a quote, exact and approximate
numbers, TRUE, FALSE), identifiers, parentheses, `+ - * /` (unary and binary), `= <> < > <= >=`,
`[NOT] BETWEEN a AND b`, `[NOT] IN ('a', ...)`, `[NOT] LIKE 'pattern' [ESCAPE 'c']` (`_` one
character, `%` any run), `IS [NOT] NULL`, `NOT`, `AND`, `OR` (that precedence, loosest last).
Keywords are case-insensitive, identifiers case-sensitive.

Values follow the specification's three-valued logic: an expression over a NULL (absent)
identifier is unknown (None) except `IS [NOT] NULL`; `AND` is false if either side is false,
`OR` true if either is true, `NOT` of unknown is unknown. Comparing unlike types (a string with
a number, a boolean with a string), or ordering strings or booleans, is false; arithmetic on a
non-number, or a division by zero, is unknown. Exact numbers divide as Java's integers do
(truncating). A selector matches only when it is true.

Errors: `SelectorError` for a selector that does not parse (adapters refuse it at attach).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ringmq.core.message import form_of

if TYPE_CHECKING:
    from ringmq.core.message import Message

Lookup = Callable[[str], Any]
"""Resolves an identifier to its value (str, int, float, bool) or None when it is absent."""

KEYWORDS: Final = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE"}
)

_TOKEN: Final = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^']|'')*')
      | (?P<approx>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?|\d+[eE][+-]?\d+[fFdD]?|\d+[fFdD])
      | (?P<exact>\d+[lL]?)
      | (?P<ident>[A-Za-z_$][A-Za-z0-9_$]*)
      | (?P<op><>|<=|>=|[=<>+\-*/(),])
    )""",
    re.VERBOSE,
)


class SelectorError(ValueError):
    """A selector that does not parse: the text says where and why."""


def tokenize(text: str) -> list[tuple[str, Any]]:
    """The tokens of `text` as (kind, value): kind is "str", "num", "kw", "id" or "op".

    Raises:
        SelectorError: a character no token starts with, or an unterminated string.
    """
    out: list[tuple[str, Any]] = []
    pos = 0
    end = len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SelectorError(f"unexpected {text[pos:].strip()[:20]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup
        raw = m.group(kind or "op")
        if kind == "string":
            out.append(("str", raw[1:-1].replace("''", "'")))
        elif kind == "approx":
            out.append(("num", float(raw.rstrip("fFdD"))))
        elif kind == "exact":
            out.append(("num", int(raw.rstrip("lL"))))
        elif kind == "ident":
            upper = raw.upper()
            out.append(("kw", upper) if upper in KEYWORDS else ("id", raw))
        else:
            out.append(("op", raw))
    return out


class _Parser:
    # Recursive descent over the tokens; each method returns an AST node (a tuple).
    def __init__(self, tokens: list[tuple[str, Any]]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> tuple[str, Any] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def accept(self, kind: str, value: Any) -> bool:
        t = self.peek()
        if t is not None and t[0] == kind and t[1] == value:
            self.i += 1
            return True
        return False

    def expect(self, kind: str, value: Any) -> None:
        if not self.accept(kind, value):
            raise SelectorError(f"expected {value!r}, found {self.describe()}")

    def describe(self) -> str:
        t = self.peek()
        return "the end" if t is None else repr(t[1])

    def parse(self) -> tuple[Any, ...]:
        node = self.or_expr()
        if self.peek() is not None:
            raise SelectorError(f"unexpected {self.describe()}")
        return node

    def or_expr(self) -> tuple[Any, ...]:
        node = self.and_expr()
        while self.accept("kw", "OR"):
            node = ("or", node, self.and_expr())
        return node

    def and_expr(self) -> tuple[Any, ...]:
        node = self.not_expr()
        while self.accept("kw", "AND"):
            node = ("and", node, self.not_expr())
        return node

    def not_expr(self) -> tuple[Any, ...]:
        if self.accept("kw", "NOT"):
            return ("not", self.not_expr())
        return self.predicate()

    def predicate(self) -> tuple[Any, ...]:
        left = self.additive()
        t = self.peek()
        if t is not None and t[0] == "op" and t[1] in ("=", "<>", "<", ">", "<=", ">="):
            self.i += 1
            return ("cmp", t[1], left, self.additive())
        if self.accept("kw", "IS"):
            negated = self.accept("kw", "NOT")
            self.expect("kw", "NULL")
            return ("null", left, negated)
        negated = self.accept("kw", "NOT")
        if self.accept("kw", "BETWEEN"):
            low = self.additive()
            self.expect("kw", "AND")
            return ("between", left, low, self.additive(), negated)
        if self.accept("kw", "IN"):
            self.expect("op", "(")
            values = [self.string()]
            while self.accept("op", ","):
                values.append(self.string())
            self.expect("op", ")")
            return ("in", left, frozenset(values), negated)
        if self.accept("kw", "LIKE"):
            pattern = self.string()
            escape = self.string() if self.accept("kw", "ESCAPE") else None
            return ("like", left, like_regex(pattern, escape), negated)
        if negated:
            raise SelectorError(f"expected BETWEEN, IN or LIKE after NOT, found {self.describe()}")
        return left

    def string(self) -> str:
        t = self.peek()
        if t is None or t[0] != "str":
            raise SelectorError(f"expected a string literal, found {self.describe()}")
        self.i += 1
        return str(t[1])

    def additive(self) -> tuple[Any, ...]:
        node = self.term()
        while True:
            t = self.peek()
            if t is None or t[0] != "op" or t[1] not in ("+", "-"):
                return node
            self.i += 1
            node = ("arith", t[1], node, self.term())

    def term(self) -> tuple[Any, ...]:
        node = self.unary()
        while True:
            t = self.peek()
            if t is None or t[0] != "op" or t[1] not in ("*", "/"):
                return node
            self.i += 1
            node = ("arith", t[1], node, self.unary())

    def unary(self) -> tuple[Any, ...]:
        if self.accept("op", "-"):
            return ("neg", self.unary())
        if self.accept("op", "+"):
            return ("pos", self.unary())
        return self.primary()

    def primary(self) -> tuple[Any, ...]:
        t = self.peek()
        if t is None:
            raise SelectorError("unexpected end of the selector")
        kind, value = t
        self.i += 1
        if kind in ("str", "num"):
            return ("lit", value)
        if kind == "id":
            return ("id", value)
        if kind == "kw" and value in ("TRUE", "FALSE"):
            return ("lit", value == "TRUE")
        if kind == "op" and value == "(":
            node = self.or_expr()
            self.expect("op", ")")
            return node
        raise SelectorError(f"unexpected {value!r}")


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """The regular expression of a LIKE pattern (`_`, `%`, and `escape` before either).

    Raises:
        SelectorError: an escape that is not one character.
    """
    if escape is not None and len(escape) != 1:
        raise SelectorError(f"ESCAPE must be one character, not {escape!r}")
    out: list[str] = []
    it = iter(pattern)
    for ch in it:
        if ch == escape:
            nxt = next(it, None)
            if nxt is None:
                raise SelectorError("LIKE pattern ends with its escape character")
            out.append(re.escape(nxt))
        elif ch == "_":
            out.append(".")
        elif ch == "%":
            out.append(".*")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _truth(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


_ORDER: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "=": lambda a, b: bool(a == b),
    "<>": lambda a, b: bool(a != b),
    "<": lambda a, b: bool(a < b),
    ">": lambda a, b: bool(a > b),
    "<=": lambda a, b: bool(a <= b),
    ">=": lambda a, b: bool(a >= b),
}


def compare(op: str, a: Any, b: Any) -> bool | None:
    """`a op b` with the selector's rules (NULL: unknown; unlike types: false)."""
    if a is None or b is None:
        return None
    if _is_num(a) and _is_num(b):
        return _ORDER[op](a, b)
    if type(a) is type(b) and isinstance(a, str | bool) and op in ("=", "<>"):
        return _ORDER[op](a, b)
    return False


def arith(op: str, a: Any, b: Any) -> Any:
    """`a op b` for numbers (anything else, or a division by zero: unknown)."""
    if not (_is_num(a) and _is_num(b)):
        return None
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    return a / b


def evaluate(node: tuple[Any, ...], lookup: Lookup) -> Any:
    """The value of `node` (None: NULL or unknown)."""
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "id":
        return lookup(node[1])
    if kind == "and":
        a = _truth(evaluate(node[1], lookup))
        if a is False:
            return False
        b = _truth(evaluate(node[2], lookup))
        if b is False:
            return False
        return None if a is None or b is None else True
    if kind == "or":
        a = _truth(evaluate(node[1], lookup))
        if a is True:
            return True
        b = _truth(evaluate(node[2], lookup))
        if b is True:
            return True
        return None if a is None or b is None else False
    if kind == "not":
        v = _truth(evaluate(node[1], lookup))
        return None if v is None else not v
    if kind == "cmp":
        return compare(node[1], evaluate(node[2], lookup), evaluate(node[3], lookup))
    if kind == "arith":
        return arith(node[1], evaluate(node[2], lookup), evaluate(node[3], lookup))
    if kind in ("neg", "pos"):
        v = evaluate(node[1], lookup)
        if not _is_num(v):
            return None
        return -v if kind == "neg" else v
    if kind == "null":
        return (evaluate(node[1], lookup) is None) != node[2]
    if kind == "between":
        v = evaluate(node[1], lookup)
        low = compare(">=", v, evaluate(node[2], lookup))
        high = compare("<=", v, evaluate(node[3], lookup))
        r = False if low is False or high is False else (None if None in (low, high) else True)
        return r if r is None or not node[4] else not r
    if kind == "in":
        v = evaluate(node[1], lookup)
        if v is None:
            return None
        r = isinstance(v, str) and v in node[2]
        return r != node[3]
    if kind == "like":
        v = evaluate(node[1], lookup)
        if v is None:
            return None
        r = isinstance(v, str) and node[2].fullmatch(v) is not None
        return r != node[3]
    raise AssertionError(kind)  # pragma: no cover


class Selector:
    """A parsed selector.

    Attributes:
        text: the selector as written.
        tree: its AST.
    """

    __slots__ = ("text", "tree")

    def __init__(self, text: str) -> None:
        """Parse `text`.

        Raises:
            SelectorError: it does not parse.
        """
        self.text = text
        self.tree = _Parser(tokenize(text)).parse()

    def matches(self, lookup: Lookup) -> bool:
        """True when the selector is true for the identifiers `lookup` resolves."""
        return evaluate(self.tree, lookup) is True

    def matches_message(self, msg: Message) -> bool:
        """True when the selector is true for `msg` (`message_lookup`)."""
        return evaluate(self.tree, message_lookup(msg)) is True


def parse(text: str) -> Selector:
    """A `Selector` for `text` (raises `SelectorError` when it does not parse)."""
    return Selector(text)


def _plain(v: Any) -> Any:
    # A header value as the selector sees it: strings, numbers and booleans; bytes as UTF-8.
    if isinstance(v, str | int | float):  # bool is an int
        return v
    if isinstance(v, bytes | bytearray):
        try:
            return bytes(v).decode()
        except UnicodeDecodeError:
            return None
    return None


def message_lookup(msg: Message) -> Lookup:
    """The identifiers of `msg` for a selector (see the module docstring)."""
    described: dict[str, Any] | None = None

    def lookup(name: str) -> Any:
        nonlocal described
        if name.startswith("JMS"):
            if name == "JMSDeliveryMode":
                return "PERSISTENT" if msg.persistent else "NON_PERSISTENT"
            if name == "JMSPriority":
                return msg.priority
            if name == "JMSMessageID":
                return msg.message_id
            if name == "JMSTimestamp":
                return msg.timestamp_ms
            if name in ("JMSCorrelationID", "JMSType"):
                if described is None:
                    described = form_of(msg).describe(msg.properties_bin)
                key = "correlation_id" if name == "JMSCorrelationID" else "type"
                return _plain(described.get(key))
        headers = msg.headers
        return _plain(headers.get(name)) if headers else None

    return lookup
