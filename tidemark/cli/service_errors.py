"""One line for a service a verb could not reach: the service, its address, what to check.

    with named_services(args):      # main() runs every verb inside it
        args.func(args)

A verb calls kazoo, confluent_kafka, psycopg, delta-rs or the time service's client, and each
raises its own error when its service is stopped. Here, in one place for every verb,
such an error (or one of ours it caused) becomes a :class:`ServiceUnavailableError`
naming the service, the address this command used (its flag, the environment or
``tidemark up``) and what to check; ``main`` prints it as one line and exits
:data:`EXIT_UNAVAILABLE`. A library is looked up in ``sys.modules``: one that a verb
never imported cannot have raised, and ``tidemark --help`` stays free of it.
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

# where a time-out means Kafka did not answer
_KAFKA_CLIENTS = ("confluent_kafka", "tidemark.controller.kafka", "tidemark.pipelines.writing")
# librdkafka's codes for "no broker answered" (the rest are Kafka refusing a request)
_KAFKA_DOWN_CODES = ("_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_RESOLVE", "_MSG_TIMED_OUT")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it, outermost first."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def _configured(service: str, args: argparse.Namespace) -> str:
    """The address this command used for ``service``: the verb's own flag (``controller
    run --zk``, ``timeline relay --bootstrap``), else the environment (where the global
    flags put theirs), else ``tidemark up``'s; ``(none given)`` when there is none."""
    try:
        found = resolve_services(
            service, kafka=getattr(args, "bootstrap", None), zk=getattr(args, "zk", None)
        )
    except TidemarkError:
        return "(none given)"
    address = {
        KAFKA: found.kafka_bootstrap,
        ZOOKEEPER: found.zk_connect,
        POSTGRES: found.postgres_dsn,
    }[service]
    return address or "(none given)"


def _postgres_address(dsn: str) -> str:
    """``host:port/dbname`` of a DSN (never its password)."""
    conninfo = sys.modules.get("psycopg.conninfo")
    try:
        parts = conninfo.conninfo_to_dict(dsn) if conninfo is not None else {}
    except Exception:  # a DSN psycopg cannot parse: name no part of it
        parts = {}
    if not parts.get("host"):
        return "(the configured DSN)"
    return f"{parts['host']}:{parts.get('port', 5432)}/{parts.get('dbname', '')}"


def _zookeeper_down(exc: BaseException) -> bool:
    kazoo = sys.modules.get("kazoo.exceptions")
    handler = sys.modules.get("kazoo.handlers.threading")
    controller = sys.modules.get("tidemark.controller.exceptions")
    kinds: tuple[type[BaseException], ...] = ()
    if kazoo is not None:
        kinds += (kazoo.ConnectionLoss, kazoo.SessionExpiredError, kazoo.OperationTimeoutError)
    if handler is not None:
        kinds += (handler.KazooTimeoutError,)
    if controller is not None:
        kinds += (controller.ZooKeeperUnavailableError,)
    return bool(kinds) and isinstance(exc, kinds)


def _raised_in(exc: BaseException, packages: tuple[str, ...]) -> bool:
    """Whether a frame of ``exc``'s traceback runs code of one of ``packages``."""
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith(packages):
            return True
        tb = tb.tb_next
    return False


def _kafka_down(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError) and _raised_in(exc, _KAFKA_CLIENTS):
        return True  # an admin request's future, a writer's flush: no broker answered
    writing = sys.modules.get("tidemark.pipelines.writing.exceptions")
    if writing is not None and isinstance(exc, writing.DeliveryError):
        # every record timed out in the producer's queue: no broker took them
        return bool(exc.failed) and all("_MSG_TIMED_OUT" in f.error for f in exc.failed)
    kafka = sys.modules.get("confluent_kafka")
    if kafka is None or not isinstance(exc, kafka.KafkaException) or not exc.args:
        return False
    error = exc.args[0]
    if not isinstance(error, kafka.KafkaError):
        return False
    return error.code() in {getattr(kafka.KafkaError, c, None) for c in _KAFKA_DOWN_CODES}


def _postgres_down(exc: BaseException) -> bool:
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.OperationalError)


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


def _time_service_down(exc: BaseException) -> bool:
    client = sys.modules.get("tidemark.pipelines.reading.time_service")
    return client is not None and isinstance(exc, client.ServiceUnavailableError)


def named(exc: BaseException, args: argparse.Namespace) -> ServiceUnavailableError | None:
    """The one-line error for ``exc`` when a stopped service caused it, else ``None``."""
    for cause in _chain(exc):
        if isinstance(cause, ServiceUnavailableError):
            return cause
        what = f"gave no answer ({_first_line(cause)})"
        if isinstance(cause, TimeoutError) and not str(cause):
            what = "gave no answer in time"
        if _zookeeper_down(cause):
            return ZOOKEEPER_SERVICE.unavailable(_configured(ZOOKEEPER, args), what)
        if _kafka_down(cause):
            return KAFKA_SERVICE.unavailable(_configured(KAFKA, args), what)
        if _postgres_down(cause):
            # an OperationalError may also be a refusal (a wrong password): say both
            address = _postgres_address(_configured(POSTGRES, args))
            return POSTGRESQL_SERVICE.unavailable(
                address, f"refused or did not answer ({_first_line(cause)})"
            )
        store = _object_store_down(cause)
        if store is not None:
            return OBJECT_STORE_SERVICE.unavailable(
                store, f"gave no answer ({_innermost_line(cause)})"
            )
        if _time_service_down(cause):
            url = os.environ.get(TIME_SERVICE, "").strip() or "(none given)"
            return TIME_SERVICE_SERVICE.unavailable(url, what)
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
