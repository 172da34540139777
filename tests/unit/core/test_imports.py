"""The way into the core is one narrow contract: only the composition root knows `Broker`.

Every import of a module under `src/ringmq/core/` is read with `ast`, those under
`if TYPE_CHECKING:` and inside functions included (a type-only back-reference is still one),
and resolved as grimp resolves them (`from a import b` is `a.b` when that is a module, else
`a`). Two rules: no core module but `ringmq.core.broker` imports it, and the core modules
import each other without cycles. The live objects' graph, whose classes refer to each other
(a queue to its consumers, a consumer to its queue and its session, a session to its consumers
and deliveries), is one module, `ringmq.core.entities`, that reaches its sessions through a
Protocol (`ConsumerSession`). import-linter says the same in `pyproject.toml` (`make lint`);
this test keeps the rules where the tests run.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
CORE = SRC / "ringmq" / "core"
ROOT = "ringmq.core.broker"


def _name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_name(p): p for p in sorted(CORE.rglob("*.py"))}


def _imports(module: str) -> set[str]:
    # The core modules `module` imports (absolute and relative imports, anywhere in the file).
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in MODULES else base)
    return {m for m in out if m in MODULES and m != module}


GRAPH: dict[str, set[str]] = {m: _imports(m) for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # Strongly connected components of more than one module (Tarjan, iterative).
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc: list[str] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    scc.append(w)
                    if w == v:
                        break
                if len(scc) > 1:
                    out.append(sorted(scc))
    return out


def test_the_scan_sees_the_core() -> None:
    # The scan itself works: it finds the composition root and what it composes.
    assert ROOT in MODULES
    assert {"ringmq.core.state", "ringmq.core.durability"} <= GRAPH[ROOT]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_composition_root_knows_the_broker() -> None:
    assert sorted(m for m, deps in GRAPH.items() if ROOT in deps) == []


def test_core_modules_import_each_other_without_cycles() -> None:
    assert _cycles(GRAPH) == []
