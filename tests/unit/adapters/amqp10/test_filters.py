"""A receiver's source filters (`adapters/amqp10/filters.py`): the selector and no-local in
the descriptor forms Qpid JMS, Artemis, rhea and proton send; only applied ones are echoed."""

from __future__ import annotations

from typing import Any

import pytest

from ringmq.adapters.amqp10.filters import (
    NO_LOCAL_FILTER_CODE,
    NO_LOCAL_FILTER_NAME,
    SELECTOR_FILTER_CODE,
    SELECTOR_FILTER_NAME,
    FilterError,
    source_filters,
)
from ringmq.amqp10.types import Described, Symbol, ULong

SELECTOR_FORMS = [Symbol(SELECTOR_FILTER_NAME), ULong(SELECTOR_FILTER_CODE)]
NO_LOCAL_FORMS = [Symbol(NO_LOCAL_FILTER_NAME), ULong(NO_LOCAL_FILTER_CODE)]


@pytest.mark.parametrize("descriptor", SELECTOR_FORMS)
def test_a_selector_by_symbol_or_code(descriptor: Any) -> None:
    value = Described(descriptor, "a = 1")
    found = source_filters({Symbol("jms-selector"): value})
    assert (found.selector, found.no_local) == ("a = 1", False)
    assert found.applied(no_local=False) == {Symbol("jms-selector"): value}


@pytest.mark.parametrize("descriptor", NO_LOCAL_FORMS)
def test_no_local_by_symbol_or_code_is_echoed_only_where_applied(descriptor: Any) -> None:
    value = Described(descriptor, [])
    sel = Described(Symbol(SELECTOR_FILTER_NAME), "a = 1")
    found = source_filters({Symbol("no-local"): value, Symbol("jms-selector"): sel})
    assert (found.selector, found.no_local) == ("a = 1", True)
    assert found.applied(no_local=True) == {Symbol("no-local"): value, Symbol("jms-selector"): sel}
    assert found.applied(no_local=False) == {Symbol("jms-selector"): sel}


@pytest.mark.parametrize(
    "filters",
    [
        None,
        {},
        {Symbol("x"): Described(Symbol("apache.org:xquery-filter:string"), "x")},
        {Symbol("x"): Described(ULong(0x0000468C00000005), "x")},
        {Symbol("x"): Described(Symbol("amqp:application-properties-filter"), {})},
        {Symbol("x"): "not described"},
    ],
)
def test_unknown_filters_are_neither_applied_nor_echoed(filters: Any) -> None:
    found = source_filters(filters)
    assert (found.selector, found.no_local) == (None, False)
    assert found.applied(no_local=True) is None


def test_a_selector_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(FilterError):
        source_filters({Symbol("s"): Described(ULong(SELECTOR_FILTER_CODE), 42)})
