"""The call protocol: how every caller of the core starts and ends a call, and when the
queues a call touched are dispatched.

Theory of operation
-------------------
A *call* is the core's unit of work: one client command (an AMQP 0-9-1 method, a run of AMQP
1.0 transfers, a STOMP frame, an MQTT read batch), one management request, one timer tick,
one storage hook. It starts at a time `now_ms` with a fresh effect list, which every owner
appends to (`State.out`); the owners mark the queues they touch (`State.dirty`). Its end
decides whether those queues are dispatched now, then writes the durable definitions the call
changed. `Calls` is the one implementation of that protocol: nothing outside `core/` reads or
writes the call fields of `State` (`out`, `now_ms`, `dirty`, `eager`, `defer_dispatch`;
tests/unit/core/test_call_protocol.py scans the other packages).

The dispatch rule, the only one. A call that ends normally dispatches its dirty queues now,
unless all three hold:

* the server defers dispatch to the end of its read batch (`Broker.defer_dispatch`);
* the caller says the call published (`publish=True`: a basic.publish, a run of transfers, a
  SEND, an MQTT read batch), which is what the caller knows and the core does not;
* no publish of the call reached a queue that must dispatch before the next publish (`eager`,
  set by the publish pipeline: a ring, a limit, a last-value queue, priorities, browsers, an
  Artemis FAIL).

Then the queues wait for `Broker.dispatch_pending`, which the server calls once per read
batch: a batch of publishes is handed out in one pass per queue. A call that ends with an
exception (`abort`) dispatches nothing and writes nothing; its dirty queues wait for the end
of the next call, `dispatch_pending` or `tick` (`next_deadline_ms` is immediate while a queue
is dirty). Owner steps may flush within a call where their own rule says so (a basic.get of a
dirty queue, a publish batch reaching an eager queue); that is the owner's business, not the
caller's.

Nested calls are safe: a call that starts while another is in progress (an MQTT CONNECT that
takes over a client id releases the old connection, whole calls of its own, inside the
CONNECT's call) gets its own effect list; its end applies the rule above (to every dirty
queue, the outer call's included) and makes the outer call's effect list and time current
again, whether it ended or aborted. The outer caller adds the inner effects to its own when it
wants them in its result.

Three forms of the same protocol:

* `with broker.call(now_ms, publish=...) as out:` (a `CallScope`): the end on a normal exit,
  `abort` on an exception. Every caller uses it, except where a call runs per message:
* `out = calls.begin(now_ms)`, the steps, then `calls.end(publish=...)`, or `calls.abort()`
  when a step raised (the caller's `try`): two plain method calls, where a `with` costs
  several times as much (a scope object, `__enter__` and `__exit__` called from C; callgrind);
* one publish as a whole call, for the AMQP 0-9-1 publish path, the broker's hottest (each
  Python call there is about 1.5% of a publish, under callgrind): the pipeline itself begins
  and ends it (`Publisher.publish_call(..., out)`, core/publish.py: `begin` written out, the
  steps, then `end(publish=True)` behind a guard that skips it when it would only close the
  call, `abort` on an exception), so the publish is one Python call into the core.
  `calls.publish(session, vhost, exchange, message, mandatory, now_ms)` is that call with a
  fresh effect list, which it returns. The rule's tests run through every form.

`emit(effect)` appends an effect of the caller's own (a 0-9-1 reply frame) to the call in
progress, in order with the core's.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ringmq.core.effects import Effect
    from ringmq.core.exchange import Exchange
    from ringmq.core.message import Message
    from ringmq.core.session import Session
    from ringmq.core.state import State
    from ringmq.core.vhost import VHost

Publish = Callable[["Message", "Session", "VHost", "Exchange", int, bool, "list[Effect]"], object]
"""`Publisher.publish_call(message, session, vhost, exchange, now_ms, mandatory, out)`: one
publish as a whole call whose effects go in `out` (the pipeline begins and ends the call)."""


class Calls:
    """The call protocol over a broker's `State` (see the module docstring).

    Args:
        state: the broker's shared state, whose call fields this object manages (and the
            pipeline's one-publish call, the third form).
        flush: the dispatch of the dirty queues (`Dispatcher.flush`, dispatch.py).
    """

    __slots__ = ("_flush", "_outer", "_state", "pipeline")

    def __init__(self, state: State, flush: Callable[[int], None]) -> None:
        self._state = state
        self._flush = flush
        self._outer: list[tuple[list[Effect], int]] = []
        """The effect lists and times of the calls a nested call interrupted, innermost last."""
        self.pipeline: Publish | None = None
        """The publish pipeline's one-publish call (`Publisher.publish_call`), for `publish`;
        set by the composition root once the pipeline exists (it holds this object)."""

    def begin(self, now_ms: int, out: list[Effect] | None = None) -> list[Effect]:
        """Start a call at `now_ms`; returns its effect list (in order, filled by the owners):
        `out` when given, else a fresh one.

        Every `begin` is followed by exactly one `end` or `abort`. Inside another call, the
        outer call's list and time are saved, and restored by this call's `end` / `abort`.
        """
        state = self._state
        if state.calling:
            self._outer.append((state.out, state.now_ms))
        else:
            state.calling = True
        if out is None:
            out = []
        state.out = out
        state.now_ms = now_ms
        return out

    def end(self, publish: bool = False) -> None:
        """End the call in progress: dispatch by the rule (module docstring), write the
        durable definitions it changed, make the outer call (if any) current again.

        Args:
            publish: the call published (its dispatch may wait for `dispatch_pending`).
        """
        state = self._state
        try:
            if state.dirty and (not publish or state.eager or not state.defer_dispatch):
                state.eager = False
                self._flush(state.now_ms)
            if state.defs_dirty:
                state.sync_definitions(full=False)
        finally:  # (free without an exception) the outer call is current again in any case
            if self._outer:
                state.out, state.now_ms = self._outer.pop()
            else:
                state.calling = False

    def abort(self) -> None:
        """End the call in progress after an exception: no dispatch, no definitions written
        (both wait for the next call); the outer call (if any) is current again."""
        state = self._state
        if self._outer:
            state.out, state.now_ms = self._outer.pop()
        else:
            state.calling = False

    def dispatch_pending(self, now_ms: int) -> list[Effect]:
        """A call that only ends (`Broker.dispatch_pending`, once per read batch): its end
        dispatches the dirty queues, as every call's end that did not publish does; returns
        its effects (none when nothing is dirty: no call then)."""
        state = self._state
        if not state.dirty:
            return []  # the server asks after every read: nothing to start
        if state.calling:  # inside another call: the general form, which nests
            inner = self.begin(now_ms)
            self.end()
            return inner
        # `begin` and `end(publish=False)` written out (two Python calls less per read; the
        # state is the one `end` leaves: nothing dirty, not calling); nothing here raises
        # but a bug, which leaves the call closed as `abort` would.
        out: list[Effect] = []
        state.calling = True
        state.out = out
        state.now_ms = now_ms
        try:
            state.eager = False
            self._flush(now_ms)
            if state.defs_dirty:
                state.sync_definitions(full=False)
        finally:
            state.calling = False
        return out

    def publish(
        self, s: Session, vh: VHost, x: Exchange, msg: Message, mandatory: bool, now_ms: int
    ) -> list[Effect]:
        """One publish as a whole call (the pipeline's `publish_call`, which nests inside
        another call); returns the call's effects."""
        assert self.pipeline is not None, "no pipeline: the composition root sets it"
        out: list[Effect] = []
        self.pipeline(msg, s, vh, x, now_ms, mandatory, out)
        return out

    def emit(self, effect: Effect) -> None:
        """Append a caller's own effect (a reply frame) to the call in progress."""
        assert self._state.calling, "emit outside a call"
        self._state.out.append(effect)


class CallScope:
    """One call as a context manager (`Broker.call`): `__enter__` begins it and gives its
    effect list; a normal exit ends it, an exception aborts it."""

    __slots__ = ("_calls", "_now_ms", "_publish")

    def __init__(self, calls: Calls, now_ms: int, publish: bool) -> None:
        self._calls = calls
        self._now_ms = now_ms
        self._publish = publish

    def __enter__(self) -> list[Effect]:
        return self._calls.begin(self._now_ms)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self._calls.end(self._publish)
        else:
            self._calls.abort()
