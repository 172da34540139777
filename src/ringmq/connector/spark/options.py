"""The connector's options, parsed once from Spark's case-insensitive string map."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, urlsplit, urlunsplit

from ringmq.connector.client import AMQPParams

DEFAULT_URL: Final = "amqp://guest:guest@127.0.0.1:5672/%2F"
DEFAULT_HTTP_URL: Final = "http://127.0.0.1:15672"


class OptionError(ValueError):
    """A missing or malformed connector option."""


def _int(opts: Mapping[str, str], key: str, default: int, minimum: int = 1) -> int:
    raw = opts.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {key} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {key} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Options:
    """Everything the reader and the writer need; picklable (it travels in partitions)."""

    url: str
    http_url: str
    vhost: str
    user: str
    password: str
    queues: tuple[str, ...]
    consumer: str | None
    max_messages_per_batch: int
    max_bytes_per_batch: int | None
    partitions_per_range: int
    min_messages_per_partition: int
    lease_ms: int
    exchange: str
    routing_key: str
    window: int
    message_id_prefix: str | None
    publish_via: str = "amqp"
    """Writer path: "http" (bulk publish endpoint) or "amqp" (confirmed AMQP publishes)."""
    persistent: bool = False
    """Writer: publish with delivery_mode 2 (stored by durable queues, survive a restart)."""
    stream: bool | None = None
    """Read the queues as stream queues by offset (None: ask the broker each queue's type)."""
    starting_offsets: str = "earliest"
    """Stream reads: `earliest`, `latest`, an offset, or `timestamp:<ms>`."""
    ending_offsets: str = "latest"
    """Stream batch reads: `latest`, an offset, or `timestamp:<ms>` (exclusive)."""
    max_offsets_per_trigger: int | None = None
    """Stream micro-batches: most offsets per trigger over all queues (None: all there is)."""

    @classmethod
    def parse(cls, opts: Mapping[str, str]) -> Options:
        """Parse Spark's options (keys are case-insensitive there; we lower them here)."""
        low = {str(k).lower(): str(v) for k, v in opts.items()}
        url = low.get("url") or DEFAULT_URL
        amqp = AMQPParams.from_url(url)
        http_url = low.get("httpurl") or _http_from_amqp(amqp)
        raw_queues = low.get("queues") or low.get("queue") or ""
        queues = tuple(q.strip() for q in raw_queues.split(",") if q.strip())
        max_bytes = low.get("maxbytesperbatch")
        # The bulk HTTP publish is the default once the user names the management API.
        via = (low.get("publishvia") or ("http" if low.get("httpurl") else "amqp")).lower()
        if via not in ("http", "amqp"):
            raise OptionError(f"option publishVia must be http or amqp, got {via!r}")
        stream = low.get("stream")
        if stream is not None and stream.strip().lower() not in ("true", "false"):
            raise OptionError(f"option stream must be true or false, got {stream!r}")
        starting = low.get("startingoffsets") or "earliest"
        if low.get("startingtimestamp"):  # Kafka's option name for a start in time
            starting = "timestamp:" + low["startingtimestamp"]
        ending = low.get("endingoffsets") or "latest"
        for key, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
            check_offset_spec(key, spec, allow_earliest=key == "startingOffsets")
        per_trigger = low.get("maxoffsetspertrigger")
        return cls(
            url=url,
            http_url=http_url,
            vhost=amqp.vhost,
            user=amqp.user,
            password=amqp.password,
            queues=queues,
            consumer=low.get("consumername") or None,
            max_messages_per_batch=_int(low, "maxmessagesperbatch", 10_000),
            max_bytes_per_batch=None if not max_bytes else _int(low, "maxbytesperbatch", 1),
            partitions_per_range=_int(low, "partitionsperrange", 2),
            min_messages_per_partition=_int(low, "minmessagesperpartition", 1000),
            lease_ms=_int(low, "leasems", 60_000),
            exchange=low.get("exchange", ""),
            routing_key=low.get("routingkey", ""),
            window=_int(low, "publishwindow", 2000),
            message_id_prefix=low.get("messageidprefix") or None,
            publish_via=via,
            persistent=low.get("persistent", "false").strip().lower() in ("true", "1", "yes"),
            stream=None if stream is None else stream.strip().lower() == "true",
            starting_offsets=starting.strip().lower(),
            ending_offsets=ending.strip().lower(),
            max_offsets_per_trigger=(
                None if not per_trigger else _int(low, "maxoffsetspertrigger", 1)
            ),
        )

    def require_queues(self) -> tuple[str, ...]:
        if not self.queues:
            raise OptionError("option queue (or queues, comma-separated) is required")
        return self.queues

    def require_consumer(self) -> str:
        if not self.consumer:
            raise OptionError(
                "option consumerName is required for streaming reads: it names the durable "
                "reservation that survives restarts (like Kafka's group id)"
            )
        return self.consumer


def check_offset_spec(key: str, spec: str, *, allow_earliest: bool) -> None:
    """`spec` is `latest`, an offset >= 0, `timestamp:<ms>`, or (a start) `earliest`."""
    v = spec.strip().lower()
    if v == "latest" or (allow_earliest and v == "earliest"):
        return
    raw = v.removeprefix("timestamp:")
    if raw.isdigit():
        return
    forms = "earliest, latest" if allow_earliest else "latest"
    raise OptionError(f"option {key} must be {forms}, an offset or timestamp:<ms>, got {spec!r}")


def _http_from_amqp(amqp: AMQPParams) -> str:
    # Default: the management port on the AMQP host, with the AMQP credentials.
    netloc = f"{quote(amqp.user, safe='')}:{quote(amqp.password, safe='')}@{amqp.host}:15672"
    return urlunsplit(("http", netloc, "", "", ""))


def http_with_credentials(http_url: str, user: str, password: str) -> str:
    """`http_url` with the AMQP credentials added when it carries none."""
    u = urlsplit(http_url)
    if u.username is not None:
        return http_url
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{u.netloc}"
    return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))
