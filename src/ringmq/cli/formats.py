"""How the CLI shows numbers and times: binary sizes, durations, epoch-ms dates, node lines."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


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
