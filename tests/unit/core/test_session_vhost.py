"""A session in another vhost than its connection's (`Broker.channel_opened(vhost=...)`): what
a shard link's remote consumers use. The vhost must exist and the connection's user must have
access to it; the session then works in that vhost, its permission checks included."""

from __future__ import annotations

import pytest

from ringmq.core.errors import BrokerError, Condition
from tests.unit.core.corekit import Core


def test_a_session_opens_in_a_vhost_its_user_may_use() -> None:
    core = Core()
    broker = core.broker
    broker.add_vhost("tenant")
    broker.state.auth.set_permissions("guest", "tenant", configure="^t-", write="", read="")
    conn = core.connect()
    assert broker.channel_opened(conn, 2, core.now, vhost="tenant") == []
    s = broker.session(conn, 2)
    assert s is not None
    assert s.vhost.name == "tenant"
    core.declare(s, "t-queue")
    assert "t-queue" in broker.state.vhosts["tenant"].queues
    assert "t-queue" not in broker.state.vhosts["/"].queues
    err = core.refused(core.declare, s, "other")  # checked against the session's vhost
    assert err.condition is Condition.ACCESS_REFUSED


def test_an_unknown_vhost_or_one_without_access_opens_no_session() -> None:
    core = Core()
    broker = core.broker
    conn = core.connect()
    with pytest.raises(BrokerError, match="no vhost 'nowhere'") as err:
        broker.channel_opened(conn, 2, core.now, vhost="nowhere")
    assert err.value.condition is Condition.NOT_FOUND
    broker.add_vhost("closed")
    with pytest.raises(BrokerError) as err:
        broker.channel_opened(conn, 3, core.now, vhost="closed")
    assert err.value.condition is Condition.NOT_ALLOWED
    assert broker.session(conn, 2) is None
    assert broker.session(conn, 3) is None
