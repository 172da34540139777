"""The `kit` fixture: a fresh broker test kit (tests/unit/core/kit.py) for each test."""

from __future__ import annotations

import pytest

from tests.unit.core.kit import Kit


@pytest.fixture
def kit() -> Kit:
    return Kit()
