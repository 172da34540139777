"""Runtime parameters: RabbitMQ's per-vhost `parameters` and its `global_parameters`.

Theory of operation
-------------------
A RabbitMQ definitions export carries runtime parameters: per vhost, a `component`, a `name`
and a JSON `value` (federation upstreams, shovels, vhost limits...), and node-wide global
parameters (`cluster_name`, `internal_cluster_id`...). ringmq keeps every one it is given
(`Parameters`), shows them (`/api/parameters`, `/api/global-parameters`, the definitions
export) and stores them with the durable definitions, so an export moves over whole. It acts
on a parameter only where it implements the component:

* `vhost-limits` is the vhost's limits (`core/limits.py`): it is not kept here but read from
  and written to `TenantLimits`, so the two never disagree;
* every other component (`federation-upstream`, `shovel`...) and every global parameter is
  kept and reported as not acted on, with the reason (`not_acted_on`): ringmq has no
  federation or shovel, and names its node itself.

What this module owns: the two tables. It never refuses a component (an export must import
whole); the management layer checks shapes. Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["LIMITS_COMPONENT", "Parameters", "not_acted_on"]

LIMITS_COMPONENT: Final = "vhost-limits"
"""The component of the vhost limits: acted on, kept in `TenantLimits`."""

_WHY_NOT: Final[dict[str, str]] = {
    "federation-upstream": "ringmq has no federation plugin",
    "federation-upstream-set": "ringmq has no federation plugin",
    "shovel": "ringmq has no shovel plugin",
    "operator_policy": "operator policies are not implemented",
    "mqtt-port-to-vhost-mapping": "ringmq's MQTT listener serves one vhost",
}
_WHY_NOT_GLOBAL: Final[dict[str, str]] = {
    "cluster_name": "names the exporting RabbitMQ cluster; ringmq names its node itself",
    "internal_cluster_id": "identifies the exporting RabbitMQ cluster",
}


def not_acted_on(component: str | None, name: str) -> str | None:
    """Why ringmq does not act on a parameter (`component` None: a global one named `name`),
    None when it does."""
    if component is None:
        return _WHY_NOT_GLOBAL.get(name, "global parameter not used by ringmq")
    if component == LIMITS_COMPONENT:
        return None
    return _WHY_NOT.get(component, f"component {component!r} is not implemented by ringmq")


class Parameters:
    """The runtime parameters ringmq keeps (see the module docstring)."""

    def __init__(self) -> None:
        self.vhost: dict[tuple[str, str, str], Any] = {}
        """(vhost, component, name) -> value; never `vhost-limits` (those are limits)."""
        self.globals: dict[str, Any] = {}
        """name -> value."""

    def set(self, vhost: str, component: str, name: str, value: Any) -> None:
        """Keep a parameter (`vhost-limits` is a wiring error: limits keep those)."""
        if component == LIMITS_COMPONENT:
            raise ValueError("vhost-limits parameters are the vhost's limits (TenantLimits)")
        self.vhost[vhost, component, name] = value

    def clear(self, vhost: str, component: str, name: str) -> bool:
        """Forget a parameter; whether it was kept."""
        return self.vhost.pop((vhost, component, name), None) is not None

    def forget_vhost(self, vhost: str) -> None:
        """The vhost was deleted: its parameters go with it."""
        for key in [k for k in self.vhost if k[0] == vhost]:
            del self.vhost[key]

    def set_global(self, name: str, value: Any) -> None:
        self.globals[name] = value

    def clear_global(self, name: str) -> bool:
        return self.globals.pop(name, None) is not None
