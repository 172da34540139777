"""How the CLI shows things: tables, binary sizes, durations, epoch-ms dates, node lines."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Final

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB' (binary units, as RabbitMQ's console)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_duration(ms: int) -> str:
    """90061000 -> '1d 1h 1m 1s'."""
    secs = ms // 1000
    days, secs = divmod(secs, 86400)
    hours, secs = divmod(secs, 3600)
    mins, secs = divmod(secs, 60)
    parts = [f"{days}d"] if days else []
    if days or hours:
        parts.append(f"{hours}h")
    if days or hours or mins:
        parts.append(f"{mins}m")
    parts.append(f"{secs}s")
    return " ".join(parts)


def node_rows(node: dict[str, Any]) -> list[tuple[str, str]]:
    """`status`'s node lines: memory, disk, file descriptors, alarms, uptime."""
    if not node:
        return []
    alarms = node.get("alarms") or []
    return [
        (
            "memory",
            f"{human_bytes(node['mem_used'])} of {human_bytes(node['mem_limit'])}"
            + (" [ALARM]" if node.get("mem_alarm") else ""),
        ),
        (
            "disk free",
            f"{human_bytes(node['disk_free'])} (limit "
            f"{human_bytes(node['disk_free_limit'])})"
            + (" [ALARM]" if node.get("disk_free_alarm") else ""),
        ),
        ("file descriptors", f"{node['fd_used']} of {node['fd_total']}"),
        ("alarms", "; ".join(a["reason"] for a in alarms) if alarms else "none"),
        ("uptime", human_duration(int(node["uptime"]))),
    ]


def format_ms(ms: Any) -> str:
    """An epoch-ms time as a local date and time (`2026-11-25 14:03:07.250 +0100`)."""
    if not isinstance(ms, int):
        return ""
    when = datetime.fromtimestamp(ms / 1000, tz=UTC).astimezone()
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} " + when.strftime("%z")


def _cell(key: str, value: Any) -> str:
    # One table cell: lists joined (a user's tags), dicts as JSON (a policy's definition),
    # and "no ring" (-1, RabbitMQ's queues have none) left empty rather than shown as -1.
    if value is None or (key == "ring_size" and value == -1):
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


_UNBOUNDED: Final = 100_000


def table_of(
    out: Console, title: str, columns: list[tuple[str, str]], rows: list[dict[str, Any]]
) -> None:
    """Print `rows` as a table on `out`: one column per (label, dotted key), numbers right
    aligned, never cut to the terminal's width (a name must stay whole to be copied)."""
    table = Table(title=title, header_style="bold", title_justify="left")
    cells = [[_cell(key, _value(row, key)) for _label, key in columns] for row in rows]
    for label, key in columns:
        numeric = key.startswith(("messages", "consumers", "channels", "ring_size", "counters"))
        table.add_column(label, justify="right" if numeric else "left")
    for line in cells:
        table.add_row(*line)
    # rich fits a table to the terminal (80 columns when stdout is not one) by wrapping and
    # cutting cells, names included; a table wider than that is printed at its own width
    natural = Measurement.get(out, out.options.update_width(_UNBOUNDED), table).maximum
    shown = out.width
    out.width = max(shown, natural)  # print() itself never goes past the console's width
    try:
        out.print(table, crop=False)
    finally:
        out.width = shown


def _value(row: dict[str, Any], key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value
