"""One line for a service a verb could not reach: the service, its address, what to check.

    with named_services(args):      # main() runs every verb inside it
        args.func(args)

Each adapter raises its own subclass of :class:`ServiceUnavailableError` when its service
does not answer (ZooKeeper's and Kafka's in ``tidemark.controller``, PostgreSQL's in
the timeline, the time service's client's), naming the address it used. Here, in one
place for every verb, the error's *type* picks the service's one line -- its name, its
address (the error's, else the one this command used: its flag, the environment or
``tidemark up``) and what to check; ``main`` prints it and exits :data:`EXIT_UNAVAILABLE`.
The types are looked up in ``sys.modules``: a package a verb never imported cannot have
raised, and ``tidemark --help`` stays free of it.

The object store is still recognised from delta-rs' error text (:func:`_object_store_down`):
Delta has no adapter package of its own yet to raise a typed error; that fallback goes
when it has one.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from tidemark.environment import (
    DELTA_ROOT,
    KAFKA_BOOTSTRAP,
    POSTGRES_DSN,
    SERVICE_TIMEOUT_MS,
    TIME_SERVICE,
    ZK_CONNECT,
)
from tidemark.errors import ConfigurationError, ServiceUnavailableError, TidemarkError
from tidemark.infra.services import KAFKA, POSTGRES, ZOOKEEPER, resolve_services

EXIT_UNAVAILABLE = 69
"""A service did not answer (sysexits' EX_UNAVAILABLE): retrying later may succeed."""


def service_timeout_s(default_s: float) -> float:
    """``TIDEMARK_SERVICE_TIMEOUT_MS`` in seconds when set (scripts, tests), else ``default_s``."""
    raw = os.environ.get(SERVICE_TIMEOUT_MS, "").strip()
    if not raw:
        return default_s
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(f"{SERVICE_TIMEOUT_MS}={raw!r}: give a positive number of ms")
    return value / 1000


@dataclass(frozen=True)
class Service:
    """How a user knows a service: its name, where it should run, what names its address."""

    name: str
    runs: str
    named_by: str

    def unavailable(self, address: str, what: str) -> ServiceUnavailableError:
        """The one-line error: ``<name> is unavailable: <address> <what>; check ...``."""
        return ServiceUnavailableError(
            self.name, f"{address} {what}; check that {self.runs} and that {self.named_by}"
        )


ZOOKEEPER_SERVICE = Service(
    "ZooKeeper",
    "ZooKeeper runs there (tidemark status, tidemark up)",
    f"{ZK_CONNECT} or --zk names it",
)
KAFKA_SERVICE = Service(
    "Kafka",
    "the brokers run there (tidemark status, tidemark up)",
    f"{KAFKA_BOOTSTRAP} or --bootstrap names them",
)
POSTGRESQL_SERVICE = Service(
    "PostgreSQL",
    "PostgreSQL runs there (tidemark status, tidemark up)",
    f"{POSTGRES_DSN} names it",
)
TIME_SERVICE_SERVICE = Service(
    "the time service", "tidemark serve runs there", f"{TIME_SERVICE} names it"
)
OBJECT_STORE_SERVICE = Service(
    "the object store",
    "the store runs there",
    f"AWS_ENDPOINT_URL (or S3 itself) and {DELTA_ROOT} or --delta-root name it",
)

# the adapters' typed errors: (module, class, the service's line, its address's key)
_TYPES = (
    ("tidemark.controller.exceptions", "ZooKeeperUnavailableError", ZOOKEEPER_SERVICE, ZOOKEEPER),
    ("tidemark.controller.exceptions", "KafkaUnavailableError", KAFKA_SERVICE, KAFKA),
    (
        "tidemark.pipelines.timeline.exceptions",
        "StoreUnavailableError",
        POSTGRESQL_SERVICE,
        POSTGRES,
    ),
    (
        "tidemark.pipelines.reading.time_service",
        "TimeServiceUnavailableError",
        TIME_SERVICE_SERVICE,
        TIME_SERVICE,
    ),
)

# how delta-rs (object_store) says no store answered, in the innermost lines of its error
_STORE_DOWN_TEXTS = (
    "tcp connect error",
    "connection refused",
    "error sending request",
    "operation timed out",
    "dns error",
    "connection reset",
)
_STORE_URL = re.compile(r"Error performing \w+ (https?://[^/\s]+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _configured(service: str, args: argparse.Namespace) -> str:
    """The address this command used for ``service``: the verb's own flag (``controller
    run --zk``, ``timeline relay --bootstrap``), else the environment (where the global
    flags put theirs), else ``tidemark up``'s; ``(none given)`` when there is none."""
    if service == TIME_SERVICE:
        return os.environ.get(TIME_SERVICE, "").strip() or "(none given)"
    try:
        found = resolve_services(
            service, kafka=getattr(args, "bootstrap", None), zk=getattr(args, "zk", None)
        )
    except TidemarkError:
        return "(none given)"
    if service == POSTGRES:  # its host, port and database, never the password
        timeline = sys.modules.get("tidemark.pipelines.timeline.store")
        dsn = found.postgres_dsn
        shown = timeline.postgres_address(dsn) if timeline is not None and dsn else None
        return shown or "(the configured DSN)"
    address = {KAFKA: found.kafka_bootstrap, ZOOKEEPER: found.zk_connect}[service]
    return address or "(none given)"


def _object_store_down(exc: BaseException) -> str | None:
    """The store's address when ``exc`` is delta-rs not reaching an object store."""
    delta = sys.modules.get("tidemark.controller.delta.exceptions")
    kinds: tuple[type[BaseException], ...] = (OSError,)
    if delta is not None:
        kinds += (delta.DeltaUnavailableError,)
    if not isinstance(exc, kinds):
        return None
    text = _ANSI.sub("", str(exc))
    if "://" not in text or not any(t in text.lower() for t in _STORE_DOWN_TEXTS):
        return None
    found = _STORE_URL.search(text)
    if found:
        return found.group(1)
    return os.environ.get("AWS_ENDPOINT_URL", "").strip() or "(S3)"


def _innermost_line(exc: BaseException) -> str:
    """The last line of a nested error (delta-rs puts the root cause there, after ``↳``)."""
    lines = [line.strip(" ↳") for line in _ANSI.sub("", str(exc)).splitlines()]
    found = [line for line in lines if line]
    return found[-1] if found else type(exc).__name__


def _typed(exc: BaseException) -> tuple[Service, str] | None:
    """The service whose adapter raised ``exc`` and its :data:`_ADDRESS_OF` key."""
    for module, name, service, key in _TYPES:
        found = sys.modules.get(module)
        if found is not None and isinstance(exc, getattr(found, name)):
            return service, key
    return None


def _delivery_outage(exc: BaseException) -> BaseException | None:
    """A writer's records all timed out in its queue: the writer's own judgment."""
    writing = sys.modules.get("tidemark.pipelines.writing.exceptions")
    if writing is not None and isinstance(exc, writing.DeliveryError):
        outage: BaseException | None = exc.outage()
        return outage
    return None


def named(exc: BaseException, args: argparse.Namespace) -> ServiceUnavailableError | None:
    """The one-line error for ``exc`` when a stopped service caused it, else ``None``."""
    for cause in _chain(exc):
        cause = _delivery_outage(cause) or cause
        if isinstance(cause, ServiceUnavailableError):
            typed = _typed(cause)
            if typed is None:
                return cause  # already one line (made with a Service below)
            service, key = typed
            address = cause.address or _configured(key, args)
            return service.unavailable(address, cause.reason)
        store = _object_store_down(cause)
        if store is not None:
            return OBJECT_STORE_SERVICE.unavailable(
                store, f"gave no answer ({_innermost_line(cause)})"
            )
    return None


@contextlib.contextmanager
def named_services(args: argparse.Namespace) -> Iterator[None]:
    """Within the block, an error a stopped service caused is re-raised as the
    :class:`ServiceUnavailableError` :func:`named` makes of it; others pass unchanged."""
    try:
        yield
    except Exception as exc:
        error = named(exc, args)
        if error is None or error is exc:
            raise
        raise error from exc


@contextlib.contextmanager
def quiet(logger: str) -> Iterator[None]:
    """Within the block, ``logger`` logs errors only: a client library's retry warnings
    (kazoo's, while a session starts) would stand beside the one line that says it all."""
    log = logging.getLogger(logger)
    level = log.level
    if log.getEffectiveLevel() > logging.INFO:  # -v shows them
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


__all__ = [
    "EXIT_UNAVAILABLE",
    "KAFKA_SERVICE",
    "OBJECT_STORE_SERVICE",
    "POSTGRESQL_SERVICE",
    "TIME_SERVICE_SERVICE",
    "ZOOKEEPER_SERVICE",
    "Service",
    "named",
    "named_services",
    "quiet",
    "service_timeout_s",
]
