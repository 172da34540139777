"""Unit tests mirror the source: each package under src/ringmq/ has its folder under tests/unit/.

The tests of `ringmq.core.queue`'s modules live in tests/unit/core/queue/, those of
`ringmq.adapters.amqp091` in tests/unit/adapters/amqp091/, and so on; both trees are read from
the filesystem, so a new package needs its test folder from the start. Each such folder is a
package (an `__init__.py`: test modules of one name in two folders, like the several
`test_paging.py`, stay apart) and holds test modules of its own, unless the package is listed in
`TESTED_BELOW` with the reason. Folders for what is not a package of src/ringmq/ (bench/, for
benchmarks/) are allowed.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "ringmq"
UNIT = ROOT / "tests" / "unit"

# A package (its path under src/ringmq/) whose folder holds no test module, and why.
TESTED_BELOW: dict[str, str] = {}


def packages() -> list[str]:
    """Every package of src/ringmq/, as a path relative to it ("." for ringmq itself)."""
    return sorted(str(p.parent.relative_to(SRC)) for p in SRC.rglob("__init__.py"))


def test_the_source_packages_are_found() -> None:
    found = packages()
    assert {".", "core", "core/queue", "adapters/amqp091", "storage"} <= set(found)


def test_every_package_has_its_test_package_under_tests_unit() -> None:
    missing = [p for p in packages() if not (UNIT / p / "__init__.py").is_file()]
    assert missing == [], f"make tests/unit/<package>/ with an __init__.py for: {missing}"


def test_every_test_package_holds_tests_of_its_own() -> None:
    empty = [
        p for p in packages() if p not in TESTED_BELOW and not any((UNIT / p).glob("test_*.py"))
    ]
    assert empty == [], f"no test module in tests/unit/<package>/ for: {empty}"


def test_the_allow_list_names_only_packages_without_tests() -> None:
    stale = [p for p in TESTED_BELOW if p not in packages() or any((UNIT / p).glob("test_*.py"))]
    assert stale == [], f"remove from TESTED_BELOW: {stale}"
