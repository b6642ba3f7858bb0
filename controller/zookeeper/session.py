"""ZooKeeper sessions: the one place a ``KazooClient`` is created, started and closed.

    with zookeeper_session("127.0.0.1:2181", timeout_ms=10_000) as client:
        store = ZooKeeperStore(client, "/tidemark")

    client = open_session(zk_connect)        # a long-lived session (a driver, a cache)
    ...
    close_session(client)

A connect string may end in a chroot (``"zk1:2181,zk2:2181/tidemark"``); ``chroot``
appends one. Every tidemark component that talks to ZooKeeper gets its session here,
so the session timeout, the start timeout, TLS (``$TIDEMARK_ZK_TLS_CA``,
:func:`tls_options`) and the principal (``$TIDEMARK_ZK_AUTH``, :func:`auth_options`)
are set one way.

ZooKeeper not answering is one error here, :class:`ZooKeeperUnavailableError` (naming
the connect string): a session that does not start in time, and kazoo's outage errors
(:data:`OUTAGES`) met by the store and the driver (:func:`unavailable`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Auth

from tidemark.controller.exceptions import ZooKeeperConfigError, ZooKeeperUnavailableError
from tidemark.environment import ZK_AUTH, ZK_TLS_CA

log = logging.getLogger(__name__)

C = TypeVar("C")

DEFAULT_SESSION_TIMEOUT_MS = 10_000
"""kazoo's default: a session expires this long after its client was last heard."""
DEFAULT_START_TIMEOUT_S = 30.0
"""How long :func:`open_session` waits for the first connection."""

OUTAGES = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError)
"""kazoo's errors for "ZooKeeper did not answer" (the rest are ZooKeeper refusing)."""


def outages_named(cls: type[C]) -> type[C]:
    """Class decorator: each public method of ``cls`` (whose ``client`` is a session)
    raises kazoo's outage errors as :class:`ZooKeeperUnavailableError`."""
    for name, method in list(vars(cls).items()):
        if inspect.isfunction(method) and not name.startswith("_"):
            setattr(cls, name, _answered(method))
    return cls


def _answered(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except OUTAGES as exc:
            raise unavailable(self.client, type(exc).__name__) from exc

    return call


def unavailable(client: KazooClient, why: str) -> ZooKeeperUnavailableError:
    """The typed error for ``client``'s ensemble not answering (``why``: an outage's name)."""
    hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
    return ZooKeeperUnavailableError(hosts, f"gave no answer ({why})")


RECONNECT_LOG_EVERY_S = 30.0
"""How often kazoo's reconnect attempts to an unanswering ensemble are logged: it
tries every few hundred milliseconds and logs each try, tens of lines a second."""


class _QuietReconnects(logging.Filter):
    """Lets kazoo's "Connecting to" / "Connection dropped" lines through once per
    :data:`RECONNECT_LOG_EVERY_S` each; its other lines pass."""

    KINDS = ("Connecting to", "Connection dropped")

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        kind = next((k for k in self.KINDS if message.startswith(k)), None)
        if kind is None:
            return True
        now = record.created
        if now - self._last.get(kind, float("-inf")) < RECONNECT_LOG_EVERY_S:
            return False
        self._last[kind] = now
        return True


class _NoCredentials(logging.Filter):
    """Hides the credentials of kazoo's "Sending request" DEBUG line for the ``Auth``
    request each connection sends (it shows them as given: ``$TIDEMARK_ZK_AUTH``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, Auth) for a in record.args):
            record.args = tuple(
                a._replace(auth="<hidden>") if isinstance(a, Auth) else a for a in record.args
            )
        return True


_KAZOO_LOG = logging.getLogger("kazoo.client")
for _filter in (_QuietReconnects, _NoCredentials):
    if not any(isinstance(f, _filter) for f in _KAZOO_LOG.filters):
        _KAZOO_LOG.addFilter(_filter())


def tls_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """kazoo's TLS settings from ``$TIDEMARK_ZK_TLS_CA`` (unset: none, the session is in
    clear): the server's certificate must chain to that CA and name the host dialled."""
    env = os.environ if environ is None else environ
    ca = env.get(ZK_TLS_CA, "").strip()
    if not ca:
        return {}
    return {"use_ssl": True, "ca": ca, "verify_certs": True, "check_hostname": True}


def auth_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """kazoo's credentials from ``$TIDEMARK_ZK_AUTH`` (``user:password``, the digest
    scheme; unset: none, the session is anonymous). Its registrations are then under an
    ACL for that principal (``ZooKeeperStore.register_writer``)."""
    env = os.environ if environ is None else environ
    auth = env.get(ZK_AUTH, "").strip()
    if not auth:
        return {}
    user, sep, password = auth.partition(":")
    if not sep or not user or not password:
        raise ZooKeeperConfigError(f"${ZK_AUTH} must be user:password (the digest scheme)")
    return {"auth_data": [("digest", auth)]}


def open_session(
    connect: str,
    *,
    chroot: str | None = None,
    timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
) -> KazooClient:
    """A started client for ``connect`` (+ ``chroot``); close it with :func:`close_session`."""
    hosts = connect if not chroot else f"{connect.rstrip('/')}/{chroot.strip('/')}"
    options = {**tls_options(), **auth_options()}
    client = KazooClient(hosts=hosts, timeout=timeout_ms / 1000, **options)
    try:
        client.start(timeout=start_timeout_s)  # on a time-out kazoo stops and closes it
    except KazooTimeoutError as exc:
        raise ZooKeeperUnavailableError(
            connect, f"gave no session within {start_timeout_s:g} s"
        ) from exc
    return client


def close_session(client: KazooClient) -> None:
    """Stop ``client`` (its ephemeral nodes and watches end with the session) and close it."""
    try:
        client.stop()
    finally:
        client.close()


@contextlib.contextmanager
def zookeeper_session(
    connect: str,
    *,
    chroot: str | None = None,
    timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
) -> Iterator[KazooClient]:
    """:func:`open_session` for the ``with`` block, closed when it ends."""
    client = open_session(
        connect, chroot=chroot, timeout_ms=timeout_ms, start_timeout_s=start_timeout_s
    )
    try:
        yield client
    finally:
        close_session(client)


__all__ = [
    "DEFAULT_SESSION_TIMEOUT_MS",
    "DEFAULT_START_TIMEOUT_S",
    "OUTAGES",
    "auth_options",
    "close_session",
    "open_session",
    "outages_named",
    "unavailable",
    "zookeeper_session",
]
