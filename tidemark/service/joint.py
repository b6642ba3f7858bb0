"""The time service's answers for several streams at once (``/api/start``, ``/stop``, ``/wait``).

    GET /api/start?stream=shop/orders&stream=shop/payments&t=MS
    GET /api/stop?stream=shop/orders&stream=shop/payments&t=MS
    GET /api/wait?stream=shop/orders&stream=shop/payments&t=MS&timeout_ms=N

Each stream gets its own one-stream answer (the same fields as
``/api/streams/{scope}/{name}/start|stop|wait``), under ``streams`` in the
order asked, with the joint rules of ``tidemark.pipelines.reading.streams``: start
cuts are each stream's own; the stop cuts are there only once **every**
stream is complete up to ``t`` (``complete``; the rest are listed in
``incomplete``); a wait answers once every stream's watermark has passed
``t``, else at the timeout with ``behind``: each stream still short of it and
the writers holding it back (the controller's ``laggards``). The handlers in
``tidemark.service.app`` parse the request; these build the answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool

from tidemark.controller.model import Watermark
from tidemark.controller.navigation import at_or_after_head, head_cut
from tidemark.pipelines.reading.streams import check_streams
from tidemark.pipelines.reading.time_service import cut_to_json, found_to_json, watermark_to_json
from tidemark.service.state import TimeService


def streams_param(values: Sequence[str]) -> list[str]:
    """The ``stream`` parameters (repeated) as distinct names, else a clear refusal."""
    return check_streams(list(values))


def joint_start(service: TimeService, streams: Sequence[str], t: int) -> dict[str, Any]:
    """Where to start each stream so that no event with time >= ``t`` is skipped."""
    answers = {}
    for stream in streams:
        found = service.start_lookup(stream, t)
        meta = service.metadata(stream)
        cut = head_cut(meta) if found is None else at_or_after_head(found.stream_cut, meta)
        answers[stream] = {"found": found_to_json(found), "stream_cut": cut_to_json(cut)}
    return {"timestamp": t, "streams": answers}


def joint_stop(service: TimeService, streams: Sequence[str], t: int) -> dict[str, Any]:
    """Where to stop each stream to have every event with time <= ``t``: the cuts only
    once every stream is complete (``complete``), ``incomplete`` naming the others."""
    found = {s: service.stop_lookup(s, t) for s in streams}
    incomplete = [s for s, f in found.items() if f is None]
    answers = {
        s: {
            "found": found_to_json(f),
            "stream_cut": None if f is None or incomplete else cut_to_json(f.stream_cut),
        }
        for s, f in found.items()
    }
    return {
        "timestamp": t,
        "complete": not incomplete,
        "incomplete": incomplete,
        "streams": answers,
    }


async def joint_wait(
    service: TimeService, streams: Sequence[str], t: int, timeout_ms: int
) -> dict[str, Any]:
    """Answers once every stream has a watermark with ``time >= t``, else after
    ``timeout_ms`` naming the streams behind and the writers holding them back."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    while True:
        changed = {s: service.waits.event(s) for s in streams}  # first: no change missed
        reached = {s: service.reached(s, t) for s in streams}
        behind = [s for s, (found, _) in reached.items() if found is None]
        remaining = deadline - loop.time()
        if not behind or remaining <= 0 or service.waits.closing:
            break
        with contextlib.suppress(TimeoutError):  # every stream must pass: wait on one behind
            await asyncio.wait_for(changed[behind[0]].wait(), remaining)
    answers = {}
    for stream, (found, latest) in reached.items():
        if isinstance(found, int):  # older than the kept history: read Delta, off the loop
            found = await run_in_threadpool(service.first_from_delta, stream, t)
        answers[stream] = _reached_json(found, latest)
    holding: dict[str, list[dict[str, Any]]] = {}
    for stream in behind:
        holding[stream] = (await run_in_threadpool(service.laggards, stream)).get(stream, [])
    return {"timestamp": t, "reached": not behind, "behind": holding, "streams": answers}


def _reached_json(found: Watermark | None, latest: Watermark | None) -> dict[str, Any]:
    return {
        "reached": found is not None,
        "watermark": watermark_to_json(found),
        "latest": watermark_to_json(latest),
    }


__all__ = ["joint_start", "joint_stop", "joint_wait", "streams_param"]
