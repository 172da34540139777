from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.server.configfile import (
    ARG_LAST_VALUE,
    ARG_LAST_VALUE_KEY,
    ARG_NON_DESTRUCTIVE,
    ARG_RING_SIZE,
    AddressSetting,
    ConfigError,
    QueueSpec,
    artemis_match,
    load_config,
    parse_artemis_xml,
    parse_toml,
    queue_arguments,
    resolve_address_settings,
)

FULL_TOML = """
[server]
host = "127.0.0.1"
amqp_port = 0
http_port = 0
data_dir = "/tmp/x"
config_refresh_period_ms = 250

[limits]
max_message_size = 1048576
heartbeat_s = 30
frame_max = 65536
stream_frame_max = 2097152
channel_max = 64

[tls]
cert_file = "cert.pem"
key_file = "key.pem"
port = 5671

[[users]]
name = "alice"
password = "secret"
tags = ["administrator"]

[[vhosts]]
name = "prod"

[[permissions]]
user = "alice"
vhost = "prod"
configure = "^alice\\\\."

[[policies]]
name = "rings"
pattern = "^ring\\\\."
apply_to = "queues"
priority = 5
definition = { max-length = 3, overflow = "drop-head" }

[[address_settings]]
match = "ring.#"
default_ring_size = 3
address_full_policy = "fail"

[[exchanges]]
name = "logs"
type = "fanout"

[[queues]]
name = "q1"
arguments = { "x-max-length" = 10 }

[[bindings]]
source = "logs"
destination = "q1"
"""


def test_toml_full_schema() -> None:
    cfg = parse_toml(FULL_TOML)
    assert cfg.kind == "toml"
    assert cfg.listen.amqp_port == 0
    assert cfg.listen.data_dir == Path("/tmp/x")
    assert cfg.refresh_period_ms == 250
    assert cfg.limits.max_message_size == 1048576
    assert cfg.limits.heartbeat_s == 30
    assert cfg.limits.channel_max == 64
    # the stream protocol's own frame max, apart from AMQP's (RabbitMQ's stream.frame_max)
    assert (cfg.limits.frame_max, cfg.limits.stream_frame_max) == (65536, 2097152)
    assert parse_toml("[limits]\nframe_max = 65536\n").limits.stream_frame_max == 1048576
    assert cfg.tls is not None
    assert cfg.tls.cert_file == Path("cert.pem")
    assert cfg.users[0].name == "alice"
    assert cfg.users[0].tags == ("administrator",)
    assert cfg.vhosts == ("prod",)
    assert cfg.permissions[0].configure == "^alice\\."
    assert cfg.permissions[0].read == ".*"
    assert cfg.policies[0].definition == {"max-length": 3, "overflow": "drop-head"}
    assert cfg.policies[0].priority == 5
    assert cfg.address_settings[0].default_ring_size == 3
    assert cfg.address_settings[0].address_full_policy == "FAIL"
    assert cfg.exchanges[0].type == "fanout"
    assert cfg.queues[0].arguments == {"x-max-length": 10}
    assert cfg.bindings[0].destination_type == "queue"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[nope]\n", "unknown section"),
        ("[limits]\nheartbeat = 3\n", "unknown key"),
        ("[limits]\nheartbeat_s = 'x'\n", "expected an integer"),
        ("[limits]\nheartbeat_s = true\n", "got a boolean"),
        ("[limits]\nframe_max = 100\n", "must be >= 4096"),
        ("[limits]\nstream_frame_max = 100\n", "must be >= 4096"),
        ("[[users]]\nname = 'a'\n", "exactly one of"),
        ("[[users]]\nname = 'a'\npassword = 'x'\npassword_hash = 'y'\n", "exactly one of"),
        ("[[queues]]\ndurable = true\n", "missing required key 'name'"),
        ("[[bindings]]\nsource='a'\ndestination='b'\ndestination_type='x'\n", "destination_type"),
        ("[[policies]]\nname='p'\npattern='.*'\napply_to='x'\n", "apply_to"),
        ("[[address_settings]]\nmatch='#'\naddress_full_policy='SPILL'\n", "unknown value"),
        ("queues = 3\n", "array of tables"),
        ("[amqp10]\nanonymous = 'off'\n", "unknown key"),
        ("[amqp10]\nanonymous_user = 3\n", "a user name"),
        ("[amqp10]\nanonymous_user = ''\n", "empty"),
        ("[amqp10]\nanonymous_user = 'app'\n", "needs anonymous_password"),
        ("[amqp10]\nanonymous_user = 'off'\nanonymous_password = 'x'\n", "are off"),
        ("[auth]\nanonymous_login_user = 'app'\n", "needs anonymous_login_pass"),
        ("[auth]\nanonymous_user = 'app'\n", "unknown key"),
        ("[auth]\nanonymous_login_user = 'off'\n[amqp10]\n", "both set the anonymous login"),
        ("this is not toml", "<toml>"),
    ],
)
def test_toml_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_toml(text)


@pytest.mark.parametrize(
    ("text", "user", "password"),
    [
        ("", "guest", "guest"),
        ("[amqp10]\n", "guest", "guest"),
        ("[amqp10]\nanonymous_user = 'guest'\n", "guest", "guest"),
        ("[amqp10]\nanonymous_user = true\n", "guest", "guest"),
        ("[amqp10]\nanonymous_user = 'off'\n", None, "guest"),
        ("[amqp10]\nanonymous_user = 'None'\n", None, "guest"),
        ("[amqp10]\nanonymous_user = false\n", None, "guest"),
        ("[amqp10]\nanonymous_user = 'app'\nanonymous_password = 'pw'\n", "app", "pw"),
        ("[auth]\nanonymous_login_user = 'off'\n", None, "guest"),
        ("[auth]\nanonymous_login_user = 'app'\nanonymous_login_pass = 'pw'\n", "app", "pw"),
    ],
)
def test_anonymous_login(text: str, user: str | None, password: str) -> None:
    spec = parse_toml(text).anonymous_login
    assert (spec.anonymous_user, spec.anonymous_password) == (user, password)


def test_one_auth_table_holds_the_anonymous_login_and_the_mechanisms() -> None:
    cfg = parse_toml(
        "[auth]\nanonymous_login_user = 'off'\n"
        "mechanisms = ['PLAIN', 'AMQPLAIN', 'EXTERNAL']\nbackends = ['internal', 'oauth2']\n"
        "[auth.oauth2]\nresource_server_id = 'rabbitmq'\njwks_url = 'https://idp/certs'\n"
    )
    assert cfg.anonymous_login.anonymous_user is None
    assert cfg.auth.cert_login is not None
    assert cfg.auth.cert_login.external
    assert cfg.auth.backends == ("internal", "oauth2")


def test_auth_mechanisms_beside_the_older_amqp10_anonymous_login() -> None:
    # [auth] without the anonymous keys does not clash with [amqp10]'s older spelling
    cfg = parse_toml(
        "[auth]\nmechanisms = ['PLAIN', 'AMQPLAIN', 'EXTERNAL']\n"
        "[amqp10]\nanonymous_user = 'app'\nanonymous_password = 'pw'\n"
    )
    assert (cfg.anonymous_login.anonymous_user, cfg.anonymous_login.anonymous_password) == (
        "app",
        "pw",
    )
    assert cfg.auth.cert_login is not None
    assert cfg.auth.cert_login.external


BROKER_XML = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <core xmlns="urn:activemq:core">
    <configuration-file-refresh-period>1000</configuration-file-refresh-period>
    <address-settings>
      <!-- rings everywhere under ring. -->
      <address-setting match="ring.#">
        <default-ring-size>3</default-ring-size>
        <address-full-policy>FAIL</address-full-policy>
        <max-size-bytes>10MB</max-size-bytes>
        <max-size-messages>1000</max-size-messages>
      </address-setting>
      <address-setting match="ring.big">
        <default-ring-size>100</default-ring-size>
      </address-setting>
      <address-setting match="lvq.*">
        <default-last-value-key>ticker</default-last-value-key>
        <default-non-destructive>true</default-non-destructive>
        <redistribution-delay>0</redistribution-delay>
      </address-setting>
    </address-settings>
    <addresses>
      <address name="myRing">
        <anycast>
          <queue name="myRing" ring-size="3" />
        </anycast>
      </address>
      <address name="ring.auto">
        <anycast><queue name="ring.auto"><durable>false</durable></queue></anycast>
      </address>
      <address name="prices">
        <multicast>
          <queue name="prices.a" last-value-key="sym" non-destructive="true"/>
          <queue name="prices.b" last-value="true"/>
        </multicast>
      </address>
    </addresses>
  </core>
</configuration>
"""


def test_artemis_addresses() -> None:
    cfg = parse_artemis_xml(BROKER_XML)
    assert cfg.kind == "artemis"
    assert cfg.refresh_period_ms == 1000
    by_name = {q.name: q for q in cfg.queues}
    assert by_name["myRing"].arguments == {ARG_RING_SIZE: 3}
    assert by_name["myRing"].address == "myRing"
    assert by_name["ring.auto"].durable is False
    assert by_name["prices.a"].arguments == {ARG_LAST_VALUE_KEY: "sym", ARG_NON_DESTRUCTIVE: True}
    assert by_name["prices.b"].arguments == {ARG_LAST_VALUE: True}
    assert [(e.name, e.type) for e in cfg.exchanges] == [("prices", "fanout")]
    assert {(b.source, b.destination) for b in cfg.bindings} == {
        ("prices", "prices.a"),
        ("prices", "prices.b"),
    }


def test_artemis_address_settings_and_defaults() -> None:
    cfg = parse_artemis_xml(BROKER_XML)
    ring = cfg.address_settings[0]
    assert ring.max_size_bytes == 10 * 1024 * 1024
    assert ring.max_size_messages == 1000
    assert ring.address_full_policy == "FAIL"
    by_name = {q.name: q for q in cfg.queues}
    # default-ring-size applies to queues without an explicit ring-size
    assert queue_arguments(by_name["ring.auto"], cfg.address_settings) == {ARG_RING_SIZE: 3}
    # the queue's own attribute wins over the address-setting
    explicit = QueueSpec(name="ring.x", arguments={ARG_RING_SIZE: 7}, address="ring.x")
    assert queue_arguments(explicit, cfg.address_settings) == {ARG_RING_SIZE: 7}
    lvq = QueueSpec(name="lvq.ibm", address="lvq.ibm")
    assert queue_arguments(lvq, cfg.address_settings) == {
        ARG_LAST_VALUE_KEY: "ticker",
        ARG_NON_DESTRUCTIVE: True,
    }
    assert queue_arguments(QueueSpec(name="other"), cfg.address_settings) == {}


def test_most_specific_match_wins_and_merges() -> None:
    cfg = parse_artemis_xml(BROKER_XML)
    big = resolve_address_settings(cfg.address_settings, "ring.big")
    assert big.default_ring_size == 100  # literal match beats ring.#
    assert big.address_full_policy == "FAIL"  # unset there: merged from ring.#
    assert resolve_address_settings(cfg.address_settings, "nothing").default_ring_size is None


def test_artemis_without_namespace_and_bare_core() -> None:
    cfg = parse_artemis_xml(
        "<core><addresses><address name='a'><anycast><queue name='a' ring-size='-1'/>"
        "</anycast></address></addresses></core>"
    )
    assert cfg.queues[0].arguments == {}  # -1 means no ring
    assert cfg.refresh_period_ms == 5000


@pytest.mark.parametrize(
    ("xml", "needle"),
    [
        ("<configuration/>", "no <core>"),
        ("<core><addresses><address><anycast/></address></addresses></core>", "without a name"),
        (
            "<core><addresses><address name='a'><anycast><queue name='q' ring-size='x'/>"
            "</anycast></address></addresses></core>",
            "expected an integer",
        ),
        (
            "<core><address-settings><address-setting match='#'>"
            "<address-full-policy>SPILL</address-full-policy></address-setting>"
            "</address-settings></core>",
            "unknown policy",
        ),
        (
            "<core><address-settings><address-setting match='#'>"
            "<max-size-bytes>10XB</max-size-bytes></address-setting></address-settings></core>",
            "bad size",
        ),
        ("<core><unclosed></core>", "malformed XML"),
        (
            '<!DOCTYPE x [<!ENTITY a "aaaa">]><core>&a;</core>',
            "forbidden XML",
        ),
    ],
)
def test_artemis_errors(xml: str, needle: str) -> None:
    # the last case: entity declarations are refused (billion laughs), not expanded
    with pytest.raises(ConfigError, match=needle):
        parse_artemis_xml(xml)


@pytest.mark.parametrize(
    ("pattern", "address", "expected"),
    [
        ("#", "a.b.c", True),
        ("#", "a", True),
        ("ring.#", "ring", True),
        ("ring.#", "ring.a.b", True),
        ("ring.*", "ring.a", True),
        ("ring.*", "ring.a.b", False),
        ("ring.*", "ring", False),
        ("a.*.c", "a.b.c", True),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.x.y.c", True),
        ("exact", "exact", True),
        ("exact", "exactly", False),
    ],
)
def test_artemis_match(pattern: str, address: str, expected: bool) -> None:
    assert artemis_match(pattern, address) is expected


@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=5))
def test_hash_matches_everything_and_literal_matches_itself(words: list[str]) -> None:
    address = ".".join(words)
    assert artemis_match("#", address)
    assert artemis_match(address, address)
    assert artemis_match(".".join(["*"] * len(words)), address)


def test_load_config_dispatches_on_content(tmp_path: Path) -> None:
    t = tmp_path / "ringmq.toml"
    t.write_text("[limits]\nheartbeat_s = 5\n")
    assert load_config(t).limits.heartbeat_s == 5
    x = tmp_path / "broker.xml"
    x.write_text(BROKER_XML)
    assert load_config(x).kind == "artemis"
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


def test_address_setting_defaults_are_unset() -> None:
    s = AddressSetting(match="#")
    assert all(getattr(s, f) is None for f in AddressSetting.__slots__ if f != "match")


@pytest.mark.parametrize(
    "text",
    [
        "management.http.max_body_size = 1048576\n",  # RabbitMQ's key, verbatim
        "[management]\nhttp.max_body_size = 1048576\n",
        "[management.http]\nmax_body_size = 1048576\n",
    ],
)
def test_management_max_body_size(text: str) -> None:
    assert parse_toml(text).management.max_body_size == 1048576


def test_management_max_body_size_unset_is_the_default() -> None:
    # None: the management layer's default (20 MiB, bodies.DEFAULT_MAX_BODY_SIZE)
    assert parse_toml("").management.max_body_size is None
    assert parse_toml("[management.http]\n").management.max_body_size is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[management.http]\nmax_body_size = 0\n", "max_body_size: must be >= 1, got 0"),
        ("[management.http]\nmax_body_size = -5\n", "must be >= 1"),
        ("[management.http]\nmax_body_size = '20MiB'\n", "max_body_size: expected an integer"),
        ("[management.http]\nmax_body_size = 1.5\n", "expected an integer"),
        ("[management.http]\nmax_body_size = true\n", "got a boolean"),
        ("[management.http]\nmax_body = 10\n", r"management\.http: unknown key\(s\) 'max_body'"),
        ("[management]\nmax_body_size = 10\n", r"management: unknown key\(s\) 'max_body_size'"),
        ("management = 3\n", "must be a table"),
        ("management.http = 3\n", "http: expected a table"),
    ],
)
def test_management_max_body_size_refuses_unknown_values(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_toml(text)
