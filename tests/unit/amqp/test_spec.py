"""Generated method classes: round-trips, pamqp differential tests, validation of bad input."""

from __future__ import annotations

import struct
import warnings
from dataclasses import fields
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands as pc
from pamqp import frame as pframe

from ringmq.amqp import spec
from ringmq.amqp.frames import encode_method_frame
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from tests.unit.amqp.strategies import ALL_METHODS, error_code, methods, normalise


def _pamqp_class(cls: type[spec.Method]) -> Any:
    return pc.INDEX_MAPPING[(cls.CLASS_ID << 16) | cls.METHOD_ID]


def _values(method: spec.Method) -> list[Any]:
    """Field values in wire order, reserved fields left out (pamqp validates its own)."""
    return [
        getattr(method, f.name)
        for f in fields(method)  # type: ignore[arg-type]
        if not f.name.startswith("reserved_")
    ]


def _pamqp_method(method: spec.Method) -> Any:
    pcls = _pamqp_class(type(method))
    # pamqp wants str for longstr fields; oracle-safe longstrs are ASCII.
    kwargs = {
        pname: getattr(method, ours).decode()
        if isinstance(getattr(method, ours), bytes)
        else getattr(method, ours)
        for pname, (ours, _) in zip(pcls.__slots__, method.DOMAINS, strict=True)
        if not ours.startswith("reserved_")
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pamqp warns on basic.recover-async
        return pcls(**kwargs)


def test_every_method_of_the_seven_classes_is_generated() -> None:
    ours = {(c.CLASS_ID, c.METHOD_ID) for c in ALL_METHODS}
    theirs = {(i >> 16, i & 0xFFFF) for i in pc.INDEX_MAPPING}
    assert ours == theirs
    assert len(ours) == 66 or len(ours) == len(theirs)
    assert spec.BasicNack.METHOD_ID == 120
    assert spec.ExchangeUnbindOk.METHOD_ID == 51  # RabbitMQ's id
    assert spec.ConnectionUpdateSecret.SYNCHRONOUS
    assert spec.BasicPublish.CONTENT
    assert spec.BasicDeliver.CONTENT
    assert not spec.BasicAck.CONTENT


def test_spec_names_and_defaults() -> None:
    ack = spec.BasicAck(delivery_tag=5, multiple=True)
    assert (ack.delivery_tag, ack.multiple) == (5, True)
    assert spec.BasicNack().requeue is True
    assert spec.BasicReject(delivery_tag=1).requeue is True
    assert spec.BasicQos(global_=True).global_ is True
    q = spec.QueueDeclare(queue="q", no_wait=True, auto_delete=True)
    assert q.reserved_1 == 0
    assert q.arguments == {}
    assert spec.ExchangeDeclare().type == "direct"
    assert spec.ConnectionOpen().virtual_host == "/"
    assert spec.ConfirmSelect(no_wait=True).no_wait


@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda c: c.NAME)
@settings(max_examples=6)
@given(data=st.data())
def test_round_trip_every_method(cls: type[spec.Method], data: st.DataObject) -> None:
    method = data.draw(methods(cls))
    payload = method.encode()
    assert spec.decode_method(payload) == method
    assert spec.decode_method(memoryview(payload)) == method
    assert spec.decode_method(bytearray(payload)) == method


@pytest.mark.parametrize("cls", ALL_METHODS, ids=lambda c: c.NAME)
def test_defaults_round_trip(cls: type[spec.Method]) -> None:
    assert spec.decode_method(cls().encode()) == cls()


@given(methods(oracle_safe=True))
def test_pamqp_decodes_what_we_encode(method: spec.Method) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # pamqp warns on basic.recover-async
        _consumed, channel, decoded = pframe.unmarshal(encode_method_frame(3, method))
    assert channel == 3
    assert isinstance(decoded, _pamqp_class(type(method)))
    theirs = [
        normalise(getattr(decoded, pname))
        for pname, (ours, _) in zip(decoded.__slots__, method.DOMAINS, strict=True)
        if not ours.startswith("reserved_")
    ]
    assert theirs == normalise(_values(method))


@given(methods(oracle_safe=True))
def test_we_decode_what_pamqp_encodes(method: spec.Method) -> None:
    wire = pframe.marshal(_pamqp_method(method), 1)
    decoded = spec.decode_method(wire[7:-1])
    assert normalise(_values(decoded)) == normalise(_values(method))


@given(methods(oracle_safe=True))
def test_byte_identical_to_pamqp_without_tables(method: spec.Method) -> None:
    if any(domain == "table" for _, domain in method.DOMAINS):
        return  # pamqp sorts keys and picks the smallest int type; we follow pika there
    if isinstance(method, spec.ChannelOpen | spec.ChannelOpenOk):
        return  # pamqp's reserved-1 default is "0", the spec's (and ours) is empty
    assert encode_method_frame(1, method) == pframe.marshal(_pamqp_method(method), 1)


@given(methods(), st.data())
def test_every_truncation_is_a_frame_error(method: spec.Method, data: st.DataObject) -> None:
    payload = method.encode()
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises(AMQPError) as err:
        spec.decode_method(payload[:cut])
    assert err.value.code is ReplyCode.FRAME_ERROR


@given(methods(), st.binary(min_size=1, max_size=5))
def test_trailing_bytes_are_a_frame_error(method: spec.Method, extra: bytes) -> None:
    with pytest.raises(AMQPError) as err:
        spec.decode_method(method.encode() + extra)
    assert err.value.code is ReplyCode.FRAME_ERROR
    assert (err.value.class_id, err.value.method_id) == (method.CLASS_ID, method.METHOD_ID)


def test_invalid_utf8_shortstr_is_a_syntax_error() -> None:
    payload = spec.QueueDeclare(queue="ab").encode().replace(b"\x02ab", b"\x02\xff\xfe")
    with pytest.raises(AMQPError) as err:
        spec.decode_method(payload)
    assert err.value.code is ReplyCode.SYNTAX_ERROR
    assert (err.value.class_id, err.value.method_id) == (50, 10)


def test_bad_table_type_is_a_syntax_error() -> None:
    payload = spec.QueueDeclare(queue="q", arguments={"k": 1}).encode()
    payload = payload.replace(b"\x01kI", b"\x01kZ")
    with pytest.raises(AMQPError) as err:
        spec.decode_method(payload)
    assert err.value.code is ReplyCode.SYNTAX_ERROR


def test_unknown_class_and_method() -> None:
    with pytest.raises(AMQPError) as err:
        spec.decode_method(struct.pack(">HH", 99, 10))
    assert err.value.code is ReplyCode.NOT_IMPLEMENTED
    with pytest.raises(AMQPError) as err:
        spec.decode_method(struct.pack(">HH", 60, 999))
    assert err.value.code is ReplyCode.COMMAND_INVALID
    with pytest.raises(AMQPError) as err:
        spec.decode_method(b"\x00<")
    assert err.value.code is ReplyCode.FRAME_ERROR


@given(st.binary(max_size=64))
def test_random_payloads_raise_only_amqp_errors(payload: bytes) -> None:
    assert error_code(spec.decode_method, payload) in {None, 501, 502, 503, 540}


@given(st.sampled_from(ALL_METHODS), st.binary(max_size=40))
def test_random_arguments_raise_only_amqp_errors(cls: type[spec.Method], args: bytes) -> None:
    payload = struct.pack(">HH", cls.CLASS_ID, cls.METHOD_ID) + args
    assert error_code(spec.decode_method, payload) in {None, 501, 502}


def test_shortstr_over_255_bytes_raises_on_encode() -> None:
    with pytest.raises(ValueError, match=r"QueueDeclare.queue: shortstr is 256 bytes"):
        spec.QueueDeclare(queue="é" * 128).encode()
    assert spec.QueueDeclare(queue="q" * 255).encode()


def test_bits_pack_into_one_octet() -> None:
    payload = spec.QueueDeclare(
        queue="", passive=True, durable=False, exclusive=True, auto_delete=False, no_wait=True
    ).encode()
    # class, method, reserved-1, empty shortstr, one octet of bits, empty table
    assert payload == b"\x00\x32\x00\x0a\x00\x00\x00" + bytes([0b10101]) + b"\x00\x00\x00\x00"
