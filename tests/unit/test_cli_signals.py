"""The CLI's signals that end a loop normally (tidemark.cli.signals)."""

from __future__ import annotations

import os
import signal

import pytest

from tidemark.cli.signals import stopping_on

pytestmark = pytest.mark.unit


def test_a_signal_sets_the_event_and_the_earlier_handler_comes_back():
    heard: list[int] = []
    earlier = signal.signal(signal.SIGUSR1, lambda signum, _frame: heard.append(signum))
    try:
        with stopping_on(signal.SIGUSR1) as stop:
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGUSR1)  # still this block's: sets it again
            assert stop.is_set() and heard == []
        os.kill(os.getpid(), signal.SIGUSR1)
        assert heard == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, earlier)


def test_once_a_second_signal_reaches_the_earlier_handler():
    heard: list[int] = []
    earlier = signal.signal(signal.SIGUSR2, lambda signum, _frame: heard.append(signum))
    try:
        with stopping_on(signal.SIGUSR2, once=True) as stop:
            os.kill(os.getpid(), signal.SIGUSR2)
            assert stop.is_set() and heard == []
            os.kill(os.getpid(), signal.SIGUSR2)
            assert heard == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, earlier)
