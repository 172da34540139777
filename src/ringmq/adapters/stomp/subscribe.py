"""The queues behind STOMP destinations: what a SEND declares first and what a SUBSCRIBE reads.

Each function is a step of the caller's core call (the handler's `begin` ... `finish`): it calls
the core's owners with plain values and raises `BrokerError` when refused. Queue parameters come
from the frame as RabbitMQ reads them (`durable` / `persistent`, `auto-delete`, `exclusive`,
`x-queue-name`, and `x-*` queue arguments typed by the one table of queue arguments,
`core.arguments`), durable subscriptions as both brokers name them:

* RabbitMQ: `/topic/k` with `durable:true` and an `id`: a durable queue named after the id
  and the destination (`stomp-subscription-<digest>`), kept across connections (auto-delete
  only with `auto-delete:true`);
* Artemis: a MULTICAST address with the CONNECT's `client-id` and the SUBSCRIBE's
  `durable-subscription-name` (or `activemq.subscriptionName`): the durable queue
  `<client-id>.<name>` bound to the address.

A SUBSCRIBE to an existing queue that gives no queue parameter uses the queue as it is (RabbitMQ
redeclares it, and refuses the subscription when the queue has arguments the frame lacks).

Every other subscription to a topic, exchange or multicast address gets an exclusive,
auto-delete queue of its own, `stomp-subscription-<random>` (RabbitMQ's prefix, so a policy
matching `^stomp-` reaches them).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ringmq.adapters.stomp.destinations import Destination, Dialects, Kind, parse
from ringmq.core.arguments import BY_ARGUMENT
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import Session

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

SUBSCRIPTION_PREFIX = "stomp-subscription-"
TEMP_PREFIX = "stomp-temp-queue-"


def truthy(text: str | None) -> bool:
    """A STOMP boolean header: "true" (any case) is true."""
    return text is not None and text.strip().lower() == "true"


def _typed(name: str, text: str) -> Any:
    # A queue argument from a header (text) typed as the argument table's example is.
    example = BY_ARGUMENT[name].example
    if isinstance(example, bool):
        if text.strip().lower() in ("true", "false"):
            return truthy(text)
        return text
    if isinstance(example, int):
        try:
            return int(text.strip())
        except ValueError:
            return text  # the argument's own check refuses it with its text
    return text


def queue_arguments(headers: Mapping[str, str]) -> dict[str, Any]:
    """The `x-*` queue arguments a frame's headers carry."""
    return {k: _typed(k, v) for k, v in headers.items() if k in BY_ARGUMENT}


def stream_offset_argument(text: str) -> Any:
    """A SUBSCRIBE's `x-stream-offset` header as the core's argument, in RabbitMQ STOMP's
    forms: `first`, `last`, `next`, `offset=<n>`, `timestamp=<unix seconds>`; also a bare
    number and an interval such as `1h` (as AMQP 0-9-1 takes them). Anything else goes as
    text, for the core to refuse."""
    text = text.strip()
    kind, eq, value = text.partition("=")
    if eq and value.isascii() and value.isdigit():
        if kind == "offset":
            return int(value)
        if kind == "timestamp":
            return datetime.fromtimestamp(int(value), UTC)
    if text.isascii() and text.isdigit():
        return int(text)
    return text


_PARAMS = frozenset({"durable", "persistent", "auto-delete", "exclusive"})


def _queue_params(headers: Mapping[str, str]) -> bool:
    # The frame says something about the queue (then it is declared, and must be equivalent).
    return any(k in _PARAMS or k in BY_ARGUMENT for k in headers)


class Subscriber:
    """Destinations to queues for one connection (see the module docstring)."""

    def __init__(self, broker: Broker, dialects: Dialects) -> None:
        self.broker = broker
        self.dialects = dialects

    def destination(self, text: str, headers: Mapping[str, str], s: Session) -> Destination:
        """Read destination `text` in the vhost of `s`."""
        if not text:
            raise BrokerError(Condition.NOT_FOUND, "missing destination")
        vh = s.vhost
        return parse(
            text,
            headers,
            self.dialects,
            exchange_exists=lambda n: n in vh.exchanges,
            queue_exists=lambda n: n in vh.queues,
            routing_for=self._routing_for,
        )

    def _routing_for(self, name: str) -> str | None:
        routing = self.broker.address_settings.resolve(name).routing_type
        return None if routing is None else str(routing)

    def _may_create(self, s: Session, dest: Destination) -> None:
        # Artemis' auto-create-queues / auto-create-addresses for an anycast address.
        if (
            dest.kind is Kind.ANYCAST
            and dest.name not in s.vhost.queues
            and not self.broker.address_settings.resolve(dest.name).may_auto_create
        ):
            raise BrokerError(
                Condition.NOT_FOUND,
                f"no queue '{dest.name}' in vhost '{s.vhost.name}' and auto-create-queues "
                "is off for this address",
            )

    # ------------------------------------------------------------------ declares
    def _declare(
        self,
        s: Session,
        name: str,
        headers: Mapping[str, str],
        now_ms: int,
        *,
        durable: bool,
        exclusive: bool = False,
        auto_delete: bool = False,
    ) -> str:
        h = headers
        if "durable" in h or "persistent" in h:
            durable = truthy(h.get("durable") or h.get("persistent"))
        if "auto-delete" in h:
            auto_delete = truthy(h.get("auto-delete"))
        if "exclusive" in h:
            exclusive = truthy(h.get("exclusive"))
        self.broker.topology.declare_queue(
            s,
            name,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=queue_arguments(h),
            now_ms=now_ms,
        )
        return name

    def _address(self, s: Session, name: str) -> None:
        # An Artemis multicast address: a fanout exchange of that name (broker.xml's mapping).
        if name not in s.vhost.exchanges:
            self.broker.exchanges.declare_exchange(
                s.vhost,
                name,
                "fanout",
                durable=True,
                auto_delete=False,
                internal=False,
                arguments=None,
                grant=s,
            )

    def prepare_send(
        self, s: Session, dest: Destination, headers: Mapping[str, str], now_ms: int
    ) -> None:
        """Make what a SEND to `dest` needs: the queue of `/queue/n` or of an anycast
        address when missing (durable), the exchange of a multicast address."""
        match dest.kind:
            case Kind.QUEUE | Kind.ANYCAST:
                if dest.name not in s.vhost.queues:
                    self._may_create(s, dest)
                    self._declare(s, dest.name, headers, now_ms, durable=True)
            case Kind.MULTICAST:
                self._address(s, dest.name)
            case _:
                pass

    def queue_for(
        self,
        s: Session,
        dest: Destination,
        headers: Mapping[str, str],
        sub_id: str,
        client_id: str,
        now_ms: int,
    ) -> tuple[str, bool]:
        """The queue a SUBSCRIBE to `dest` reads, declared and bound as its kind says;
        (name, whether it is a durable subscription's queue)."""
        match dest.kind:
            case Kind.QUEUE | Kind.ANYCAST:
                if dest.name in s.vhost.queues and not _queue_params(headers):
                    return dest.name, False  # an existing queue, used as it is
                self._may_create(s, dest)
                return self._declare(s, dest.name, headers, now_ms, durable=True), False
            case Kind.AMQ_QUEUE:
                return dest.name, False
            case Kind.TOPIC | Kind.EXCHANGE:
                durable = truthy(headers.get("durable") or headers.get("persistent"))
                name = headers.get("x-queue-name")
                if name is None and durable:
                    name = SUBSCRIPTION_PREFIX + _digest(f"{sub_id}\n{dest.text}")
                return self._bound(s, dest, name, headers, now_ms, durable=durable)
            case Kind.MULTICAST:
                self._address(s, dest.name)
                sub_name = headers.get("durable-subscription-name") or headers.get(
                    "activemq.subscriptionName"
                )
                if sub_name and not client_id:
                    raise BrokerError(
                        Condition.PRECONDITION_FAILED,
                        "a durable subscription needs a client-id on CONNECT",
                    )
                name = f"{client_id}.{sub_name}" if sub_name else None
                return self._bound(s, dest, name, headers, now_ms, durable=bool(sub_name))
            case _:
                raise BrokerError(Condition.NOT_FOUND, f"cannot subscribe to '{dest.text}'")

    def _bound(
        self,
        s: Session,
        dest: Destination,
        name: str | None,
        headers: Mapping[str, str],
        now_ms: int,
        *,
        durable: bool,
    ) -> tuple[str, bool]:
        # A subscription's own queue bound to the destination's exchange.
        if name is None:
            name = self.broker.state.gen_name(SUBSCRIPTION_PREFIX)
            self._declare(s, name, headers, now_ms, durable=False, exclusive=True, auto_delete=True)
        else:
            self._declare(s, name, headers, now_ms, durable=durable)
        self.broker.topology.bind_queue(s, name, dest.exchange, dest.routing_key, None)
        return name, durable

    def temp_queue(self, s: Session, now_ms: int) -> str:
        """A new temp queue (exclusive to the connection) for a `reply-to:/temp-queue/...`."""
        name = self.broker.state.gen_name(TEMP_PREFIX)
        self.broker.topology.declare_queue(
            s, name, durable=False, exclusive=True, auto_delete=True, arguments=None, now_ms=now_ms
        )
        return name

    def delete_queue(self, s: Session, name: str, now_ms: int) -> None:
        """Delete a durable subscription's queue (UNSUBSCRIBE of a durable subscription)."""
        topology = self.broker.topology
        deleted, _count = topology.delete_for(s, name, if_unused=False, if_empty=False)
        if deleted:
            topology.delete_named(s, deleted, now_ms)


def _digest(text: str) -> str:
    raw = hashlib.sha256(text.encode()).digest()[:16]
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
