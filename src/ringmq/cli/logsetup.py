"""The serving process's logging: to stderr or a rotated file, as text or JSON lines.

`configure_logging` replaces the root logger's handlers with one: stderr by default, or a
`RotatingFileHandler` on `--log-file` that rolls over at `max_bytes` and keeps `backups` old
files (`ringmq.log.1` ...). `text` is one human line per record; `json` is one JSON object per
line (`time` in ISO 8601 UTC, `level`, `logger`, `message`, and `exception` when there is one)
for log shippers.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

LOG_FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(
    level: str,
    *,
    log_file: Path | None = None,
    log_format: str = "text",
    max_bytes: int = 10 * 1024 * 1024,
    backups: int = 5,
) -> logging.Handler:
    """Install the one root handler and return it."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r} (text or json)")
    handler: logging.Handler
    if log_file is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
