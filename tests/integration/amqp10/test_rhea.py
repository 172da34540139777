"""AMQP 1.0 over the wire with rhea, a pure JavaScript client (the second independent client).

Each test runs one Node script of `rhea/` against a broker on port 0: the script does the
client's part, fails (exit status 1, the reason on stderr) on any unexpected answer, and prints
its result as JSON, which the test checks with what the broker holds afterwards. Besides the
basics, rhea repeats what python-qpid-proton covers: JMS selectors (rhea sends the filter by
its descriptor code), browsing, durable subscriptions across a broker restart, shared
subscriptions. rhea has no transaction API, so transactions are proton's alone. The scripts
need `node` and rhea installed in `rhea/node_modules` (`npm ci` in `.ci/run` and
`make install`); without them the tests skip with the reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ringmq.node import BrokerThread
from ringmq.server.brokerxml import parse_artemis_xml
from tests.facade import admin_of
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration

SCRIPTS = Path(__file__).parent / "rhea"
NODE = shutil.which("node")
TIMEOUT_S = 30  # each script gives up after 15 s itself

if NODE is None:
    pytest.skip("node is not on PATH (rhea needs Node.js)", allow_module_level=True)
if not (SCRIPTS / "node_modules" / "rhea" / "package.json").exists():
    pytest.skip(
        f"rhea is not installed: run `npm ci` in {SCRIPTS} (make install does)",
        allow_module_level=True,
    )


def run(script: str, b: BrokerThread, *args: str) -> Any:
    """Run `rhea/<script>.js` against `b` (with `args` after the port); its JSON result."""
    assert NODE is not None
    proc = subprocess.run(
        [NODE, str(SCRIPTS / f"{script}.js"), str(b.port), *args],
        cwd=SCRIPTS,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, f"{script}.js failed ({proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def messages_in(b: BrokerThread, queue: str) -> tuple[int, int]:
    info = b.call(lambda: admin_of(b).queue("/", queue))
    return info.messages_ready, info.messages_unacknowledged


def test_hello_world(broker: BrokerThread) -> None:
    assert run("hello", broker) == {"body": "Hello World!"}
    assert messages_in(broker, "rhea-hello") == (0, 0)


def test_100_sends_and_receives(broker: BrokerThread) -> None:
    assert run("many", broker) == {"accepted": 100, "received": 100}
    assert messages_in(broker, "rhea-many") == (0, 0)


def test_request_reply_over_a_dynamic_receiver(broker: BrokerThread) -> None:
    got = run("request_reply", broker)
    assert got["answers"] == ["ONE", "TWO", "THREE"]
    assert got["reply_to"].startswith("amq.gen-")

    def queues() -> list[str]:
        return broker.call(lambda: [q.name for q in admin_of(broker).queues("/")])

    # the temporary queue went with its link (the client's close reaches the broker when it may)
    wait_until(lambda: got["reply_to"] not in queues())
    assert "rhea-requests" in queues()


def test_credit_and_drain(broker: BrokerThread) -> None:
    got = run("credit_drain", broker)
    assert got["received"] == ["a", "b", "c"]
    # credit 2: two messages, then the drain is echoed with no credit left; a drain with 10
    # sends the third and gives back the other 9
    assert got["drains"] == [{"received": 2, "credit": 0}, {"received": 3, "credit": 0}]
    assert messages_in(broker, "rhea-credit") == (0, 0)


def queues_of(b: BrokerThread) -> set[str]:
    return set(b.call(lambda: [q.name for q in admin_of(b).queues("/")]))


def test_a_jms_selector(broker: BrokerThread) -> None:
    got = run("selectors", broker)
    assert got["received"] == ["r1", "r2"]
    assert got["echoed"] == ["jms-selector"]  # the broker applied the filter and says so
    assert messages_in(broker, "rhea-paint") == (2, 0)  # b1 and n1 are left for others


def test_browsing_leaves_the_messages(broker: BrokerThread) -> None:
    got = run("browse", broker)
    assert got == {"browsed": ["one", "two", "three"], "mode": "copy"}
    assert messages_in(broker, "rhea-browsed") == (3, 0)


def test_a_durable_subscription_across_a_restart(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    b = broker_factory(data_dir=tmp_path / "d")
    assert run("durable_sub", b, "subscribe") == {"sent": 1}
    assert "rhea-durable.sub1" in queues_of(b)
    b.stop()
    b = broker_factory(data_dir=tmp_path / "d")
    assert messages_in(b, "rhea-durable.sub1") == (1, 0)
    assert run("durable_sub", b, "resume") == {"received": "p1"}
    wait_until(lambda: "rhea-durable.sub1" not in queues_of(b))  # unsubscribed


def test_a_shared_subscription(broker: BrokerThread) -> None:
    got = run("shared_sub", broker)["got"]
    assert sorted(got[0] + got[1]) == [0, 1, 2, 3]  # each message once, to one of the two
    assert got[0]  # one queue served in turn (two queues would give 8 deliveries)
    assert got[1]
    wait_until(lambda: "workers" not in queues_of(broker))  # not durable: gone with its links


def test_no_local(broker: BrokerThread) -> None:
    got = run("no_local", broker)
    assert got == {"received": ["theirs"], "echoed": ["no-local"]}


def test_a_durable_no_local_subscription_by_container_id(broker: BrokerThread) -> None:
    assert run("no_local_durable", broker) == {"received": ["theirs"]}
    wait_until(lambda: "rhea-nl.nl-sub" not in queues_of(broker))  # unsubscribed


@pytest.mark.parametrize(
    ("mode", "description"),
    [("plain", "Failed to authenticate: 1"), ("nosasl", "anonymous logins are off")],
)
def test_a_refused_login_is_a_clear_error(
    broker_factory: BrokerFactory, mode: str, description: str
) -> None:
    # plain: a wrong password (SASL outcome auth, code 1); nosasl: no SASL while anonymous
    # logins are off (the broker's open, then its close with the condition)
    b = broker_factory('[amqp10]\nanonymous_user = "off"\n')
    got = run("refused", b, mode)
    assert got["error"]["condition"] == "amqp:unauthorized-access"
    assert description in got["error"]["description"]
    assert got["opened"] is (mode == "nosasl")


def test_broker_xml_switches_anonymous_off(broker_factory: BrokerFactory) -> None:
    # an Artemis broker.xml whose AMQP acceptor offers PLAIN only: rhea without SASL is refused
    xml = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core"><acceptors>
      <acceptor name="amqp">tcp://0.0.0.0:5672?protocols=AMQP;saslMechanisms=PLAIN</acceptor>
    </acceptors></core></configuration>"""
    got = run("refused", broker_factory(parse_artemis_xml(xml)), "nosasl")
    assert got["error"]["condition"] == "amqp:unauthorized-access"


def test_the_higher_priority_receiver_is_served_first(broker: BrokerThread) -> None:
    got = run("priority", broker)
    assert got == {"high": ["m0", "m1", "m2"], "low": ["m3", "m4"]}


def test_a_dynamic_target(broker: BrokerThread) -> None:
    got = run("dynamic_target", broker)
    assert got["got"] == ["through the link", "to its address"]
    wait_until(lambda: got["address"] not in queues_of(broker))  # gone with its link


def test_the_attach_offers_what_qpid_jms_checks(broker: BrokerThread) -> None:
    got = run("capabilities", broker)
    assert got == {"sender": ["DELAYED_DELIVERY"], "receiver": ["SHARED-SUBS"]}


def test_a_selector_receiver_takes_turns_with_a_plain_one(broker: BrokerThread) -> None:
    got = run("selector_turns", broker)
    assert got == {"reds": ["r0", "r2"], "plain": ["r1", "r3"]}
