"""RabbitMQ's list query parameters: name filter, sort, sort_reverse, pagination, columns.

`GET /api/queues?page=2&page_size=50&name=orders&use_regex=false&sort=messages&sort_reverse=true`
answers `{"filtered_count", "item_count", "page", "page_count", "page_size", "total_count",
"items"}` when `page` is given and a plain list otherwise, as RabbitMQ's management plugin does
(default page size 100, at most 500). Sort keys may be dotted paths
(`message_stats.publish_details.rate`); items lacking the key sort first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ringmq.management.errors import BadRequestError

DEFAULT_PAGE_SIZE: Final = 100
MAX_PAGE_SIZE: Final = 500


def _lookup(item: Mapping[str, Any], path: list[str]) -> Any:
    value: Any = item
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _sort_key(value: Any) -> tuple[int, Any]:
    # Missing first, then numbers, then strings (mixed types must not raise in sorted()).
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, value)
    return (2, str(value).lower())


def _int_param(query: Mapping[str, str], name: str, default: int) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestError(f"{name} must be an integer, got {raw!r}") from None
    if value < 1:
        raise BadRequestError(f"{name} must be at least 1, got {value}")
    return value


def _project(item: dict[str, Any], columns: list[list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in columns:
        value = _lookup(item, path)
        if value is None:
            continue
        target = out
        for part in path[:-1]:
            target = target.setdefault(part, {})
        target[path[-1]] = value
    return out


def apply(items: list[dict[str, Any]], query: Mapping[str, str]) -> Any:
    """Filter, sort, paginate and project `items` as the query parameters say."""
    total = len(items)
    name = query.get("name")
    if name:
        if query.get("use_regex", "false").lower() == "true":
            try:
                pattern = re.compile(name, re.IGNORECASE)
            except re.error as exc:
                raise BadRequestError(f"invalid regex {name!r}: {exc}") from None
            items = [i for i in items if pattern.search(str(i.get("name", "")))]
        else:
            needle = name.lower()
            items = [i for i in items if needle in str(i.get("name", "")).lower()]
    sort = query.get("sort")
    reverse = query.get("sort_reverse", "false").lower() == "true"
    if sort:
        path = sort.split(".")
        items = sorted(items, key=lambda i: _sort_key(_lookup(i, path)), reverse=reverse)
    elif reverse:
        items = list(reversed(items))
    columns_raw = query.get("columns")
    if columns_raw:
        columns = [c.split(".") for c in columns_raw.split(",") if c]
        items = [_project(i, columns) for i in items]
    if "page" not in query:
        return items
    page = _int_param(query, "page", 1)
    page_size = _int_param(query, "page_size", DEFAULT_PAGE_SIZE)
    if page_size > MAX_PAGE_SIZE:
        raise BadRequestError(f"page_size must not exceed {MAX_PAGE_SIZE}, got {page_size}")
    filtered = len(items)
    page_count = max(1, -(-filtered // page_size))
    if page > page_count:
        raise BadRequestError(f"page out of range: {page} > {page_count}")
    chunk = items[(page - 1) * page_size : page * page_size]
    return {
        "filtered_count": filtered,
        "item_count": len(chunk),
        "page": page,
        "page_count": page_count,
        "page_size": page_size,
        "total_count": total,
        "items": chunk,
    }
