"""docs/dev/contracts.md says which names each layer takes from another: keep it true.

A listed name that does not exist fails, and so does a cross-layer import (or a `broker.<name>`
reached from server/ or management/) that the page does not list.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "ringmq"
DOC = (ROOT / "docs" / "dev" / "contracts.md").read_text(encoding="utf-8")
_, _, TESTED = DOC.partition("## Names used across layers (tested)")
CROSS, _, BROKER_PART = TESTED.partition("### `Broker` names used by server/ and management/")
_BROKER_REF = re.compile(r"\bbroker\.([a-z_][A-Za-z0-9_]*)")


def listed_imports() -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for line in CROSS.splitlines():
        m = re.match(r"- `(ringmq[\w.]*)`: (.*)", line)
        if m:
            out.update((m.group(1), name) for name in re.findall(r"`(\w+)` \(", m.group(2)))
    return out


def code_imports() -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).parts
        if len(parts) < 2:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and node.module
                and node.module.startswith("ringmq.")
                and node.module.split(".")[1] != parts[0]
            ):
                out.update((node.module, a.name) for a in node.names)
    return out


def test_the_page_lists_cross_layer_names() -> None:
    assert listed_imports()  # the section was found and parsed


def test_every_listed_name_exists() -> None:
    missing = []
    for module, name in sorted(listed_imports()):
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")  # a submodule
            except ImportError:
                missing.append(f"{module}.{name}")
    assert missing == []


def test_every_cross_layer_import_is_listed() -> None:
    assert sorted(code_imports() - listed_imports()) == []


def listed_broker_names() -> set[str]:
    return set(re.findall(r"`(\w+)`", BROKER_PART.split("\n\n", 2)[-1]))


def test_listed_broker_names_exist() -> None:
    broker = Broker(BrokerConfig(), now_ms=0)
    names = listed_broker_names()
    assert names
    assert sorted(n for n in names if not hasattr(broker, n)) == []


def test_server_and_management_reach_only_listed_broker_names() -> None:
    used: set[str] = set()
    for layer in ("server", "management"):
        for path in (SRC / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                # `broker.x` and `self.broker.x` in code (comments and strings are not nodes)
                if isinstance(node, ast.Attribute):
                    base = node.value
                    if (isinstance(base, ast.Name) and base.id == "broker") or (
                        isinstance(base, ast.Attribute) and base.attr == "broker"
                    ):
                        used.add(node.attr)
    assert sorted(used - listed_broker_names()) == []
