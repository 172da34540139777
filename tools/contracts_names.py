"""Regenerate the tested name lists of docs/dev/contracts.md from the code.

    python tools/contracts_names.py            # print the two lists
    python tools/contracts_names.py --write    # rewrite them in docs/dev/contracts.md

The page's prose is written by hand; its two lists ("Names used across layers", and the
`Broker` names server/ and management/ reach) are what the code imports and reaches, which
`tests/unit/test_contracts_doc.py` checks. When branches each add names, regenerating the
lists resolves the merge: the test still fails on a name the code does not have.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ringmq"
DOC = ROOT / "docs" / "dev" / "contracts.md"
CROSS_HEAD = "## Names used across layers (tested)"
BROKER_HEAD = "### `Broker` names used by server/ and management/ (tested)"


def cross_layer_names() -> dict[str, dict[str, set[str]]]:
    """module -> name -> the layers (top-level packages) that import it from another layer."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted(SRC.rglob("*.py")):
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
                for alias in node.names:
                    out[node.module][alias.name].add(parts[0])
    return out


def broker_names() -> set[str]:
    used: set[str] = set()
    for layer in ("server", "management"):
        for path in (SRC / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute):
                    base = node.value
                    if (isinstance(base, ast.Name) and base.id == "broker") or (
                        isinstance(base, ast.Attribute) and base.attr == "broker"
                    ):
                        used.add(node.attr)
    return used


def cross_lines() -> list[str]:
    lines = []
    for module, names in sorted(cross_layer_names().items()):
        listed = ", ".join(
            f"`{name}` ({'/'.join(sorted(layers))})" for name, layers in sorted(names.items())
        )
        lines.append(f"- `{module}`: {listed}")
    return lines


def broker_line() -> str:
    return ", ".join(f"`{n}`" for n in sorted(broker_names()))


def rewrite(text: str) -> str:
    head, _, rest = text.partition(CROSS_HEAD)
    cross_part, _, broker_part = rest.partition(BROKER_HEAD)
    # keep the prose before the list, replace the "- `ringmq...`" lines
    prose = [line for line in cross_part.splitlines() if not re.match(r"- `ringmq", line)]
    while prose and not prose[-1].strip():
        prose.pop()
    new_cross = "\n".join(prose) + "\n\n" + "\n".join(cross_lines()) + "\n\n"
    paragraphs = broker_part.split("\n\n")
    # the broker part: intro paragraph(s), then the names line (the last paragraph)
    names_at = max(i for i, p in enumerate(paragraphs) if p.strip().startswith("`"))
    tail = paragraphs[names_at][len(paragraphs[names_at].rstrip("\n")) :]
    paragraphs[names_at] = broker_line() + tail
    return head + CROSS_HEAD + new_cross + BROKER_HEAD + "\n\n".join(paragraphs)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true")
    args = p.parse_args()
    if args.write:
        DOC.write_text(rewrite(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print("\n".join(cross_lines()))
        print()
        print(broker_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
