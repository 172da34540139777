"""Management reaches the core through one facade, and its modules import each other acyclically.

`admin.CoreAdmin` is the only management code that holds the core `Broker` (with its users and
permissions part, `accessfacade`, and its streams part, `streamfacade`; `queueinfo` and
`corerecords` read the core objects the facade hands them); every other module, the streams
endpoints included, calls the facade. These checks read the source, so a new shortcut fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MANAGEMENT = Path(__file__).resolve().parents[2] / "src" / "ringmq" / "management"
FACADE = {"admin.py", "accessfacade.py", "streamfacade.py", "queueinfo.py", "corerecords.py"}


def _touches_core_objects(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "broker":
            found.append(f"{path.name}:{node.lineno}: .broker")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "queue"
        ):  # q.queue.<x>: a queue entity's engine
            found.append(f"{path.name}:{node.lineno}: .queue.{node.attr}")
        if isinstance(node, ast.Name) and node.id == "broker" and isinstance(node.ctx, ast.Load):
            found.append(f"{path.name}:{node.lineno}: broker")
        if isinstance(node, ast.ImportFrom) and node.module in (
            "ringmq.core.vhost",
            "ringmq.core.queue",
            "ringmq.core.streambooks",
        ):
            found.append(f"{path.name}:{node.lineno}: import {node.module}")
    return found


def test_only_the_facade_touches_core_objects() -> None:
    outside = [
        hit
        for path in sorted(MANAGEMENT.glob("*.py"))
        if path.name not in FACADE and path.name != "app.py"
        for hit in _touches_core_objects(path)
    ]
    assert outside == []


def test_app_hands_the_broker_only_to_the_facade() -> None:
    # create_app(broker, runtime) receives the broker: it may only build CoreAdmin with it.
    tree = ast.parse((MANAGEMENT / "app.py").read_text(encoding="utf-8"))
    uses = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id == "broker" and isinstance(node.ctx, ast.Load)
    ]
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "CoreAdmin"
        and any(isinstance(a, ast.Name) and a.id == "broker" for a in node.args)
    ]
    assert len(uses) == 1
    assert len(calls) == 1


def test_management_modules_import_each_other_without_cycles() -> None:
    grimp = pytest.importorskip("grimp")  # import-linter's graph (the lint extra)
    graph = grimp.build_graph("ringmq")
    modules = sorted(m for m in graph.modules if m.startswith("ringmq.management."))
    cycles = sorted(
        (a, b)
        for a in modules
        for b in graph.find_modules_directly_imported_by(a)
        if b.startswith("ringmq.management.") and graph.chain_exists(importer=b, imported=a)
    )
    assert cycles == []
