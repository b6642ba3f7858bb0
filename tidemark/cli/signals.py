"""Signals that end a verb's loop normally: each sets an event the loop checks.

    with stopping_on(signal.SIGINT, signal.SIGTERM) as stop:
        observer.run(stop)             # returns once a signal came; the handlers are back

A handler that only sets an event never raises inside a Kafka call or a client's lock,
so whatever the loop holds closes as usual after it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def stopping_on(*signals: int, once: bool = False) -> Iterator[threading.Event]:
    """An event the first of ``signals`` sets; the earlier handlers are put back when the
    block ends. ``once``: that first signal also puts its earlier handler back, so a
    second acts as without this (a second Ctrl-C interrupts at once). From the main
    thread only, as every signal handler."""
    stop = threading.Event()
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        stop.set()
        if once:
            signal.signal(signum, previous[signum])

    for sig in signals:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for sig, earlier in previous.items():
            signal.signal(sig, earlier)


__all__ = ["stopping_on"]
