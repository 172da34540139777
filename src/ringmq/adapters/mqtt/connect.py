"""What a CONNECT is checked for before any login, how its user name picks the vhost, and the
CONNACK of an accepted connection (pure functions of the MQTT adapter's handler)."""

from __future__ import annotations

from collections.abc import Container
from typing import Final

from ringmq.adapters.mqtt.topics import TopicError, check_topic_name
from ringmq.mqtt import V5, Reason
from ringmq.mqtt.packets import ConnAck, Connect
from ringmq.mqtt.properties import Properties

TOPIC_ALIAS_MAXIMUM: Final = 64
"""Inbound topic aliases a client may use (CONNACK's Topic Alias Maximum)."""


def connect_refusal(c: Connect, *, by_cert: bool = False) -> tuple[Reason, str] | None:
    """Why a CONNECT is refused before any login (None: it is not); `by_cert`: the client
    logs in by its certificate, without a user name."""
    if not c.client_id and not c.clean_start and c.protocol_level != V5:
        return Reason.CLIENT_IDENTIFIER_NOT_VALID, "empty client id, clean session 0"
    if c.will is not None:
        try:
            check_topic_name(c.will.topic)
        except TopicError as exc:
            return Reason.TOPIC_NAME_INVALID, str(exc)
    return None


def credentials(
    c: Connect, vhosts: Container[str], anonymous: tuple[str, str] | None
) -> tuple[str, str, str] | None:
    """(vhost, user, password) to log in with; None when there is nothing to try.

    A CONNECT without a user name is an anonymous client: it logs in as the broker's
    anonymous login (RabbitMQ 4's `anonymous_login_user`, guest by default: loopback only, as
    mosquitto 2 allows anonymous clients on its local-only listener), in the default vhost.
    """
    if c.username is None:
        if anonymous is None:
            return None
        user, password = anonymous
        return "/", user, password
    vhost, user = vhost_and_user(c.username, vhosts)
    return vhost, user, (c.password or b"").decode("utf-8", "replace")


def vhost_and_user(username: str, vhosts: Container[str]) -> tuple[str, str]:
    """RabbitMQ's rule: "vhost:user" names the vhost (when it exists); a plain name, or one
    whose prefix is no vhost, uses the default vhost "/"."""
    vhost, sep, user = username.partition(":")
    if sep and vhost in vhosts:
        return vhost, user
    return "/", username


def connack(present: bool, v5: bool, assigned: str | None, max_packet_size: int) -> ConnAck:
    """The CONNACK of an accepted connection (5.0: what the server offers)."""
    ack = ConnAck(Reason.SUCCESS, present)
    if v5:
        ack.properties = Properties(
            assigned_client_identifier=assigned,
            topic_alias_maximum=TOPIC_ALIAS_MAXIMUM,
            maximum_packet_size=max_packet_size,
            retain_available=1,
            wildcard_subscription_available=1,
            subscription_identifier_available=1,
            shared_subscription_available=1,
        )
    return ack
