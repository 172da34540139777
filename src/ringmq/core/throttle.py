"""Login throttling per source address, and rate-limited log lines.

Theory of operation
-------------------
``LoginThrottle`` slows password guessing. It keeps, per source address, the failed logins in
a row and the time before which the next attempt from that address may be checked. The first
``free`` failures cost nothing (a mistyped password). After that every *attempt* from the
address, whatever its credentials, waits before they are checked: ``penalty`` doubles per
further failure from ``base_ms`` up to ``max_ms`` (1 s, 2 s, 4 s, 5 s, 5 s...), and attempts
are spaced that far apart, so parallel connections from one address queue behind each other
instead of multiplying the rate. An attempt whose turn would come later than ``max_ms`` from now
is refused at once, unchecked. Waiting *before* the check (not only before a failure's answer)
means a client that gives up early learns nothing. A successful login resets the address. An
address not seen for ``forget_ms`` starts afresh, and at most ``max_sources`` addresses are
remembered (the longest idle go first), so a scan of many addresses cannot grow it without
bound.

RabbitMQ answers every failed login at once (it only closes the connection after
``authentication_failure_close``); ActiveMQ Artemis and most web stacks delay or lock out
repeated failures. ringmq delays per address and never locks an account, so guessing from one
address costs seconds per try while other addresses are unaffected.

``LogLimiter`` keeps one kind of log line to at most one per ``period_ms``: ``admit(now_ms)``
says whether to log (and how many were suppressed since the last line), ``due(now_ms)`` returns
the count of suppressed lines once the period has passed, for a timer's summary line.

``LoginGuard`` puts both behind the three calls the AMQP and HTTP logins make: ``before`` the
credentials are checked (the delay, or None: refuse unchecked), ``failed`` (records it and logs
the user and source, rate-limited) and ``succeeded``.

Pure and synchronous: every call takes ``now_ms``; delays are returned, never slept.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

log = logging.getLogger(__name__)

DEFAULT_FREE_FAILURES: Final = 3
DEFAULT_BASE_DELAY_MS: Final = 1000
DEFAULT_MAX_DELAY_MS: Final = 5000
DEFAULT_FORGET_MS: Final = 10 * 60 * 1000
DEFAULT_MAX_SOURCES: Final = 10_000
DEFAULT_LOG_PERIOD_MS: Final = 10_000


@dataclass(slots=True)
class _Source:
    failures: int = 0
    next_ms: int = 0  # the next attempt from this source is checked no earlier than this
    seen_ms: int = 0


class LoginThrottle:
    """Per-source login delays (see the module docstring)."""

    def __init__(
        self,
        *,
        free: int = DEFAULT_FREE_FAILURES,
        base_ms: int = DEFAULT_BASE_DELAY_MS,
        max_ms: int = DEFAULT_MAX_DELAY_MS,
        forget_ms: int = DEFAULT_FORGET_MS,
        max_sources: int = DEFAULT_MAX_SOURCES,
    ) -> None:
        self.free = free
        self.base_ms = base_ms
        self.max_ms = max_ms
        self.forget_ms = forget_ms
        self.max_sources = max_sources
        self._sources: dict[str, _Source] = {}

    def failures(self, source: str, now_ms: int) -> int:
        """Failed logins in a row from `source` that still count."""
        s = self._current(source, now_ms)
        return s.failures if s is not None else 0

    def penalty_ms(self, source: str, now_ms: int) -> int:
        """How long each attempt from `source` is held now (0: not throttled)."""
        return self._penalty(self.failures(source, now_ms))

    def _penalty(self, failures: int) -> int:
        over = failures - self.free
        if over < 0 or not failures:
            return 0
        return min(self.max_ms, self.base_ms << min(over, 30))

    def _current(self, source: str, now_ms: int) -> _Source | None:
        s = self._sources.get(source)
        if s is not None and now_ms - s.seen_ms >= self.forget_ms:
            del self._sources[source]
            return None
        return s

    def attempt(self, source: str, now_ms: int) -> int | None:
        """An attempt from `source` begins: ms to wait before checking it, or None to refuse
        it unchecked (its turn would come more than `max_ms` from now)."""
        s = self._current(source, now_ms)
        if s is None:
            return 0
        penalty = self._penalty(s.failures)
        if not penalty:
            return 0
        at = max(now_ms, s.next_ms) + penalty
        if at - now_ms > self.max_ms:
            return None
        s.next_ms = at
        return at - now_ms

    def failed(self, source: str, now_ms: int) -> int:
        """Record a failed login from `source`; returns its failures in a row."""
        s = self._current(source, now_ms)
        if s is None:
            if len(self._sources) >= self.max_sources:
                self._evict(now_ms)
            s = self._sources[source] = _Source()
        else:
            del self._sources[source]  # re-insert: the dict stays in order of last failure
            self._sources[source] = s
        s.failures += 1
        s.seen_ms = now_ms
        return s.failures

    def succeeded(self, source: str) -> None:
        """A successful login from `source` clears its record."""
        self._sources.pop(source, None)

    def _evict(self, now_ms: int) -> None:
        stale = [k for k, s in self._sources.items() if now_ms - s.seen_ms >= self.forget_ms]
        for k in stale:
            del self._sources[k]
        while len(self._sources) >= self.max_sources:
            del self._sources[next(iter(self._sources))]  # the longest without a failure

    def __len__(self) -> int:
        return len(self._sources)


class LogLimiter:
    """At most one line per `period_ms`; the ones suppressed meanwhile are counted."""

    def __init__(self, period_ms: int = DEFAULT_LOG_PERIOD_MS) -> None:
        self.period_ms = period_ms
        self._last_ms: int | None = None
        self.suppressed = 0

    def admit(self, now_ms: int) -> int | None:
        """None: suppress this line (counted). Else log it, with the count suppressed since
        the previous line (returned, then reset)."""
        if self._last_ms is not None and now_ms - self._last_ms < self.period_ms:
            self.suppressed += 1
            return None
        self._last_ms = now_ms
        n, self.suppressed = self.suppressed, 0
        return n

    def due(self, now_ms: int) -> int:
        """Lines suppressed, once the period since the last line has passed (then reset);
        0 otherwise. For a timer's summary line, so a burst's count is not left unsaid."""
        if not self.suppressed or self._last_ms is None or now_ms - self._last_ms < self.period_ms:
            return 0
        self._last_ms = now_ms
        n, self.suppressed = self.suppressed, 0
        return n


class LoginGuard:
    """The login throttle and its log line, as the AMQP and HTTP logins use them."""

    def __init__(
        self, throttle: LoginThrottle | None = None, log_period_ms: int = DEFAULT_LOG_PERIOD_MS
    ) -> None:
        self.throttle = throttle or LoginThrottle()
        self.log_limit = LogLimiter(log_period_ms)
        self.refused_unchecked = 0
        """Attempts refused without a check (their turn was too far away)."""
        self.delayed: list[int] = []
        """The delays (ms) imposed on attempts so far (the last 100)."""

    def before(self, source: str, now_ms: int) -> int | None:
        """Before checking credentials from `source`: ms to wait, or None to refuse unchecked."""
        delay = self.throttle.attempt(source, now_ms)
        if delay is None:
            self.refused_unchecked += 1
            self._log(now_ms, "login from %s refused unchecked: too many failed logins", source)
        elif delay:
            self.delayed.append(delay)
            del self.delayed[:-100]
        return delay

    def failed(self, source: str, user: str, protocol: str, reason: str, now_ms: int) -> None:
        """A login failed: count it against `source` and log it (rate-limited)."""
        n = self.throttle.failed(source, now_ms)
        penalty = self.throttle.penalty_ms(source, now_ms)
        self._log(
            now_ms,
            "%s login failed for user %r from %s: %s (%d in a row%s)",
            protocol,
            user,
            source,
            reason,
            n,
            f"; further attempts from it wait {penalty} ms" if penalty else "",
        )

    def succeeded(self, source: str) -> None:
        self.throttle.succeeded(source)

    def flush_log(self, now_ms: int) -> None:
        """The summary of suppressed lines, once due (call from a periodic timer)."""
        n = self.log_limit.due(now_ms)
        if n:
            log.warning("%d more failed or refused logins not logged", n)

    def _log(self, now_ms: int, fmt: str, *args: object) -> None:
        suppressed = self.log_limit.admit(now_ms)
        if suppressed is None:
            return
        if suppressed:
            fmt += " (%d more failed or refused logins not logged)"
            args = (*args, suppressed)
        log.warning(fmt, *args)


__all__ = ["LogLimiter", "LoginGuard", "LoginThrottle"]
