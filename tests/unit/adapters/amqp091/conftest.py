"""The `kit` fixture: a fresh broker driven through the AMQP 0-9-1 adapter (kit.py) for each
test."""

from __future__ import annotations

import pytest

from tests.unit.adapters.amqp091.kit import Kit


@pytest.fixture
def kit() -> Kit:
    return Kit()
