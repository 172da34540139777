"""The `kit` fixture of the core tests still written in AMQP 0-9-1 methods: a fresh broker
driven through the 0-9-1 adapter (tests/unit/adapters/amqp091/kit.py) for each test. New core
tests use `corekit.Core`, the core's own API (test_core_tests_use_the_core_api.py)."""

from __future__ import annotations

import pytest

from tests.unit.adapters.amqp091.kit import Kit


@pytest.fixture
def kit() -> Kit:
    return Kit()
