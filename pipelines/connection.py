"""One way in: a typed connection to a tidemark installation, from which everything is made.

    import tidemark

    with tidemark.connect() as tm:  # $TIDEMARK_KAFKA_BOOTSTRAP, $TIDEMARK_ZK_CONNECT, ...
        with tm.writer("sensor-7", "shop/orders") as writer:
            writer.write(b'{"v": 1}', routing_key="customer-42", timestamp=event_ms)
            writer.note_time(event_ms)
        cut = tm.stream_cut_at("shop/orders", "-5m")   # the one time syntax
        wm = tm.wait_for_time("shop/orders", event_ms, timeout_ms=600_000)

:class:`ConnectionConfig` (frozen) says where the services are: Kafka's bootstrap
servers, ZooKeeper's connect string and metadata root, and where the controller's Delta
tables are (:class:`DeltaLocation`: a URI and its storage options, one value). It is
built from arguments or, for what is not given, from the environment, in one place
(:meth:`ConnectionConfig.from_env`; the variables are named in
:mod:`tidemark.environment`). :class:`Connection` holds the ZooKeeper session (opened on
first use, closed with the connection) and makes writers, reader groups, lookups and
waits with those settings, so no call passes a store, a bootstrap or a Delta root.
Further Kafka client properties (``ssl.*``, ``sasl.*``, ...) come from
``$TIDEMARK_KAFKA_PROPERTIES`` and :attr:`ConnectionConfig.kafka_properties`.
Times given to it take the one time syntax (:func:`tidemark.controller.timestamps.parse_time`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypedDict

from tidemark.controller.delta.location import TableLocation
from tidemark.controller.timestamps import parse_time
from tidemark.environment import DELTA_ROOT, KAFKA_BOOTSTRAP, ZK_CONNECT, Environment
from tidemark.errors import ConfigurationError

if TYPE_CHECKING:
    from tidemark.controller.model import Watermark
    from tidemark.controller.store import MetadataStore
    from tidemark.pipelines.reading.config import ReaderConfig
    from tidemark.pipelines.reading.group import ReaderGroup
    from tidemark.pipelines.writing.config import WriterConfig
    from tidemark.pipelines.writing.producer import TidemarkProducer
    from tidemark.pipelines.writing.transactions import TransactionalWriter
    from tidemark.pipelines.writing.writer import EventWriter


class _Kafka(TypedDict):
    store: MetadataStore
    bootstrap_servers: str


class _Delta(TypedDict, total=False):
    delta_root: TableLocation


class ConnectionConfigError(ConfigurationError):
    """A connection setting is missing or malformed: the message names the argument and
    the environment variable that give it."""


@dataclass(frozen=True)
class DeltaLocation:
    """Where the controller's Delta tables live: a root URI (a path, ``s3://…``) and the
    delta-rs storage options to reach it (empty: the ``AWS_*`` variables and the like)."""

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.uri, str) or not self.uri.strip():
            raise ConnectionConfigError(f"a Delta location needs a URI, got {self.uri!r}")

    @property
    def location(self) -> TableLocation:
        """The Delta package's handle on it: what every lookup, wait and group is given."""
        return TableLocation.of(self.uri, self.storage_options)


@dataclass(frozen=True)
class ConnectionConfig:
    """Where one tidemark installation's services are."""

    kafka_bootstrap: str
    zk_connect: str
    zk_root: str = "/tidemark"
    delta: DeltaLocation | None = None
    """The controller's tables; ``None``: lookups and waits are refused, writers work."""
    kafka_properties: Mapping[str, Any] = field(default_factory=dict)
    """Further librdkafka properties (``ssl.*``, ``sasl.*``, ...) for every Kafka client the
    connection makes, over ``$TIDEMARK_KAFKA_PROPERTIES``; those tidemark owns are refused
    by name (:data:`~tidemark.controller.kafka.settings.OWNED_PROPERTIES`)."""

    def __post_init__(self) -> None:
        for name, variable in (("kafka_bootstrap", KAFKA_BOOTSTRAP), ("zk_connect", ZK_CONNECT)):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConnectionConfigError(
                    f"no {name}: pass {name}=... or set ${variable} "
                    "(`tidemark up` prints both for its local services)"
                )
        from tidemark.controller.kafka.settings import checked_properties

        properties = checked_properties(self.kafka_properties, "kafka_properties")
        object.__setattr__(self, "kafka_properties", properties)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        kafka_bootstrap: str | None = None,
        zk_connect: str | None = None,
        zk_root: str | None = None,
        delta_root: str | None = None,
        storage_options: Mapping[str, str] | None = None,
        kafka_properties: Mapping[str, Any] | None = None,
    ) -> ConnectionConfig:
        """The arguments given, the rest from the environment (``environ``, default
        ``os.environ``): ``$TIDEMARK_KAFKA_BOOTSTRAP``, ``$TIDEMARK_ZK_CONNECT``,
        ``$TIDEMARK_DELTA_ROOT`` (the clients read ``$TIDEMARK_KAFKA_PROPERTIES``
        themselves)."""
        env = Environment.from_env(environ)
        root = delta_root or env.delta_root
        return cls(
            kafka_bootstrap=kafka_bootstrap or env.kafka_bootstrap or "",
            zk_connect=zk_connect or env.zk_connect or "",
            zk_root=zk_root or cls.zk_root,
            delta=None if root is None else DeltaLocation(root, dict(storage_options or {})),
            kafka_properties=dict(kafka_properties or {}),
        )

    def delta_location(self) -> DeltaLocation:
        """:attr:`delta`, else a clear error naming how to give it."""
        if self.delta is None:
            raise ConnectionConfigError(
                f"no Delta location: pass delta_root=... or set ${DELTA_ROOT} to where the "
                "controller writes its tables"
            )
        return self.delta


class Connection:
    """A handle on one installation: writers, reader groups, lookups and waits.

    Use it as a context manager (or call :meth:`close`): the ZooKeeper session it opens on
    first use is closed with it. The objects it made (writers, groups) are the caller's to
    close, before the connection. Thread-safe.
    """

    def __init__(self, config: ConnectionConfig) -> None:
        from tidemark.controller.kafka.settings import attach_properties

        self.config = config
        self._lock = threading.Lock()
        self._client: Any = None
        self._store: MetadataStore | None = None
        self._closed = False
        # every client made for this bootstrap (writers, readers, their admin clients)
        # gets the properties while the connection is open
        self._attached = bool(config.kafka_properties)
        if self._attached:
            attach_properties(config.kafka_bootstrap, config.kafka_properties)

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def store(self) -> MetadataStore:
        """The stream metadata store (ZooKeeper), its session opened on first use."""
        with self._lock:
            if self._closed:
                raise ConnectionConfigError("this connection is closed: open a new one")
            if self._store is None:
                from tidemark.controller.zookeeper.session import open_session
                from tidemark.controller.zookeeper.store import ZooKeeperStore

                self._client = open_session(self.config.zk_connect)
                self._store = ZooKeeperStore(self._client, self.config.zk_root)
            return self._store

    def close(self) -> None:
        """Close the ZooKeeper session (again: nothing)."""
        with self._lock:
            self._closed = True
            client, self._client, self._store = self._client, None, None
            attached, self._attached = self._attached, False
        if attached:
            from tidemark.controller.kafka.settings import detach_properties

            detach_properties(self.config.kafka_bootstrap)
        if client is not None:
            from tidemark.controller.zookeeper.session import close_session

            close_session(client)

    def _kafka(self) -> _Kafka:
        """The keywords that place a writer or reader group: the store and Kafka."""
        return {"store": self.store, "bootstrap_servers": self.config.kafka_bootstrap}

    def _delta(self, *, required: bool) -> _Delta:
        """The keywords that place a lookup: the Delta location (``required``: it must
        be given, else a clear error; otherwise absent when not)."""
        delta = self.config.delta_location() if required else self.config.delta
        if delta is None:
            return {}
        return {"delta_root": delta.location}

    # --- writing ---------------------------------------------------------------------------

    def writer(
        self, writer_id: str | None, stream: str, *, config: WriterConfig | None = None, **more: Any
    ) -> EventWriter:
        """An :class:`~tidemark.pipelines.writing.writer.EventWriter` on ``stream``
        (``more``: its other keywords, such as ``automatically_note_time``)."""
        from tidemark.pipelines.writing.writer import EventWriter

        return EventWriter(writer_id, stream, config=config, **self._kafka(), **more)

    def transactional_writer(
        self, writer_id: str, stream: str, *, config: WriterConfig | None = None, **more: Any
    ) -> TransactionalWriter:
        """A :class:`~tidemark.pipelines.writing.transactions.TransactionalWriter`."""
        from tidemark.pipelines.writing.transactions import TransactionalWriter

        return TransactionalWriter(writer_id, stream, config=config, **self._kafka(), **more)

    def producer(
        self, config: Mapping[str, Any], *, writer_id: str, stream: str, **more: Any
    ) -> TidemarkProducer:
        """A drop-in :class:`~tidemark.pipelines.writing.producer.TidemarkProducer` for an
        existing producer's ``config`` (where it sets no servers or security, this
        connection's: ``client_config``)."""
        from tidemark.controller.kafka.settings import client_config
        from tidemark.pipelines.writing.producer import TidemarkProducer

        settings = {**client_config(self.config.kafka_bootstrap), **config}
        return TidemarkProducer(
            settings, writer_id=writer_id, store=self.store, stream=stream, **more
        )

    # --- reading ---------------------------------------------------------------------------

    def reader_group(
        self,
        name: str,
        stream: str,
        *,
        from_time: int | str | None = None,
        config: ReaderConfig | None = None,
        **more: Any,
    ) -> ReaderGroup:
        """A new reader group on ``stream`` (:meth:`ReaderGroup.create`), at ``from_time``
        (the one time syntax: ``"-1h"``, ISO-8601, epoch ms) or at the head."""
        from tidemark.pipelines.reading.group import ReaderGroup

        start = None if from_time is None else parse_time(from_time, "from_time")
        delta = self._delta(required=start is not None)
        return ReaderGroup.create(
            name, stream, from_time=start, config=config, **self._kafka(), **delta, **more
        )

    def open_reader_group(self, name: str, *, config: ReaderConfig | None = None) -> ReaderGroup:
        """An existing reader group (``UnknownReaderGroupError`` when there is none)."""
        from tidemark.pipelines.reading.group import ReaderGroup

        return ReaderGroup(name, config=config, **self._kafka(), **self._delta(required=False))

    def stream_cut_at(self, stream: str, timestamp: int | str) -> dict[int, int]:
        """Where to start reading ``stream`` for every event with time >= ``timestamp``
        (:func:`~tidemark.pipelines.reading.seek.stream_cut_at`)."""
        from tidemark.pipelines.reading.seek import stream_cut_at

        at, delta = parse_time(timestamp, "timestamp"), self._delta(required=True)
        return stream_cut_at(stream, at, store=self.store, **delta)

    def complete_cut_at(self, stream: str, timestamp: int | str) -> dict[int, int] | None:
        """Where to stop reading ``stream`` to have every event with time <= ``timestamp``;
        ``None`` while the data is not complete
        (:func:`~tidemark.pipelines.reading.seek.complete_cut_at`)."""
        from tidemark.pipelines.reading.seek import complete_cut_at

        at, delta = parse_time(timestamp, "timestamp"), self._delta(required=True)
        return complete_cut_at(stream, at, store=self.store, **delta)

    def wait_for_time(self, stream: str, time_ms: int | str, timeout_ms: int) -> Watermark:
        """The first watermark of ``stream`` with time >= ``time_ms``
        (:func:`~tidemark.pipelines.reading.stream_time.wait_for_time`)."""
        from tidemark.pipelines.reading.stream_time import wait_for_time

        at = parse_time(time_ms, "time_ms")
        return wait_for_time(stream, at, timeout_ms, **self._delta(required=True))


def connect(
    *,
    kafka_bootstrap: str | None = None,
    zk_connect: str | None = None,
    zk_root: str | None = None,
    delta_root: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    kafka_properties: Mapping[str, Any] | None = None,
    config: ConnectionConfig | None = None,
) -> Connection:
    """A :class:`Connection` from ``config``, else from the arguments given and the
    environment (:meth:`ConnectionConfig.from_env`)."""
    if config is None:
        config = ConnectionConfig.from_env(
            kafka_bootstrap=kafka_bootstrap,
            zk_connect=zk_connect,
            zk_root=zk_root,
            delta_root=delta_root,
            storage_options=storage_options,
            kafka_properties=kafka_properties,
        )
    return Connection(config)


__all__ = [
    "Connection",
    "ConnectionConfig",
    "ConnectionConfigError",
    "DeltaLocation",
    "connect",
]
