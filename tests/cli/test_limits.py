"""rabbitmqctl's limit commands and rabbitmqadmin's `list vhost_limits|user_limits`, against a
running broker (real server, real HTTP, and a pika client refused by a limit set from the CLI)."""

from __future__ import annotations

import json

import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread

from .conftest import Run

pytestmark = pytest.mark.integration


def _listed(run: Run, kind: str) -> object:
    return json.loads(run("list", kind, "--json").stdout)


def test_vhost_limits_set_list_clear(run: Run) -> None:
    run("vhost", "add", "lim.vh")
    out = run("set_vhost_limits", "--vhost", "lim.vh", '{"max-connections": 10, "max-queues": 3}')
    assert "lim.vh" in out.stdout
    assert _listed(run, "vhost_limits") == [
        {"vhost": "lim.vh", "value": {"max-connections": 10, "max-queues": 3}}
    ]
    table = run("list", "vhost_limits").stdout
    assert "lim.vh" in table
    assert '"max-queues": 3' in table
    # a later definition replaces the whole set, as rabbitmqctl's
    run("set_vhost_limits", "-V", "lim.vh", '{"max-queues": 5, "max-connections": 10}')
    run("set_vhost_limits", "-V", "lim.vh", '{"max-queues": 5}')
    assert _listed(run, "vhost_limits") == [{"vhost": "lim.vh", "value": {"max-queues": 5}}]
    run("set_vhost_limits", "-V", "lim.vh", '{"max-queues": 5, "max-connections": 10}')
    run("clear_vhost_limits", "--vhost", "lim.vh", "max-queues")
    assert _listed(run, "vhost_limits") == [{"vhost": "lim.vh", "value": {"max-connections": 10}}]
    run("clear_vhost_limits", "--vhost", "lim.vh")
    assert _listed(run, "vhost_limits") in ([], [{"vhost": "lim.vh", "value": {}}])
    run("vhost", "delete", "lim.vh")


def test_user_limits_set_list_clear(run: Run) -> None:
    run("user", "add", "lim.u", "--new-password", "pw")
    run("set_user_limits", "lim.u", '{"max-connections": 4, "max-channels": 5}')
    assert _listed(run, "user_limits") == [
        {"user": "lim.u", "value": {"max-connections": 4, "max-channels": 5}}
    ]
    assert '"max-channels": 5' in run("list", "user_limits").stdout
    run("clear_user_limits", "lim.u", "max-channels")
    assert _listed(run, "user_limits") == [{"user": "lim.u", "value": {"max-connections": 4}}]
    run("set_user_limits", "lim.u", '{"max-channels": 2}')
    run("clear_user_limits", "lim.u", "all")
    assert _listed(run, "user_limits") in ([], [{"user": "lim.u", "value": {}}])
    run("user", "delete", "lim.u")


def test_unknown_limits_and_bad_definitions_refused(run: Run) -> None:
    run("vhost", "add", "lim.bad")
    result = run("set_vhost_limits", "--vhost", "lim.bad", '{"max-channels": 1}', expect=1)
    assert "400" in result.output
    assert "unknown vhost limit 'max-channels'" in result.output
    run("user", "add", "lim.bad", "--new-password", "pw")
    result = run("set_user_limits", "lim.bad", '{"max-queues": 1}', expect=1)
    assert "unknown user limit 'max-queues'" in result.output
    result = run("set_user_limits", "lim.bad", '{"max-channels": "ten"}', expect=1)
    assert "must be an integer" in result.output
    assert "404" in run("set_user_limits", "lim.nobody", '{"max-channels": 1}', expect=1).output
    assert "404" in run("clear_user_limits", "lim.bad", "max-channels", expect=1).output
    # not a JSON object: refused before anything is sent (typer's usage error)
    assert "JSON" in run("set_user_limits", "lim.bad", "max-channels=1", expect=2).output
    assert "JSON" in run("set_user_limits", "lim.bad", "[1]", expect=2).output
    assert _listed(run, "vhost_limits") == []
    assert _listed(run, "user_limits") == []
    run("user", "delete", "lim.bad")
    run("vhost", "delete", "lim.bad")


def test_user_connection_limit_refuses_a_pika_connection(
    run: Run, live_broker: BrokerThread
) -> None:
    run("user", "add", "lim.conn", "--new-password", "pw")
    run("permission", "set", "lim.conn", "--vhost", "/")
    params = pika.ConnectionParameters(
        "127.0.0.1", live_broker.port, credentials=pika.PlainCredentials("lim.conn", "pw")
    )
    pika.BlockingConnection(params).close()  # allowed before the limit
    run("set_user_limits", "lim.conn", '{"max-connections": 0}')
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as exc:
        pika.BlockingConnection(params)
    assert "user connection limit (0) is reached" in str(exc.value)
    run("clear_user_limits", "lim.conn", "max-connections")
    pika.BlockingConnection(params).close()
    run("user", "delete", "lim.conn")
