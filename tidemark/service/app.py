"""The HTTP face of :class:`~tidemark.service.state.TimeService` (Starlette on uvicorn).

    app = build_app(service)          # uvicorn.run(app, host="127.0.0.1", port=8790)

JSON API (answers give times in milliseconds since the epoch; a stream is ``scope/name``).
A time parameter (``t``, ``since``, ``as_of``, ``from_ms``, ``to_ms``) takes the one time
syntax of :mod:`tidemark.controller.timestamps`: epoch ms, ISO-8601 (no zone: UTC),
``now`` or a signed span from now (``t=-5m``); ``timeout`` (alias ``timeout_ms``) takes a
duration (``30s``; a bare number is milliseconds); a span in minutes (``minutes``, the
dashboard's ``from_min``/``to_min``) takes a bare number of minutes or a duration (``2h``):

- ``GET /api/streams`` -- every stream: epochs, segments (key ranges,
  sealed sizes), latest watermark and lag; ``/api/streams/{scope}/{name}``: one.
- ``GET /api/streams/{scope}/{name}/start?t=MS`` -- where to start reading
  for ``t`` (``stream_cut_at``): ``found`` (``seq, time, upper_time_max,
  stream_cut``; null: the head) and the resolved ``stream_cut``.
- ``GET /api/streams/{scope}/{name}/stop?t=MS`` -- where to stop
  (``complete_cut_at``): ``found``; ``stream_cut`` null while incomplete.
  Both also give ``offsets``, the cut as ``{topic: {partition: offset}}``
  (Spark's ``startingOffsets``/``endingOffsets`` JSON).
  These two answer from memory, on the event loop; their latency is observed
  in ``tidemark_serve_request_duration_seconds``.
- ``GET /api/streams/{scope}/{name}/wait?t=MS&timeout=30s`` -- a long poll: answers
  as soon as the service's tail reads a watermark with ``time >= t`` (at
  once when there is one), else after ``timeout_ms`` (default 30 000, at most
  :data:`MAX_WAIT_MS`): ``reached``, ``watermark`` (the first with
  ``time >= t``: ``seq, time, upper_time, stream_cut``; null when not
  reached) and ``latest`` (the stream's latest watermark, null: none yet).
  A waiting request holds no thread: it sleeps on the stream's
  ``asyncio.Event`` (:class:`~tidemark.service.state.StreamWaits`).
- ``GET /api/start|stop|wait?stream=A&stream=B&t=MS`` -- the same three questions
  for several streams at once (``tidemark.service.joint``): ``streams`` holds each
  one's answer; ``stop`` gives cuts only once all are complete; ``wait``
  answers once every stream passed ``t``, else names those ``behind`` and the
  writers holding them back.
- ``GET /api/streams/{scope}/{name}/watermarks?since=MS&version=N&as_of=MS&limit=N``
  -- watermarks from ``marks`` as of a table version or a time (Delta time travel);
  ``observed`` (null: noted) names the observers a watermark rests on, their
  largest ``lateness_ms`` and their ``possibly_late`` count.
- ``GET /api/streams/{scope}/{name}/history?minutes=60`` -- the charts' data:
  per emitted watermark, its time, upper time and lag.
- ``GET /api/rejected?stream=S&limit=N`` -- the latest rejected marks and reasons.
- ``GET /api/laggards?stream=S`` -- per stream (one: ``stream``), the writers that
  hold its watermark back: ``writer``, ``instance``, ``kind`` (``lagging`` or
  ``slowest``), ``noted_time``, ``since``, ``behind_ms``, ``first_seen``,
  ``last_seen``, and ``at`` (the controller cycle that saw it); streams nobody
  holds back are left out.
- ``GET /api/tables`` -- every tracked Delta table (``tidemark table track``): ``version``,
  ``complete_through``, ``status`` (``reason``), its streams' times and ``behind_ms``.
- ``GET /api/groups/{group}/window`` -- a reader group's cut, time window, readers.
- ``GET /api/controller`` -- the leading and standby controller drivers, the last batch.
- ``GET /api/timelines?from_ms=&to_ms=`` -- per timeline, messages by status
  with a time in the range (needs the timeline database).
- ``GET /metrics`` -- Prometheus text: ``tidemark_stream_*``, ``tidemark_reader_group_*``,
  ``tidemark_serve_*`` and the process's default registry (``tidemark_build_info``).

Errors are JSON too: ``{"error": "unknown_stream", ...}`` (404),
``{"error": "invalid_timestamp", ...}`` (400), ``{"error": "<ExceptionName>",
"detail": ...}`` (400) for any other refused input.

Dashboard (server-rendered HTML; charts by the vendored uPlot, no network
needed): ``/`` and ``/streams/{scope}/{name}``. ``/`` shows the writers holding
watermarks back (laggards), reader groups with their lag, the tracked tables, the
controller's drivers and last batch, and the streams a page at a time (``?q=``
searches names, ``?sort=lag|name``, ``?page=``; :mod:`tidemark.service.listing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from tidemark.controller.exceptions import InvalidDurationError, UnknownStreamError
from tidemark.controller.model import segment_number
from tidemark.controller.navigation import at_or_after_head, head_cut
from tidemark.controller.timestamps import TIME_FORMS, parse_duration, parse_time
from tidemark.errors import ServiceUnavailableError, TidemarkError
from tidemark.pipelines.build_info import register_build_info
from tidemark.pipelines.reading.exceptions import InvalidTimestampError, UnknownReaderGroupError
from tidemark.pipelines.reading.time_service import cut_to_json, found_to_json, watermark_to_json
from tidemark.service.access import BearerToken
from tidemark.service.joint import joint_start, joint_stop, joint_wait, streams_param
from tidemark.service.listing import held_back, page_of_streams
from tidemark.service.state import TimeService, stream_json, wall_ms

HERE = Path(__file__).parent
HOUR_MS = 3_600_000
DEFAULT_WAIT_MS = 30_000
MAX_WAIT_MS = 600_000
"""The longest a ``wait`` request may be held; a client waiting longer asks again."""


def _stream(request: Request) -> str:
    return f"{request.path_params['scope']}/{request.path_params['name']}"


def _time_param(request: Request, name: str) -> int | None:
    """A time from the query string, in the one syntax (``parse_time``: epoch ms,
    ISO-8601, ``now``, ``-5m``); ``None`` when absent."""
    text = request.query_params.get(name)
    return None if text is None or text == "" else parse_time(text, name)


def _wait_timeout(request: Request) -> int:
    """How long a ``wait`` may be held: ``timeout`` or its alias ``timeout_ms``, a duration
    in the one syntax (``30s``, ``1m``; a bare number is milliseconds), at most
    :data:`MAX_WAIT_MS`; else a 400 naming the parameter."""
    name = "timeout" if "timeout" in request.query_params else "timeout_ms"
    text = request.query_params.get(name)
    if text is None or text == "":
        return DEFAULT_WAIT_MS
    try:
        timeout_ms = parse_duration(text, name)
    except InvalidDurationError as exc:
        raise HTTPException(400, str(exc)) from None
    if timeout_ms > MAX_WAIT_MS:
        raise HTTPException(400, f"{name}={text}: at most {MAX_WAIT_MS} ms")
    return timeout_ms


_MAX_COUNT = 2**63 - 1
"""The largest count or table version a request may name (a Java long, as Delta's)."""


def _count_param(request: Request, name: str, default: int) -> int:
    """A whole number within 0 … 2**63-1 from the query string, else a 400 naming it."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    shown = text if len(text) <= 24 else f"{text[:24]}…"
    if not text.isascii() or not text.strip().isdigit():
        raise HTTPException(400, f"{name}={shown!r}: not a whole number >= 0")
    if len(text.strip().lstrip("0")) > len(str(_MAX_COUNT)) or int(text) > _MAX_COUNT:
        raise HTTPException(400, f"{name}={shown!r}: above 2**63-1")
    return int(text)


def _minutes_param(request: Request, name: str, default: int) -> int:
    """A span in whole minutes from the query string: a bare number is minutes (the unit
    its name says), or a duration with its unit in the one syntax (``90m``, ``2h``, ``1d``,
    rounded down to minutes); else a 400 naming the parameter."""
    text = request.query_params.get(name)
    if text is None or text == "" or text.strip().isdigit():
        return _count_param(request, name, default)
    try:
        return parse_duration(text, name, bare_ms=False) // 60_000
    except InvalidDurationError as exc:
        raise HTTPException(400, str(exc)) from None


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S.%f"
    )[:-3]


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def _shown(part: Callable[[], Any]) -> tuple[Any, str | None]:
    """A dashboard part and ``None``, or ``None`` and the error of a service not answering."""
    try:
        return part(), None
    except ServiceUnavailableError as exc:
        return None, str(exc)


class Handlers:
    """The routes' handlers, one named method each, over one :class:`TimeService`: the
    lookups answer from memory on the event loop (``async``); the rest may read Delta or
    ZooKeeper, so Starlette runs them in its thread pool (plain methods)."""

    def __init__(self, service: TimeService) -> None:
        self.service = service
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["iso"] = _iso
        self.templates.env.filters["duration"] = _duration
        self.serve_registry = CollectorRegistry()
        self.latency = Histogram(
            "tidemark_serve_request_duration_seconds",
            "Time to answer an API request, by route.",
            ["route"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.serve_registry,
        )

    def timed(
        self, route: str, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """``handler`` with its latency observed under ``route``."""
        observe = self.latency.labels(route).observe

        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            started = time.perf_counter()
            try:
                return await handler(request)
            finally:
                observe(time.perf_counter() - started)

        return wrapped

    # --- lookups: answered from memory, on the event loop -----------------------------------

    async def start_cut(self, request: Request) -> Response:
        """`?t=TIME` (required): where a reader starts so that it misses no event with
        time ≥ t (`stream_cut_at`): `stream_cut` by segment id and `offsets` by topic
        and partition; `found`, the watermark it rests on (null: none, the cut is the
        stream's head)."""
        stream, t = _stream(request), _required_time(request)
        found = self.service.start_lookup(stream, t)
        meta = self.service.metadata(stream)
        cut = head_cut(meta) if found is None else at_or_after_head(found.stream_cut, meta)
        return JSONResponse(
            {
                "stream": stream,
                "timestamp": t,
                "found": found_to_json(found),
                "stream_cut": cut_to_json(cut),
                "offsets": topic_offsets(meta.topic, cut),
            }
        )

    async def stop_cut(self, request: Request) -> Response:
        """`?t=TIME` (required): the cut before which every event with time ≤ t lies
        (`complete_cut_at`); `stream_cut` and `offsets` are null while the stream is
        not complete up to t."""
        stream, t = _stream(request), _required_time(request)
        found = self.service.stop_lookup(stream, t)
        topic = self.service.metadata(stream).topic
        return JSONResponse(
            {
                "stream": stream,
                "timestamp": t,
                "found": found_to_json(found),
                "stream_cut": None if found is None else cut_to_json(found.stream_cut),
                "offsets": None if found is None else topic_offsets(topic, found.stream_cut),
            }
        )

    async def wait_for(self, request: Request) -> Response:
        """`?t=TIME` (required), `?timeout=DURATION` (alias `timeout_ms`; default 30 s,
        at most 10 min): a long poll, answered as soon as a watermark with time ≥ t is
        seen: `reached`, `watermark` (the first such) and `latest`."""
        stream = _stream(request)
        t = _required_time(request)
        timeout_ms = _wait_timeout(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            changed = self.service.waits.event(stream)  # taken first: no change is missed
            found, latest = self.service.reached(stream, t)
            remaining = deadline - loop.time()
            if found is not None or remaining <= 0 or self.service.waits.closing:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)
        if isinstance(found, int):  # older than the kept history: read Delta, off the loop
            found = await run_in_threadpool(self.service.first_from_delta, stream, t)
        return JSONResponse(
            {
                "stream": stream,
                "timestamp": t,
                "reached": found is not None,
                "watermark": watermark_to_json(found),
                "latest": watermark_to_json(latest),
            }
        )

    # --- the rest: may read Delta or ZooKeeper, so in the thread pool -----------------------

    def streams(self, request: Request) -> Response:
        """Every stream: its epochs, segments with key ranges and sealed sizes, the latest
        watermark and its watermark lag (`lag_ms`)."""
        now = wall_ms()
        return JSONResponse(
            [stream_json(m, self.service.latest(m.name), now) for m in self.service.streams()]
        )

    def one_stream(self, request: Request) -> Response:
        """One stream, as `/api/streams` lists it."""
        stream = _stream(request)
        meta = self.service.metadata(stream)
        return JSONResponse(stream_json(meta, self.service.latest(stream), wall_ms()))

    def watermarks(self, request: Request) -> Response:
        """`?since=TIME`, `?version=N` or `?as_of=TIME` (Delta time travel), `?limit=N`
        (default 1000): rows of the `marks` table and its `table_version`; a row's
        `observed` is null for a noted watermark."""
        stream = _stream(request)
        version, rows = self.service.watermarks(
            stream,
            since_ms=_time_param(request, "since") or 0,
            version=_count_param(request, "version", -1)
            if "version" in request.query_params
            else None,
            as_of_ms=_time_param(request, "as_of"),
            limit=_count_param(request, "limit", 1000),
        )
        return JSONResponse({"stream": stream, "table_version": version, "watermarks": rows})

    def history(self, request: Request) -> Response:
        """`?minutes=N` (default 60; a duration too): that span's watermarks as columns,
        in milliseconds: `emitted_at_ms`, `time_ms`, `upper_time_ms` and
        `watermark_lag_ms` (emitted at - time)."""
        stream = _stream(request)
        minutes = _minutes_param(request, "minutes", 60)
        return JSONResponse({"stream": stream, **_series(self.service, stream, minutes * 60_000)})

    def rejected(self, request: Request) -> Response:
        """`?stream=S`, `?limit=N` (default 50): the latest rejected marks, with reasons."""
        stream = request.query_params.get("stream") or None
        return JSONResponse(self.service.rejected(stream, _count_param(request, "limit", 50)))

    def laggards(self, request: Request) -> Response:
        """`?stream=S`: the writers holding each stream back: id, instance, noted time,
        first and last seen."""
        return JSONResponse(self.service.laggards(request.query_params.get("stream") or None))

    def tables(self, request: Request) -> Response:
        """Every tracked Delta table: `version`, `complete_through` (null: no time yet),
        `status` (`known`, or `unknown` with its `reason`), `checkpoint`, `streams` (each
        stream's latest watermark time) and `behind_ms` (how far the table's time is
        behind the slowest of them)."""
        return JSONResponse(self.service.tables())

    def window(self, request: Request) -> Response:
        """A reader group's cut and time window."""
        return JSONResponse(self.service.window(request.path_params["group"]))

    def controller(self, request: Request) -> Response:
        """The leading and standby controller drivers, and the last batch."""
        return JSONResponse(self.service.controller())

    def timelines(self, request: Request) -> Response:
        """`?from_ms=TIME`, `?to_ms=TIME`: timeline message counts by status in that
        range (404 without a timeline database)."""
        counts = self.service.timeline_counts(
            _time_param(request, "from_ms"), _time_param(request, "to_ms")
        )
        if counts is None:
            raise HTTPException(404, "no timeline database configured (TIDEMARK_POSTGRES_DSN)")
        return JSONResponse(counts)

    # --- several streams at once (tidemark.service.joint) -----------------------------------

    async def joint_start_cut(self, request: Request) -> Response:
        """`?stream=A&stream=B&t=TIME`: per stream, `found` and `stream_cut`, its own
        start cut for t."""
        streams = streams_param(request.query_params.getlist("stream"))
        return JSONResponse(joint_start(self.service, streams, _required_time(request)))

    async def joint_stop_cut(self, request: Request) -> Response:
        """`?stream=A&stream=B&t=TIME`: `complete` (every stream complete up to t),
        `incomplete` (those that are not) and, per stream, `found` and `stream_cut`
        (all null until `complete`)."""
        streams = streams_param(request.query_params.getlist("stream"))
        return JSONResponse(joint_stop(self.service, streams, _required_time(request)))

    async def joint_wait_for(self, request: Request) -> Response:
        """`?stream=A&stream=B&t=TIME&timeout=DURATION`: a long poll, answered once every
        stream has a watermark with time ≥ t: `reached`, `behind` (each stream short of
        t → the writers holding it back) and, per stream, `reached`, `watermark`,
        `latest`."""
        streams = streams_param(request.query_params.getlist("stream"))
        t = _required_time(request)
        timeout_ms = _wait_timeout(request)
        return JSONResponse(await joint_wait(self.service, streams, t, timeout_ms))

    def metrics(self, request: Request) -> Response:
        """Prometheus metrics: the streams', the requests' and this process's."""
        body = (
            generate_latest(self.service.registry)
            + generate_latest(self.serve_registry)
            + generate_latest(REGISTRY)
        )
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def healthz(self, request: Request) -> Response:
        """Alive: 200 while the process serves (no token needed)."""
        return JSONResponse({"status": "alive"})

    async def readyz(self, request: Request) -> Response:
        """Ready: 200 once the last refresh of the tables succeeded, else 503 with its
        error (no token needed)."""
        error = self.service.last_refresh_error
        if self.service.refreshes == 0 or error is not None:
            return JSONResponse({"status": "not ready", "detail": error}, status_code=503)
        return JSONResponse({"status": "ready"})

    # --- dashboard ----------------------------------------------------------------------------

    def index_page(self, request: Request) -> Response:
        """The dashboard: writers holding streams back, reader groups, tracked tables, the
        controller, the streams a page at a time (`?q=` searches names, `?sort=lag` or
        `name`), timeline counts from `?from_min=` to `?to_min=` minutes ago."""
        now = wall_ms()
        from_min = _minutes_param(request, "from_min", 60)
        to_min = _minutes_param(request, "to_min", 0)
        query = request.query_params.get("q", "")
        order = request.query_params.get("sort", "lag")
        held = self.service.laggards()
        page = page_of_streams(
            [stream_json(m, self.service.latest(m.name), now) for m in self.service.streams()],
            query=query,
            order=order,
            page=_count_param(request, "page", 1),
        )
        for info in page.items:  # charts for the page shown only
            info["series"] = _series(self.service, info["stream"], HOUR_MS)
            info["laggards"] = held.get(info["stream"], [])
        held_rows, held_total = held_back(held)
        controller_view, down = _shown(self.service.controller)
        if down is not None:  # show it, keep the page
            controller_view = {"error": down}
        tables, tables_error = _shown(self.service.tables)
        groups, groups_error = _shown(lambda: self.service.group_lags(now))
        counts, timelines_error = _shown(
            lambda: self.service.timeline_counts(now - from_min * 60_000, now - to_min * 60_000)
        )
        return self.templates.TemplateResponse(
            request,
            "index.html",
            {
                "now": now,
                "page": page,
                "query": query,
                "order": order,
                "held": held_rows,
                "held_total": held_total,
                "groups": groups,
                "groups_error": groups_error,
                "tables": tables,
                "tables_error": tables_error,
                "controller": controller_view,
                "rejected": self.service.rejected(None, 20),
                "timelines": counts,
                "timelines_error": timelines_error,
                "from_min": from_min,
                "to_min": to_min,
                "refresh_error": self.service.last_refresh_error,
                "delta_root": self.service.location.uri,
            },
        )

    def stream_page(self, request: Request) -> Response:
        """One stream's page: watermark time and watermark lag charts, the latest
        watermarks, its rejected marks and the writers holding it back."""
        stream = _stream(request)
        now = wall_ms()
        meta = self.service.metadata(stream)
        _, recent = self.service.watermarks(stream, limit=20)
        return self.templates.TemplateResponse(
            request,
            "stream.html",
            {
                "now": now,
                "s": stream_json(meta, self.service.latest(stream), now),
                "series": _series(self.service, stream, HOUR_MS),
                "recent": list(reversed(recent)),
                "rejected": self.service.rejected(stream, 20),
                "laggards": self.service.laggards(stream).get(stream, []),
            },
        )

    def routes(self) -> list[BaseRoute]:
        """Every route of the service and dashboard, each to its handler."""
        api = "/api/streams/{scope}/{name}"
        return [
            Route("/", self.index_page),
            Route("/streams/{scope}/{name}", self.stream_page),
            Route("/api/streams", self.streams),
            Route(api, self.one_stream),
            Route(f"{api}/start", self.timed("start", self.start_cut)),
            Route(f"{api}/stop", self.timed("stop", self.stop_cut)),
            Route(f"{api}/wait", self.wait_for),
            Route(f"{api}/watermarks", self.watermarks),
            Route(f"{api}/history", self.history),
            Route("/api/start", self.timed("joint_start", self.joint_start_cut)),
            Route("/api/stop", self.timed("joint_stop", self.joint_stop_cut)),
            Route("/api/wait", self.joint_wait_for),
            Route("/api/rejected", self.rejected),
            Route("/api/laggards", self.laggards),
            Route("/api/tables", self.tables),
            Route("/api/groups/{group}/window", self.window),
            Route("/api/controller", self.controller),
            Route("/api/timelines", self.timelines),
            Route("/metrics", self.metrics),
            Route("/healthz", self.healthz),
            Route("/readyz", self.readyz),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]


def build_app(service: TimeService, token: str | None = None) -> Any:
    """The ASGI application serving ``service``; with ``token``, every route but the
    probes needs it as a bearer token (:class:`tidemark.service.access.BearerToken`)."""
    register_build_info(REGISTRY)  # there, not here: a controller in this process adds it too
    app = Starlette(routes=Handlers(service).routes(), exception_handlers=_handlers())
    app.state.service = service
    return app if token is None else BearerToken(app, token)


def topic_offsets(topic: str, cut: Mapping[int, int]) -> dict[str, dict[str, int]]:
    """A stream cut as Spark's Kafka source takes ``startingOffsets``/``endingOffsets``:
    ``{topic: {partition: offset}}`` (a segment is its topic's partition ``number``)."""
    return {topic: {str(segment_number(seg)): offset for seg, offset in sorted(cut.items())}}


def _required_time(request: Request) -> int:
    """The ``t`` of a start/stop/wait request, in the one syntax (``parse_time``)."""
    text = request.query_params.get("t")
    if text is None:
        raise InvalidTimestampError(f"give the time as ?t=TIME: {TIME_FORMS}")
    return parse_time(text, "t")


def _series(service: TimeService, stream: str, span_ms: int) -> dict[str, list[Any]]:
    """The watermarks of the last ``span_ms`` as columns, in milliseconds like every
    time the API answers: when each was emitted, its time and upper time, and its
    watermark lag (emitted at - time, never below 0)."""
    points = [p for p in service.history(stream, wall_ms() - span_ms) if p.emitted_at > 0]
    return {
        "emitted_at_ms": [p.emitted_at for p in points],
        "time_ms": [p.time for p in points],
        "upper_time_ms": [p.upper_time for p in points],
        "watermark_lag_ms": [max(0, p.emitted_at - p.time) for p in points],
    }


def error_answer(exc: Exception) -> tuple[int, dict[str, Any]] | None:
    """The status and JSON body an API request that raised ``exc`` is answered with;
    ``None``: not a refusal of the request (a 500, as Starlette answers it)."""
    if isinstance(exc, UnknownStreamError):
        return 404, {"error": "unknown_stream", "stream": exc.stream, "detail": str(exc)}
    if isinstance(exc, UnknownReaderGroupError):
        return 404, {"error": "unknown_reader_group", "detail": str(exc)}
    if isinstance(exc, ServiceUnavailableError):
        return 503, {"error": "service_unavailable", "service": exc.service, "detail": str(exc)}
    if isinstance(exc, InvalidTimestampError):
        return 400, {"error": "invalid_timestamp", "detail": str(exc)}
    if isinstance(exc, TidemarkError):
        return 400, {"error": type(exc).__name__, "detail": str(exc)}
    if isinstance(exc, HTTPException):
        return exc.status_code, {"error": "http", "detail": exc.detail}
    return None


def _handlers() -> dict[Any, Any]:
    async def handle(request: Request, exc: Exception) -> Response:
        answer = error_answer(exc)
        assert answer is not None  # registered only for the classes error_answer knows
        status, body = answer
        if request.url.path.startswith("/api/"):
            return JSONResponse(body, status_code=status)
        return HTMLResponse(
            f"<h1>{status}</h1><p>{body.get('detail') or body.get('error')}</p>",
            status_code=status,
        )

    refusals = (
        UnknownStreamError,
        UnknownReaderGroupError,
        InvalidTimestampError,
        ServiceUnavailableError,
        TidemarkError,
        HTTPException,
    )
    return dict.fromkeys(refusals, handle)


__all__ = ["build_app"]
