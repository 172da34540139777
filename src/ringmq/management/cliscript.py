"""`GET /cli/rabbitmqadmin`: RabbitMQ's own command line tool, served as RabbitMQ serves it.

rabbitmqadmin (the Python script, "v1") is part of RabbitMQ's management plugin, under the
Mozilla Public License 2.0; the plugin serves it at `/cli/rabbitmqadmin` so that any machine
that reaches the management port can fetch a client that matches it. ringmq ships no copy:
it serves the one this machine has, found by `find_rabbitmqadmin` (the test of RabbitMQ's own
tool uses the same search), unchanged, its licence header included; without one, the route
answers 404 and says where to get it. The route needs no login, as RabbitMQ's static files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Route

ENV: Final = "RINGMQ_RABBITMQADMIN"
"""Names the script explicitly (a path)."""
CACHED: Final = Path(".cache") / "ringmq" / "rabbitmqadmin"
"""Where tools/fetch_rabbitmqadmin.sh puts it, under the home directory (from Debian's
rabbitmq-server package)."""
_DEBIAN_GLOB: Final = (
    "lib/rabbitmq_server-*/plugins/rabbitmq_management-*/priv/www/cli/rabbitmqadmin"
)
_DEBIAN_ROOT: Final = Path("/usr/lib/rabbitmq")
"""Debian's rabbitmq-server package keeps the management plugin's files here, unzipped."""


def find_rabbitmqadmin() -> Path | None:
    """The rabbitmqadmin script of this machine, or None.

    In order: `$RINGMQ_RABBITMQADMIN`; the copy of tools/fetch_rabbitmqadmin.sh in
    ~/.cache/ringmq; a `rabbitmqadmin` on PATH (e.g. /usr/bin/rabbitmqadmin); the management
    plugin of an installed Debian rabbitmq-server package.
    """
    named = os.environ.get(ENV)
    if named:
        return Path(named) if Path(named).is_file() else None
    cached = Path.home() / CACHED
    if cached.is_file():
        return cached
    on_path = shutil.which("rabbitmqadmin")
    if on_path is not None:
        return Path(on_path).resolve()
    installed = sorted(_DEBIAN_ROOT.glob(_DEBIAN_GLOB)) if _DEBIAN_ROOT.is_dir() else []
    return installed[-1] if installed else None


async def _rabbitmqadmin(request: Request) -> Response:
    script = find_rabbitmqadmin()
    if script is None:
        return PlainTextResponse(
            "rabbitmqadmin is not installed on this node. It is RabbitMQ's (MPL 2.0): Debian's "
            "rabbitmq-server package ships it, and ringmq's tools/fetch_rabbitmqadmin.sh "
            "extracts it into ~/.cache/ringmq/rabbitmqadmin without installing RabbitMQ "
            "(docs/management.md#rabbitmqadmin).\n",
            status_code=404,
        )
    return FileResponse(
        script,
        media_type="text/x-python; charset=utf-8",
        filename="rabbitmqadmin",
        content_disposition_type="inline",
    )


def routes() -> list[Route]:
    """`GET /cli/rabbitmqadmin`."""
    return [Route("/cli/rabbitmqadmin", _rabbitmqadmin, methods=["GET", "HEAD"])]
