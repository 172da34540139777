"""The etcd v3 JSON gateway client against a real etcd 3.4 (`-m cluster`)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ringmq.cluster import etcd as gw
from ringmq.cluster.etcd import Etcd, EtcdUnavailableError
from tests.cluster.conftest import EtcdCluster
from tests.ports import free_ports

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


async def test_leases_transactions_and_a_dead_first_endpoint(
    etcd_cluster: Callable[[int], EtcdCluster],
) -> None:
    etcd = etcd_cluster(1)
    (dead,) = free_ports(1)
    client = Etcd([f"http://127.0.0.1:{dead}", etcd.endpoints], timeout_s=2)
    try:
        lease, ttl_s = await client.grant(3)  # the dead endpoint is skipped
        assert ttl_s >= 3
        assert await client.keepalive(lease) >= 3
        assert await client.keepalive(lease + 12345) == 0  # unknown: 0, not an error
        # create-if-absent, twice: the second one fails and reads the first's value
        for expect in (True, False):
            res = await client.txn(
                [gw.absent("/t/leader")],
                [gw.put("/t/leader", b"a", lease)],
                [gw.get("/t/leader")],
            )
            assert res.succeeded is expect
        assert [kv.value for kv in res.ranges[0]] == [b"a"]
        assert res.ranges[0][0].lease == lease
        _rev, kvs = await client.range_prefix("/t/")
        assert [kv.key for kv in kvs] == ["/t/leader"]
        await client.revoke(lease)  # the key goes with its lease
        _rev, kvs = await client.range_prefix("/t/")
        assert kvs == []
    finally:
        await client.aclose()
    nobody = Etcd([f"http://127.0.0.1:{dead}"], timeout_s=1)
    try:
        with pytest.raises(EtcdUnavailableError):
            await nobody.grant(3)
    finally:
        await nobody.aclose()
