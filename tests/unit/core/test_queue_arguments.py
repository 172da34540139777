"""The queue-argument table is read the same way by every layer that knows queue arguments.

`ringmq.core.arguments.QUEUE_ARGUMENTS` is the one declaration of a queue argument; settings
parsing, policy validation, redeclare equivalence, the management API's queue settings and
broker.xml address-setting defaults derive their views from it. Each test below takes every row
through one of those readers, by its public behaviour, and fails if a reader drops a row or
sends it to another field than the table says.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from ringmq.core.arguments import (
    ADDRESS_DEFAULTS,
    BY_ARGUMENT,
    EQUIVALENCE_ARGUMENTS,
    QUEUE_ARGUMENTS,
    QueueArgument,
)
from ringmq.core.argvalues import UNSET
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.policies import POLICY_KEYS, AddressSettings, PolicyError, validate_definition
from ringmq.core.settings import QueueSettings, resolve_queue_settings
from ringmq.management.admin import SETTING_ARGUMENTS as MANAGEMENT_SETTINGS
from ringmq.management.admin import settings_arguments
from ringmq.server.configfile import AddressSetting, QueueSpec, parse_artemis_xml, queue_arguments
from tests.unit.core.corekit import Core

ROWS = [pytest.param(row, id=row.argument) for row in QUEUE_ARGUMENTS]
NAMES = [pytest.param(row, name, id=name) for row in QUEUE_ARGUMENTS for name in row.names]
POLICY_ROWS = [pytest.param(r, id=r.argument) for r in QUEUE_ARGUMENTS if r.policy_key]
SETTING_ROWS = [pytest.param(r, id=r.argument) for r in QUEUE_ARGUMENTS if r.setting_key]
DEFAULT_ROWS = [pytest.param(r, id=r.argument) for r in ADDRESS_DEFAULTS]

# A dead-letter routing key is refused without a dead-letter exchange (RabbitMQ's rule), in
# arguments and in policies alike: declare one beside it.
_NEEDS = {"dead_letter_routing_key": ("x-dead-letter-exchange", "dead-letter-exchange", "dlx")}


def _arguments(row: QueueArgument, name: str) -> dict[str, Any]:
    args = {name: row.example}
    if row.field in _NEEDS:
        arg, _key, value = _NEEDS[row.field]
        args[arg] = value
    return args


def _expected(row: QueueArgument, name: str) -> Any:
    value = row.parse("q", name, row.example)
    assert value is not UNSET, "a row's example must set its field"
    assert value != row.off, "a row's example must set its field"
    return value


def test_rows_are_well_formed() -> None:
    names = [name for row in QUEUE_ARGUMENTS for name in row.names]
    assert len(names) == len(set(names)) == len(BY_ARGUMENT)
    settings_fields = {f.name for f in fields(QueueSettings)}
    for row in QUEUE_ARGUMENTS:
        assert row.field is None or row.field in settings_fields, row.argument
        assert (row.policy_key is None) == (row.policy_check is None), row.argument
        assert all(name.startswith(("x-", "qpid.")) for name in row.names)


@pytest.mark.parametrize(("row", "name"), NAMES)
def test_every_argument_and_alias_sets_its_field(row: QueueArgument, name: str) -> None:
    settings = resolve_queue_settings("q", _arguments(row, name))
    if row.field is None:  # validated only (x-queue-type)
        return
    assert settings.sources.get(row.field) == "argument"
    assert getattr(settings, row.field) == _expected(row, name)


@pytest.mark.parametrize("row", POLICY_ROWS)
def test_policy_key_is_accepted_and_sets_the_arguments_field(row: QueueArgument) -> None:
    assert row.policy_key is not None
    assert row.field is not None
    definition = {row.policy_key: row.example}
    if row.field in _NEEDS:
        _arg, key, value = _NEEDS[row.field]
        definition[key] = value
    assert validate_definition(definition) == definition
    by_policy = resolve_queue_settings("q", {}, policy=definition)
    by_argument = resolve_queue_settings("q", _arguments(row, row.argument))
    assert by_policy.sources.get(row.field) == "policy"
    assert getattr(by_policy, row.field) == getattr(by_argument, row.field)


def test_policy_keys_are_the_tables_plus_exchange_keys() -> None:
    table_keys = {row.policy_key for row in QUEUE_ARGUMENTS if row.policy_key}
    assert set(POLICY_KEYS) == table_keys | {"alternate-exchange"}
    with pytest.raises(PolicyError, match="unrecognised policy key 'max-priority'"):
        validate_definition({"max-priority": 10})  # no row gives x-max-priority a policy key


@pytest.mark.parametrize("row", SETTING_ROWS)
def test_management_setting_key_declares_the_rows_argument(row: QueueArgument) -> None:
    assert row.setting_key is not None
    assert settings_arguments({row.setting_key: row.example}) == {row.argument: row.example}
    underscored = row.setting_key.replace("-", "_")
    assert settings_arguments({underscored: row.example}) == {row.argument: row.example}


def test_management_knows_only_the_tables_setting_keys() -> None:
    table = {r.setting_key: r.argument for r in QUEUE_ARGUMENTS if r.setting_key}
    assert table == MANAGEMENT_SETTINGS
    with pytest.raises(ValueError, match="unknown setting 'max-priority'") as info:
        settings_arguments({"max-priority": 10})
    assert f"(known: {', '.join(sorted(table))}, or any x-* argument)" in str(info.value)


def _redeclare_error(kit: Core, name: str, value: Any) -> BrokerError | None:
    chan = kit.open()
    queue = f"q-{name}"
    kit.declare(chan, queue)
    try:
        kit.declare(chan, queue, {name: value})
    except BrokerError as exc:
        return exc
    return None


@pytest.mark.parametrize(("row", "name"), NAMES)
def test_redeclare_compares_every_equivalence_row(row: QueueArgument, name: str) -> None:
    assert (name in EQUIVALENCE_ARGUMENTS) == row.redeclare
    # x-queue-type's example, "classic", is the default: a redeclare must name another type
    value = "quorum" if name == "x-queue-type" else row.example
    err = _redeclare_error(Core(), name, value)
    if not row.redeclare:
        assert err is None
        return
    assert err is not None
    assert err.condition is Condition.PRECONDITION_FAILED
    assert err.explanation.startswith(f"inequivalent arg '{name}' for queue 'q-{name}'")


def test_arguments_outside_the_table_are_not_compared_on_redeclare() -> None:
    assert _redeclare_error(Core(), "x-queue-mode", "lazy") is None


@pytest.mark.parametrize("row", DEFAULT_ROWS)
def test_broker_xml_address_default_declares_the_rows_argument(row: QueueArgument) -> None:
    assert row.address_default is not None
    text = str(row.example).lower() if isinstance(row.example, bool) else str(row.example)
    cfg = parse_artemis_xml(
        '<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">'
        f'<address-settings><address-setting match="q.#"><{row.address_default}>{text}'
        f"</{row.address_default}></address-setting></address-settings></core></configuration>"
    )
    setting = cfg.address_settings[0]
    assert getattr(setting, row.address_default.replace("-", "_")) == row.example
    args = queue_arguments(QueueSpec(name="q.a", address="q.a"), cfg.address_settings)
    assert args == {row.argument: row.example}
    assert row.field is not None
    assert resolve_queue_settings("q.a", args).sources.get(row.field) == "argument"
    # the queue's own argument wins over the default
    own = queue_arguments(
        QueueSpec(name="q.a", address="q.a", arguments={row.argument: "own"}),
        (AddressSetting(match="q.#", **{row.address_default.replace("-", "_"): row.example}),),
    )
    assert own == {row.argument: "own"}


def test_core_address_settings_defaults_are_table_rows() -> None:
    # The routing-type defaults name what a plain address is, not a queue argument's default.
    defaults = {
        f.name
        for f in fields(AddressSettings)
        if f.name.startswith("default_") and not f.name.endswith("_routing_type")
    }
    by_attr = {
        r.address_default.replace("-", "_"): r for r in ADDRESS_DEFAULTS if r.address_default
    }
    assert defaults <= set(by_attr)
    for attr in sorted(defaults):
        row = by_attr[attr]
        assert row.field is not None
        settings = resolve_queue_settings(
            "q", {}, address_settings=AddressSettings(**{attr: row.example})
        )
        assert settings.sources.get(row.field) == "address-settings"
        assert getattr(settings, row.field) == _expected(row, row.argument)
