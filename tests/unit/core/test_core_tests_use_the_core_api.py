"""Core tests drive the core's own API, not AMQP 0-9-1 frames (issue 26, item 7).

A test module under tests/unit/core/ states its case in the core's words (`corekit.Core`:
sessions, `Publisher.publish`, delivery ids, settle kinds, effects); the translation to and
from 0-9-1 is the adapter's, tested in tests/unit/adapters/amqp091/. Each module's imports are
read with `ast`; `STILL_ON_AMQP091` lists the modules written before this rule that still
drive the core through the 0-9-1 kit, to move one by one: the list may only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOCOL_MODULES = (
    "ringmq.amqp",
    "ringmq.protocol",
    "ringmq.adapters",
    "tests.unit.adapters",
)

STILL_ON_AMQP091: frozenset[str] = frozenset()
"""Core test modules that still drive the core through AMQP 0-9-1 (to move onto
`corekit.Core`; the ones that test the 0-9-1 translation itself move to the adapter's tests):
none left."""

ALLOWED = {
    "corekit.py": "registers the 0-9-1 message form its `message` builds (dead letters and "
    "expirations read it), so each core test module runs alone as in the suite",
    "test_neutral.py": "reads 0-9-1's method names to keep them out of the core's words",
    "test_selector.py": "builds messages in the 0-9-1 form, whose properties selectors read",
    "test_streamchunk.py": "registers the AMQP 1.0 message form its stream entries use",
}
"""Modules that import a protocol without driving the core through it, and why."""


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _on_amqp091(path: Path) -> bool:
    return any(
        name == prefix or name.startswith(prefix + ".")
        for name in _imports(path)
        for prefix in PROTOCOL_MODULES
    )


def _modules() -> dict[str, Path]:
    return {str(p.relative_to(HERE)): p for p in sorted(HERE.rglob("*.py"))}


def test_the_scan_sees_a_module_on_amqp091() -> None:
    assert _on_amqp091(HERE.parent / "adapters" / "amqp091" / "test_batch_ingest.py")
    assert not _on_amqp091(HERE / "test_transactions.py")


def test_core_tests_import_no_protocol_but_the_listed_ones() -> None:
    found = {name for name, path in _modules().items() if name not in ALLOWED and _on_amqp091(path)}
    new = sorted(found - STILL_ON_AMQP091)
    assert new == [], f"core tests that drive AMQP 0-9-1 (use corekit.Core): {new}"


def test_the_list_names_only_modules_still_on_amqp091() -> None:
    modules = _modules()
    stale = sorted(n for n in STILL_ON_AMQP091 if n not in modules or not _on_amqp091(modules[n]))
    assert stale == [], f"moved onto the core's API: remove from STILL_ON_AMQP091: {stale}"
