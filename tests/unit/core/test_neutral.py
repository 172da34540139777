"""The core's session and effects speak no protocol: deliveries, settlements, outcomes and
credit, not AMQP 0-9-1's delivery tags, channel modes or methods (issue 26, item 4).

Each adapter keeps its protocol's numbering and words; the core's names are the ones every
adapter translates from. The scan reads the source text, docstrings and comments included,
since a docstring that explains the core in one protocol's terms is where the vocabulary
leaks back in.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ringmq.amqp import spec

CORE = Path(__file__).resolve().parents[3] / "src" / "ringmq" / "core"
NEUTRAL = ("session.py", "effects.py")


def _method_names() -> set[str]:
    # Every 0-9-1 method as the spec writes it (`basic.return`) and as the codec names its
    # class (`BasicReturn`), taken from the codec so a new method is covered.
    names: set[str] = set()
    for obj in vars(spec).values():
        if isinstance(obj, type) and issubclass(obj, spec.Method) and obj is not spec.Method:
            names.add(obj.NAME)
            names.add(obj.__name__)
    return names


_FORBIDDEN = [
    re.compile(r"delivery[ _-]?tag", re.IGNORECASE),
    re.compile(r"DeliveryTag"),
    re.compile(r"channel[ _-]?mode", re.IGNORECASE),
    re.compile(r"0-9-1"),
    re.compile(r"\bbasic\.", re.IGNORECASE),
]


def test_the_scan_knows_the_methods() -> None:
    names = _method_names()
    assert {"basic.return", "BasicReturn", "confirm.select", "tx.commit"} <= names


@pytest.mark.parametrize("name", NEUTRAL)
def test_core_session_and_effects_use_no_amqp091_vocabulary(name: str) -> None:
    text = (CORE / name).read_text()
    found = [m.group(0) for rx in _FORBIDDEN for m in rx.finditer(text)]
    words = set(re.findall(r"[A-Za-z][\w.-]*[A-Za-z]", text))
    found += sorted(words & _method_names())
    assert found == [], f"core/{name} speaks AMQP 0-9-1: {sorted(set(found))}"
