"""Runtime parameters kept from a definitions import survive a restart (issue 28, item 6):
stored with the durable definitions, as the vhost limits are, and gone with their vhost."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import BrokerFactory

pytestmark = [pytest.mark.integration]

UPSTREAM = {"uri": "amqp://upstream", "ack-mode": "on-confirm"}


def test_parameters_survive_a_restart_and_go_with_their_vhost(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "kept"
    first = broker_factory(http_port=0, data_dir=data)
    base = f"http://127.0.0.1:{first.server.http_port}"
    doc = {
        "vhosts": [{"name": "prod"}, {"name": "old"}],
        "parameters": [
            {"vhost": "prod", "component": "federation-upstream", "name": "up", "value": UPSTREAM},
            {"vhost": "old", "component": "shovel", "name": "s", "value": {"src-queue": "a"}},
        ],
        "global_parameters": [{"name": "cluster_name", "value": "rabbit@old-host"}],
    }
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        assert http.post("/api/definitions", json=doc).status_code == 204
        assert http.delete("/api/vhosts/old").status_code == 204
    first.stop()
    second = broker_factory(http_port=0, data_dir=data)
    base = f"http://127.0.0.1:{second.server.http_port}"
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as http:
        params = http.get("/api/parameters").json()
        assert [(p["vhost"], p["component"], p["name"], p["value"]) for p in params] == [
            ("prod", "federation-upstream", "up", UPSTREAM)
        ]
        assert [(g["name"], g["value"]) for g in http.get("/api/global-parameters").json()] == [
            ("cluster_name", "rabbit@old-host")
        ]
