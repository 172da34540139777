"""The way into the core is one narrow contract: only the composition root knows `Broker`.

Every import of a module under `src/ringmq/core/` is read with `ast`, those under
`if TYPE_CHECKING:` and inside functions included (a type-only back-reference is still one),
and resolved as grimp resolves them (`from a import b` is `a.b` when that is a module, else
`a`). Two rules: no core module but `ringmq.core.broker` imports it, and the core modules
import each other without cycles, but for the entity graph's type-only back-references
(`ENTITY_BACK_REFERENCES`). import-linter says the same in `pyproject.toml` (`make lint`); this
test keeps the rules where the tests run.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"
CORE = SRC / "ringmq" / "core"
ROOT = "ringmq.core.broker"
ENTITY_BACK_REFERENCES = frozenset(
    {
        ("ringmq.core.consumers", "ringmq.core.session"),  # Consumer.session
        ("ringmq.core.consumers", "ringmq.core.vhost"),  # Consumer.queue
    }
)
"""The one cycle left, the live objects' graph: a consumer refers to its session and its queue,
which hold it (`Session.consumers`, `QueueEntity.consumers`), a session to its vhost and its
unacked queues (a queue's no-local rule reads connections through `vhost.Peer`, a protocol,
and is out of the cycle). Breaking it takes one module for
sessions, consumers, queues and vhosts, or protocols in their place on the delivery path; until
then these imports (all under TYPE_CHECKING) are the only ones a cycle may use."""


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
    assert all(b in GRAPH[a] for a, b in ENTITY_BACK_REFERENCES)  # still there: keep the list true
    rest = {
        m: {d for d in deps if (m, d) not in ENTITY_BACK_REFERENCES} for m, deps in GRAPH.items()
    }
    assert _cycles(rest) == []
