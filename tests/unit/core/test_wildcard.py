"""The one Artemis wildcard matcher, its precedence, and both of its users agreeing."""

from __future__ import annotations

import re

import hypothesis.strategies as st
import pytest
from hypothesis import given

from ringmq.core.policies import AddressSettingsTable
from ringmq.core.wildcard import matches, most_specific_first
from ringmq.server.configfile import AddressSetting, resolve_address_settings


@pytest.mark.parametrize(
    ("pattern", "address", "expected"),
    [
        ("#", "a", True),
        ("#", "a.b.c", True),
        ("ring.#", "ring", True),
        ("ring.#", "ring.a.b", True),
        ("ring.*", "ring.a", True),
        ("ring.*", "ring.a.b", False),
        ("ring.*", "ring", False),
        ("a.*.c", "a.b.c", True),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.x.y.c", True),
        ("a.#.c", "a.x.y.d", False),
        ("#.c", "a.b.c", True),
        ("exact", "exact", True),
        ("exact", "exactly", False),
    ],
)
def test_matches(pattern: str, address: str, expected: bool) -> None:
    assert matches(pattern, address) is expected


@pytest.mark.parametrize(
    ("given_order", "expected"),
    [
        # no `#` precedes `#`, whatever else the match holds (the issue's `a.b.c` example)
        (["#.c", "a.*.*"], ["a.*.*", "#.c"]),
        (["a.#", "a.b.c"], ["a.b.c", "a.#"]),
        # between two `#` matches the longer string goes first
        (["a.#", "a.b.#"], ["a.b.#", "a.#"]),
        (["#", "a.#"], ["a.#", "#"]),
        # no `*` precedes `*`
        (["a.*", "a.b"], ["a.b", "a.*"]),
        # between two `*` matches, the first word where one is `*` and the other is not decides
        (["a.*.*", "a.*.c"], ["a.*.c", "a.*.*"]),
        (["*.b", "a.*"], ["a.*", "*.b"]),
        # the full chain for a.b.c
        (
            ["#", "a.#", "a.*.*", "a.b.c", "a.*.c", "a.b.#"],
            ["a.b.c", "a.*.c", "a.*.*", "a.b.#", "a.#", "#"],
        ),
    ],
)
def test_artemis_precedence(given_order: list[str], expected: list[str]) -> None:
    assert most_specific_first(given_order) == expected
    assert most_specific_first(reversed(given_order)) == expected


def test_engine_and_config_file_rank_a_star_star_above_hash_c() -> None:
    # They disagreed here: one ranked `a.*.*` first, the other `#.c`.
    table = AddressSettingsTable()
    table.set("#.c", {"default_ring_size": 2})
    table.set("a.*.*", {"default_ring_size": 1})
    assert table.resolve("a.b.c").default_ring_size == 1
    settings = (
        AddressSetting(match="#.c", default_ring_size=2),
        AddressSetting(match="a.*.*", default_ring_size=1),
    )
    assert resolve_address_settings(settings, "a.b.c").default_ring_size == 1


_WORD = st.sampled_from(["a", "b", "c", "*", "#"])
_PATTERN = st.lists(_WORD, min_size=1, max_size=4).map(".".join)
_ADDRESS = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(".".join)


@given(
    st.lists(st.tuples(_PATTERN, st.integers(0, 99)), max_size=6, unique_by=lambda t: t[0]),
    _ADDRESS,
)
def test_engine_and_config_file_resolve_alike(entries: list[tuple[str, int]], address: str) -> None:
    table = AddressSettingsTable()
    for pattern, ring in entries:
        table.set(pattern, {"default_ring_size": ring})
    settings = tuple(AddressSetting(match=p, default_ring_size=r) for p, r in entries)
    assert (
        table.resolve(address).default_ring_size
        == resolve_address_settings(settings, address).default_ring_size
    )


@given(_PATTERN, _ADDRESS)
def test_matches_agrees_with_a_regex(pattern: str, address: str) -> None:
    # Every word carries its leading dot, so a `#` that takes no words takes no dot either.
    tokens = {"#": r"(?:\.[^.]+)*", "*": r"\.[^.]+"}
    regex = "".join(tokens.get(w, r"\." + re.escape(w)) for w in pattern.split("."))
    assert matches(pattern, address) is (re.fullmatch(regex, "." + address) is not None)
