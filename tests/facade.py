"""The management facade for tests that change or read the broker as management does."""

from __future__ import annotations

from ringmq.core.broker import Broker
from ringmq.management.admin import CoreAdmin
from ringmq.node import BrokerThread, ManagementRuntime
from tests.management.conftest import FakeRuntime


def admin_of(b: BrokerThread) -> CoreAdmin:
    """`CoreAdmin` over a running broker, its effects applied by the broker's server (call
    its methods on the loop thread: `b.call`)."""
    return CoreAdmin(b.broker, ManagementRuntime(b.server))


def admin_over(broker: Broker) -> CoreAdmin:
    """`CoreAdmin` over an in-process broker; a `FakeRuntime` records its effects."""
    return CoreAdmin(broker, FakeRuntime())
