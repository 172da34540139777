"""A broker that does not use OAuth 2, LDAP, certificate login or a cluster loads none of
their libraries: pyjwt with `cryptography` (~10 MiB of RSS), httpx (~6 MiB), ldap3 (~6 MiB),
nor the client commands' rich. Each is imported where its feature is used; this test imports
every module a `ringmq serve` process may import at start-up, in a fresh interpreter, and
looks at what got loaded."""

from __future__ import annotations

import json
import subprocess
import sys

OPTIONAL = ("jwt", "cryptography", "httpx", "ldap3", "rich", "pyarrow", "pyspark")

_PROBE = """
import importlib, json, pkgutil, sys
import ringmq
from ringmq import cli

cli._register(["serve"])  # what `ringmq serve` registers
skip = (
    "ringmq.__main__",  # runs the CLI
    "ringmq.cli",  # the client commands: not loaded by `ringmq serve` (registered above)
    "ringmq.connector",  # the Spark connector runs in Spark, not in the broker
    "ringmq.server.ldapauth",  # the LDAP backend itself: imported when configured
)
for top in pkgutil.iter_modules(ringmq.__path__, "ringmq."):
    if top.name.startswith(skip):
        continue
    mod = importlib.import_module(top.name)
    if top.ispkg:  # walk_packages imports each package it descends into: skip first
        for m in pkgutil.walk_packages(mod.__path__, top.name + "."):
            if not m.name.startswith(skip):
                importlib.import_module(m.name)
print(json.dumps(sorted(k for k in sys.modules if k.split(".")[0] in %r)))
"""


def test_serving_loads_no_optional_library_at_start_up() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE % (OPTIONAL,)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == []
