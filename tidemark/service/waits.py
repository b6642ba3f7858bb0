"""Waits for stream time: one ``asyncio.Event`` per stream, woken from any thread.

    waits = StreamWaits()
    event = waits.event("shop/orders")   # on the event loop, before looking
    await event.wait()                   # woken by waits.changed("shop/orders")

The service's refresh and tail threads call :meth:`StreamWaits.changed` when a
stream gains watermarks; ``GET .../wait`` handlers sleep on the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class StreamWaits:
    """Per stream, an ``asyncio.Event`` set when the stream gains watermarks.

    :meth:`event` is called on the event loop (binding it); :meth:`changed`
    from any thread. A woken event is replaced, so a waiter takes the event
    *before* it looks at the watermarks and misses no change."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, asyncio.Event] = {}
        self.closing = False
        """Set when the server shuts down: waiters answer at once."""
        self.arrived = threading.Event()
        """Set when a waiter takes an event (the tail thread starts watching)."""

    def event(self, stream: str) -> asyncio.Event:
        self._loop = asyncio.get_running_loop()
        found = self._events.get(stream)
        if found is None:
            found = self._events[stream] = asyncio.Event()
            self.arrived.set()
        return found

    def waited(self) -> list[str]:
        """The streams someone may be waiting on (any thread)."""
        return list(self._events)

    def changed(self, stream: str) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(self._wake, stream)

    def _wake(self, stream: str) -> None:
        found = self._events.pop(stream, None)
        if found is not None:
            found.set()

    def close(self) -> None:
        """Wake every waiter for good (on the event loop, as the server shuts down)."""
        self.closing = True
        for stream in list(self._events):
            self._wake(stream)


__all__ = ["StreamWaits"]
