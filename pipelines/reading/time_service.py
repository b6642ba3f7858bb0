"""Asking a running ``tidemark serve`` where to start or stop, with Delta as the fallback.

    index = default_index(lake)             # a ServiceIndex when TIDEMARK_TIME_SERVICE is set
    found = index.start("shop/orders", t)   # Found | None, as SeekIndex.start
    group = ReaderGroup.create(..., from_time=t)  # uses default_index() itself

The time service keeps each stream's index in memory and answers a lookup
in well under a millisecond plus one HTTP round trip on a kept-alive
connection; a cold :class:`~tidemark.pipelines.reading.seek.SeekIndex` reads the
Delta tables first (tens to hundreds of milliseconds). A
:class:`ServiceIndex` *is* a ``SeekIndex``: when the service cannot be
reached (refused, timed out, an answer that is not JSON) it logs once and
answers from Delta itself, so a service that is down never breaks a reader.
Errors the service reports about the request (an unknown stream, a bad
time) are raised as the same exceptions the local lookup raises.

``TIDEMARK_TIME_SERVICE`` (named in ``tidemark.environment``) holds the
service's base URL, e.g. ``http://127.0.0.1:8790``.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from tidemark.controller.delta.location import TableLocation, shared
from tidemark.controller.delta.tables import Root
from tidemark.controller.exceptions import UnknownStreamError
from tidemark.controller.index import START, STOP, Rule
from tidemark.controller.metadata import cut_from_json, cut_to_json
from tidemark.controller.model import StreamCut, Watermark
from tidemark.environment import TIME_SERVICE
from tidemark.errors import ServiceUnavailableError as _Unavailable
from tidemark.pipelines.reading.exceptions import InvalidTimestampError
from tidemark.pipelines.reading.seek import Found, SeekIndex, shared_index

log = logging.getLogger(__name__)

TIME_SERVICE_ENV = TIME_SERVICE
"""The variable ``tidemark.environment`` names; read here because readers do not import infra."""

_UNREACHABLE = (OSError, http.client.HTTPException, ValueError)


class TimeServiceUnavailableError(_Unavailable):
    """The time service did not answer usefully (a reader's index then reads Delta);
    ``address``: the service's URL."""

    def __init__(self, detail: str, url: str | None = None) -> None:
        super().__init__("the time service", detail if url is None else f"{url} {detail}")
        self.describe("the time service", url, f"gave no answer ({detail})")


ServiceUnavailableError = TimeServiceUnavailableError
"""Its name before the common hierarchy (callers catch it by this name)."""


def time_service_url(environ: Mapping[str, str] | None = None) -> str | None:
    """The configured service URL, ``None`` when unset or empty."""
    env = os.environ if environ is None else environ
    return env.get(TIME_SERVICE_ENV, "").strip() or None


def found_from_json(body: Mapping[str, Any] | None) -> Found | None:
    """A ``found`` object of the service's answers -> :class:`Found`."""
    if body is None:
        return None
    cut = cut_from_json(body["stream_cut"])
    return Found(int(body["seq"]), int(body["time"]), int(body["upper_time_max"]), cut)


def found_to_json(found: Found | None) -> dict[str, Any] | None:
    """:class:`Found` -> a ``found`` object of the service's answers."""
    if found is None:
        return None
    return _mark_json(found.seq, found.time, found.stream_cut, upper_time_max=found.upper_time_max)


def watermark_to_json(watermark: Watermark | None) -> dict[str, Any] | None:
    """:class:`Watermark` -> a ``watermark`` object of the service's answers (no stream)."""
    if watermark is None:
        return None
    return _mark_json(
        watermark.seq, watermark.time, watermark.stream_cut, upper_time=watermark.upper_time
    )


def _mark_json(seq: int, time_ms: int, cut: StreamCut, **upper: int) -> dict[str, Any]:
    """The JSON of a watermark in an answer: its ``seq``, ``time``, one upper time
    (``upper_time`` or the running ``upper_time_max``) and ``stream_cut``."""
    return {"seq": seq, "time": time_ms, **upper, "stream_cut": cut_to_json(cut)}


def watermark_from_json(stream: str, body: Mapping[str, Any] | None) -> Watermark | None:
    """A ``watermark`` object of the service's answers -> :class:`Watermark`."""
    if body is None:
        return None
    cut = cut_from_json(body["stream_cut"])
    return Watermark(stream, int(body["time"]), int(body["upper_time"]), cut, int(body["seq"]))


class TimeServiceClient:
    """Kept-alive HTTP connections to the service (``http.client``, one per thread).

    ``https://`` URLs are spoken over TLS (the default context: certificates
    checked). A connection the server closed while idle is opened again once;
    a service that cannot be reached, or answers with something that is not
    the API's JSON, raises :class:`ServiceUnavailableError`.
    """

    def __init__(self, url: str, timeout_s: float = 2.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"{TIME_SERVICE_ENV}={url!r}: expected http://HOST:PORT")
        self.url = url.rstrip("/")
        self._host = parsed.hostname
        self._port = parsed.port
        self._tls = ssl.create_default_context() if parsed.scheme == "https" else None
        self._prefix = parsed.path.rstrip("/")
        self._timeout_s = timeout_s
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._tls is None:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
            else:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout_s, context=self._tls
                )
            self._local.conn = conn
        return conn

    def _exchange(self, target: str) -> tuple[int, bytes]:
        """GET ``target`` and read its whole response: (status, body)."""
        conn = self._connection()
        conn.request("GET", target, headers={"Accept": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()

    def get(self, path: str, **params: object) -> Any:
        """GET ``path`` -> the decoded JSON; errors the service names are raised as ours."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        target = f"{self._prefix}{path}" + (f"?{query}" if query else "")
        for attempt in (1, 2):  # a kept-alive connection the server closed: reconnect once
            try:
                status, payload = self._exchange(target)
                break
            except _UNREACHABLE as exc:
                self.close()
                if attempt == 2:
                    raise TimeServiceUnavailableError(str(exc), self.url) from exc
        try:
            body = json.loads(payload)
        except ValueError as exc:
            raise TimeServiceUnavailableError(f"{target}: not JSON", self.url) from exc
        if status == 404 and body.get("error") == "unknown_stream":
            raise UnknownStreamError(body.get("stream", ""))
        if status == 400 and body.get("error") == "invalid_timestamp":
            raise InvalidTimestampError(body.get("detail", "refused"), params.get("t"))
        if status != 200:
            raise TimeServiceUnavailableError(f"{target}: HTTP {status} {body}", self.url)
        return body

    def close(self) -> None:
        """Close this thread's connection (the next request opens another)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def stream_path(stream: str) -> str:
    return "/api/streams/" + urllib.parse.quote(stream, safe="/")


class ServiceIndex(SeekIndex):
    """A :class:`SeekIndex` whose :meth:`start` and :meth:`stop` ask the service first."""

    def __init__(
        self,
        url: str,
        lake: Root = None,
        *,
        retry_after_s: float = 30.0,
    ) -> None:
        super().__init__(lake)
        self.client = TimeServiceClient(url)
        self._retry_after_s = retry_after_s
        self._down_until = 0.0

    def _ask(self, stream: str, which: str, t: int) -> tuple[bool, Found | None]:
        if time.monotonic() < self._down_until:
            return False, None
        try:
            body = self.client.get(f"{stream_path(stream)}/{which}", t=t)
        except ServiceUnavailableError as exc:
            log.warning("time service unavailable (%s); reading Delta instead", exc)
            self._down_until = time.monotonic() + self._retry_after_s
            return False, None
        return True, found_from_json(body.get("found"))

    def find(self, stream: str, rule: Rule, t: int) -> Found | None:
        answered, found = self._ask(stream, "start" if rule is START else "stop", t)
        return found if answered else super().find(stream, rule, t)

    def start_cuts(self, streams: Sequence[str], t: int) -> dict[str, StreamCut | None]:
        return self._one_by_one(streams, START, t)  # each asks the service first

    def stop_cuts(self, streams: Sequence[str], t: int) -> dict[str, StreamCut | None]:
        return self._one_by_one(streams, STOP, t)


def default_index(lake: Root = None, environ: Mapping[str, str] | None = None) -> SeekIndex:
    """The index lookups should use: the running service's when ``TIDEMARK_TIME_SERVICE``
    is set (falling back to Delta), else the process's shared Delta index."""
    url = time_service_url(environ)
    if url is None:
        return shared_index(lake)
    location = TableLocation.of(lake)
    return shared("service index", location, lambda: ServiceIndex(url, location), url)


__all__ = [
    "TIME_SERVICE_ENV",
    "ServiceIndex",
    "TimeServiceClient",
    "cut_from_json",
    "cut_to_json",
    "default_index",
    "found_from_json",
    "found_to_json",
    "time_service_url",
    "watermark_from_json",
    "watermark_to_json",
]
