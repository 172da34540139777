"""`ringmq` for an operator: node status, users/vhosts/permissions, dates, the default URL."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from ringmq.cli import apiclient
from ringmq.cli.formats import format_ms, human_bytes, human_duration
from ringmq.node import BrokerThread

from .conftest import Run

pytestmark = pytest.mark.integration


def test_status_shows_memory_disk_alarms_and_uptime(run: Run, live_broker: BrokerThread) -> None:
    out = run("status").stdout
    for label in ("memory", "disk free", "file descriptors", "alarms", "uptime"):
        assert re.search(rf"^\s*{label}\s", out, re.M), (label, out)
    assert re.search(r"^\s*alarms\s+none", out, re.M)
    assert re.search(r"^\s*memory\s+[\d.]+ \w+ of [\d.]+ \w+", out, re.M)
    data = json.loads(run("status", "--json").stdout)
    monitor = live_broker.server.memory
    assert monitor is not None
    assert data["node_status"]["mem_limit"] == monitor.governor.watermark_bytes


def test_users_vhosts_and_permissions(run: Run) -> None:
    run("vhost", "add", "cli.vh")
    assert "cli.vh" in [v["name"] for v in json.loads(run("list", "vhosts", "--json").stdout)]
    run("user", "add", "cli.ops", "--new-password", "s3cret", "--tags", "monitoring")
    users = {u["name"]: u for u in json.loads(run("list", "users", "--json").stdout)}
    assert users["cli.ops"]["tags"] in (["monitoring"], "monitoring")
    assert "cli.ops" in run("list", "users").stdout
    run("permission", "set", "cli.ops", "--vhost", "cli.vh", "--configure", "^$", "--read", "q.*")
    perms = json.loads(run("list", "permissions", "--json").stdout)
    (mine,) = [p for p in perms if p["user"] == "cli.ops"]
    assert (mine["vhost"], mine["configure"], mine["write"], mine["read"]) == (
        "cli.vh",
        "^$",
        ".*",
        "q.*",
    )
    run("topic-permission", "set", "cli.ops", "amq.topic", "^{username}[.]", ".*", "-V", "cli.vh")
    (topic,) = json.loads(run("list", "topic-permissions", "--json").stdout)
    assert topic == {
        "user": "cli.ops",
        "vhost": "cli.vh",
        "exchange": "amq.topic",
        "write": "^{username}[.]",
        "read": ".*",
    }
    run("topic-permission", "clear", "cli.ops", "--vhost", "cli.vh")
    assert json.loads(run("list", "topic-permissions", "--json").stdout) == []
    run("permission", "clear", "cli.ops", "--vhost", "cli.vh")
    perms = json.loads(run("list", "permissions", "--json").stdout)
    assert not [p for p in perms if p["user"] == "cli.ops"]
    run("user", "delete", "cli.ops")
    run("vhost", "delete", "cli.vh")
    assert "cli.vh" not in run("list", "vhosts").stdout
    assert "404" in run("user", "delete", "cli.ops", expect=1).output


def test_scheduled_due_times_are_dates(run: Run) -> None:
    run("declare", "queue", "cli.dates")
    run("publish", "-k", "cli.dates", "-m", "later", "-H", "x-delay=3600000")
    (row,) = json.loads(run("scheduled", "list", "cli.dates", "--json").stdout)
    table = run("scheduled", "list", "cli.dates").stdout
    assert format_ms(row["due_ms"]) in table
    assert str(row["due_ms"]) not in table
    run("delete", "queue", "cli.dates")


def test_formats() -> None:
    assert human_bytes(512) == "512 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(3 * 1024**3) == "3.0 GiB"
    assert human_duration(59_999) == "59s"
    assert human_duration(90_061_000) == "1d 1h 1m 1s"
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.250 [+-]\d{4}", format_ms(1_800_000_000_250)
    )


def test_without_url_the_cli_talks_to_make_runs_broker(
    monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    seen: list[tuple[str, str, str]] = []

    class Recorder(apiclient.Client):
        def __init__(self, url: str, user: str, password: str, timeout_s: float = 30.0) -> None:
            seen.append((url, user, password))
            raise ConnectionError("recorded")

    monkeypatch.setattr(apiclient, "Client", Recorder)
    for var in ("RINGMQ_URL", "RINGMQ_USER", "RINGMQ_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
    CliRunner().invoke(cli, ["list", "queues"])
    CliRunner().invoke(cli, ["list", "users"])
    assert seen == [("http://127.0.0.1:15672", "guest", "guest")] * 2
