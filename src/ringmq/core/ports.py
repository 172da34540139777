"""The narrow ports the storage glue is built from, instead of a back-reference to the broker.

Theory of operation: durability (`durability.py`), definition sync (`defsync.py`), recovery
(`recovery.py`) and the stream books (`streambooks.py`) are built by the composition root
(`broker.py`, the one module that imports them all) from what they use, named here as
`Protocol`s by what they provide:

* `Registry`: the definitions the broker holds (configuration, users and permissions,
  policies, vhosts with their exchanges and queues, de-duplication windows); `State`
  provides it;
* `Restorer`: the steps recovery recreates definitions and messages with; `Restore`
  provides it;
* `LeaseRecovery`: the streams API's leases back from their stored form; `StreamBooks`
  provides it.

The store side is `storeport.py`'s (`StorePort`, `DefinitionStorePort`). None of these
imports a module that imports them back, so each part of the glue can be tested, or replaced
(a follower applying a replicated log, a shard in another process), without a broker.

No state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ringmq.core.auth import AuthDB
    from ringmq.core.config import BrokerConfig
    from ringmq.core.dedup import PublishDedup
    from ringmq.core.entities import QueueEntity
    from ringmq.core.exchange import Exchange
    from ringmq.core.limits import TenantLimits
    from ringmq.core.message import Message
    from ringmq.core.parameters import Parameters
    from ringmq.core.policies import PolicyTable
    from ringmq.core.routing import ExchangeType
    from ringmq.core.vhost import VHost


class Registry(Protocol):
    """The broker's definitions, read (and, at recovery, written) in place (`State`)."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def auth(self) -> AuthDB: ...

    @property
    def policies(self) -> PolicyTable: ...

    @property
    def vhosts(self) -> Mapping[str, VHost]: ...

    @property
    def dedup(self) -> PublishDedup: ...

    @property
    def limits(self) -> TenantLimits: ...

    @property
    def parameters(self) -> Parameters: ...


class Restorer(Protocol):
    """Recovery's steps into the owners (`Restore`): no client checks, objects were valid
    when they were declared."""

    def vhost(self, name: str) -> VHost:
        """The vhost `name`, created with its standard exchanges if missing."""
        ...

    def exchange(
        self,
        vhost: str,
        name: str,
        kind: ExchangeType,
        *,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any],
    ) -> None:
        """Recreate a durable exchange."""
        ...

    def queue(
        self,
        vhost: str,
        name: str,
        *,
        auto_delete: bool,
        arguments: Mapping[str, Any],
        now_ms: int,
        shard: int | None = None,
    ) -> None:
        """Recreate a durable queue (one whose settings no longer validate is skipped); a
        copy of shard `shard`'s queue when given."""
        ...

    def binding(
        self,
        vhost: str,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any],
    ) -> None:
        """Recreate a binding between durable objects (dangling ones are skipped)."""
        ...

    def held(self, vh: VHost, x: Exchange, seq: int, msg: Message, due_ms: int) -> None:
        """Delayed exchange `x` holds `msg` again (number `seq`) until `due_ms`."""
        ...

    def recovered_queue(self, q: QueueEntity, now_ms: int) -> None:
        """Messages were put back into `q`: arm its timers and let it dispatch."""
        ...


class LeaseRecovery(Protocol):
    """The streams API's leases rebuilt from the store (`StreamBooks`)."""

    def recover(self, stored: Mapping[str, Any], now_ms: int) -> int:
        """Rebuild the books from stored leases; returns the held messages put back."""
        ...
