"""`ringmq` management subcommands against a running broker (real server, real HTTP)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pika
import pytest
from typer.testing import CliRunner

from ringmq.node import BrokerThread

from .conftest import Run

pytestmark = pytest.mark.integration


def _json(run: Run, *args: str) -> object:
    return json.loads(run(*args, "--json").stdout)


def test_status_shows_listeners_and_totals(run: Run, live_broker: BrokerThread) -> None:
    out = run("status").stdout
    assert "RingMQ" in out
    assert f"127.0.0.1:{live_broker.port}" in out
    status = _json(run, "status")
    assert isinstance(status, dict)
    assert status["object_totals"]["exchanges"] >= 6


def test_declare_publish_peek_update_purge_delete(run: Run) -> None:
    run("declare", "queue", "cli.ring", "--arg", "x-ring-size=3", "--arg", "x-message-ttl=600000")
    queues = _json(run, "list", "queues", "--name", "cli.ring")
    assert isinstance(queues, list)
    assert [q["name"] for q in queues] == ["cli.ring"]
    assert queues[0]["arguments"] == {"x-ring-size": 3, "x-message-ttl": 600000}
    table = run("list", "queues", "--name", "cli.ring").stdout
    assert "cli.ring" in table
    assert "ring size" in table
    out = run("publish", "-k", "cli.ring", "-m", "hello", "--count", "5").stdout
    assert "published 5, routed 5" in out
    peeked = _json(run, "get", "cli.ring", "--count", "2")
    assert isinstance(peeked, list)
    assert [m["payload"] for m in peeked] == ["hello", "hello"]
    q = _json(run, "list", "queues", "--name", "cli.ring")
    assert isinstance(q, list)
    assert q[0]["messages"] == 3
    assert q[0]["counters"]["ring_evicted"] == 2
    updated = _json(run, "update", "queue", "cli.ring", "--ring-size", "2")
    assert isinstance(updated, dict)
    assert (updated["ring_size"], updated["messages"]) == (2, 3)
    assert "purged (3 messages)" in run("purge", "queue", "cli.ring").stdout
    taken = _json(run, "get", "cli.ring")
    assert taken == []
    run("delete", "queue", "cli.ring")
    assert _json(run, "list", "queues", "--name", "cli.ring") == []


def test_connections_and_consumers_listed(run: Run, live_broker: BrokerThread) -> None:
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live_broker.port))
    try:
        ch = conn.channel()
        ch.queue_declare("cli.consumed")
        ch.basic_consume("cli.consumed", lambda *_: None, consumer_tag="cli-tag")
        conns = _json(run, "list", "connections")
        assert isinstance(conns, list)
        assert any(c["client_properties"].get("product", "").startswith("Pika") for c in conns)
        consumers = _json(run, "list", "consumers")
        assert isinstance(consumers, list)
        assert [c["consumer_tag"] for c in consumers] == ["cli-tag"]
        assert "cli-tag" in run("list", "consumers").stdout
        channels = _json(run, "list", "channels")
        assert isinstance(channels, list)
        assert channels[0]["consumer_count"] == 1
    finally:
        conn.close()


def test_exchanges_and_bindings(run: Run) -> None:
    run("declare", "exchange", "cli.x", "--type", "fanout")
    run("declare", "queue", "cli.bound")
    run("declare", "binding", "cli.x", "cli.bound")
    bindings = _json(run, "list", "bindings")
    assert isinstance(bindings, list)
    assert any(b["source"] == "cli.x" and b["destination"] == "cli.bound" for b in bindings)
    assert "routed 1" in run("publish", "-e", "cli.x", "-k", "any", "-m", "x").stdout
    exchanges = _json(run, "list", "exchanges")
    assert isinstance(exchanges, list)
    assert "cli.x" in {x["name"] for x in exchanges}
    run("delete", "exchange", "cli.x")
    run("delete", "queue", "cli.bound")


def test_policies(run: Run) -> None:
    run("declare", "queue", "cli.pol.q")
    run("policy", "set", "cli-rings", "^cli\\.pol\\.", '{"ring-size": 4}', "--apply-to", "queues")
    policies = _json(run, "policy", "list")
    assert isinstance(policies, list)
    assert [p["name"] for p in policies] == ["cli-rings"]
    q = _json(run, "list", "queues", "--name", "cli.pol.q")
    assert isinstance(q, list)
    assert q[0]["ring_size"] == 4
    run("policy", "clear", "cli-rings")
    q = _json(run, "list", "queues", "--name", "cli.pol.q")
    assert isinstance(q, list)
    assert q[0]["ring_size"] == -1
    run("delete", "queue", "cli.pol.q")


def test_scheduled_messages(run: Run) -> None:
    run("declare", "queue", "cli.sched")
    run("publish", "-k", "cli.sched", "-m", "later", "-H", "x-delay=3600000", "--count", "2")
    listed = _json(run, "scheduled", "list", "cli.sched")
    assert isinstance(listed, list)
    assert [m["payload"] for m in listed] == ["later", "later"]
    assert "delivered 1" not in run("scheduled", "deliver", "cli.sched").stdout
    assert _json(run, "scheduled", "list", "cli.sched") == []
    q = _json(run, "list", "queues", "--name", "cli.sched")
    assert isinstance(q, list)
    assert q[0]["messages_ready"] == 2
    run("publish", "-k", "cli.sched", "-m", "later", "-H", "x-delay=3600000")
    assert "purged 1" in run("scheduled", "purge", "cli.sched").stdout
    run("delete", "queue", "cli.sched")


def test_definitions_round_trip(run: Run, tmp_path: Path) -> None:
    run("declare", "queue", "cli.def", "--arg", "x-max-length=7")
    path = tmp_path / "defs.json"
    run("definitions", "export", str(path))
    doc = json.loads(path.read_text())
    assert any(q["name"] == "cli.def" for q in doc["queues"])
    run("delete", "queue", "cli.def")
    run("definitions", "import", str(path))
    q = _json(run, "list", "queues", "--name", "cli.def")
    assert isinstance(q, list)
    assert q[0]["arguments"] == {"x-max-length": 7}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"queues": [{"name": "cli.never", "vhost": "nowhere"}]}))
    result = run("definitions", "import", str(bad), expect=1)
    assert "does not exist" in result.output
    assert _json(run, "list", "queues", "--name", "cli.never") == []
    run("delete", "queue", "cli.def")


def test_errors_exit_non_zero_with_the_reason(run: Run) -> None:
    assert "404" in run("purge", "queue", "cli.missing", expect=1).output
    run("declare", "queue", "cli.err", "--arg", "x-max-length=1")
    result = run("declare", "queue", "cli.err", "--arg", "x-max-length=2", expect=1)
    assert "PRECONDITION_FAILED" in result.output
    assert run("declare", "queue", "cli.err2", "--arg", "novalue", expect=2).exit_code == 2
    run("delete", "queue", "cli.err")


def test_bad_password_and_unreachable_broker(run: Run, cli: Any) -> None:
    assert "401" in run("status", "--password", "wrong", expect=1).output
    result = CliRunner().invoke(cli, ["status", "--url", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "cannot reach" in result.output
