"""paging.apply: pages tile the filtered, sorted list exactly; bad parameters are 400s."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.management import paging
from ringmq.management.errors import BadRequestError

items_st = st.lists(
    st.fixed_dictionaries(
        {"name": st.text(alphabet="abcAB", max_size=4), "messages": st.integers(0, 9)},
        optional={"message_stats": st.fixed_dictionaries({"publish": st.integers(0, 5)})},
    ),
    max_size=30,
)


@given(items=items_st, page_size=st.integers(1, 7), needle=st.sampled_from(["", "a", "B"]))
def test_pages_tile_the_filtered_sorted_list(
    items: list[dict[str, Any]], page_size: int, needle: str
) -> None:
    query = {"sort": "messages", "sort_reverse": "true", "name": needle}
    whole = paging.apply(items, query)
    assert [i["messages"] for i in whole] == sorted((i["messages"] for i in whole), reverse=True)
    assert all(needle.lower() in i["name"].lower() for i in whole)
    first = paging.apply(items, {**query, "page": "1", "page_size": str(page_size)})
    collected = list(first["items"])
    for page in range(2, first["page_count"] + 1):
        got = paging.apply(items, {**query, "page": str(page), "page_size": str(page_size)})
        assert got["page"] == page
        assert got["item_count"] == len(got["items"]) <= page_size
        collected.extend(got["items"])
    assert collected == whole
    assert first["filtered_count"] == len(whole)
    assert first["total_count"] == len(items)


@given(items=items_st)
def test_dotted_sort_puts_missing_values_first(items: list[dict[str, Any]]) -> None:
    out = paging.apply(items, {"sort": "message_stats.publish"})
    keys = [i.get("message_stats", {}).get("publish") for i in out]
    missing = [k for k in keys if k is None]
    assert keys[: len(missing)] == missing
    present = keys[len(missing) :]
    assert present == sorted(present)


def test_columns_project_dotted_paths() -> None:
    items = [{"name": "q", "messages": 3, "message_stats": {"publish": 1, "ack": 2}}]
    assert paging.apply(items, {"columns": "name,message_stats.ack"}) == [
        {"name": "q", "message_stats": {"ack": 2}}
    ]


@pytest.mark.parametrize(
    "query",
    [
        {"page": "0"},
        {"page": "-1"},
        {"page": "1", "page_size": "0"},
        {"page": "2"},
        {"page": "1", "page_size": "999"},
        {"name": "[", "use_regex": "true"},
    ],
)
def test_bad_parameters(query: dict[str, str]) -> None:
    with pytest.raises(BadRequestError):
        paging.apply([{"name": "a"}], query)
