"""Reader-group checkpoints: a named, consistent, durable position of the whole group.

    pending = group.initiate_checkpoint("before-migration")   # readers keep calling read_next
    checkpoint = pending.result(timeout_ms=30_000)            # Checkpoint(name, stream_cut, ...)
    group.checkpoints()                                       # every taken checkpoint
    group.reset_to("before-migration")                        # (no reader online)

How one is taken (Pravega's reader groups do the same with a checkpoint
event each reader reads):

1. The initiator records a request (ZooKeeper: an ephemeral node of its
   session, so a dead initiator's request goes away by itself).
2. Each online reader notices it at its next rebalance tick inside
   ``read_next``, commits the position of every event it has returned,
   acknowledges, returns the checkpoint's place (an ``EventRead`` with
   ``is_checkpoint``, as Pravega's), and **holds still**: it returns no event
   and takes or gives up no segment while the request stands.
3. When every online reader has acknowledged (readers that left or whose
   session ended need not), the group's committed position is the cut: every
   event before it was returned by some reader before its acknowledgement,
   none after it was. The cut, the time window at it and the seq of the
   latest watermark it has passed are written in **one** write (atomic),
   the initiator's future is done, then the request is withdrawn and the
   readers carry on. The initiator's
   :class:`PendingCheckpoint` does this by itself on a background thread (a
   caller need not wait), or withdraws the request at its timeout.

A checkpoint is durable where the registry is (ZooKeeper beside a
``ZooKeeperStore``; the process's memory for the in-memory store). A reader
that never calls ``read_next`` holds a checkpoint up until its timeout
(:class:`CheckpointTimeoutError`; nothing is recorded).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.controller.metadata import cut_from_json, cut_to_json, json_bytes, json_from_bytes
from tidemark.controller.model import Segment, TimeWindow
from tidemark.controller.timestamps import wall_clock_ms
from tidemark.pipelines.reading.exceptions import (
    CheckpointExistsError,
    CheckpointInProgressError,
    CheckpointTimeoutError,
)
from tidemark.pipelines.reading.registry import GroupRegistry, check_name
from tidemark.pipelines.reading.view import GroupView
from tidemark.pipelines.reading.windows import WatermarkFeed, reader_position, window_at
from tidemark.retries import RetryPolicy

log = logging.getLogger(__name__)

POLL_S = 0.02
"""How often the initiator looks at the acknowledgements, and a holding reader at the request."""


@dataclass(frozen=True)
class Checkpoint:
    """A taken checkpoint: the group's stream cut, and where its time stood there.

    ``lower``/``upper``: the time window at the cut (``None``: unknown);
    ``watermark_seq``: the seq of the latest watermark the cut has passed
    (``None``: none yet); ``readers``: those that acknowledged.
    """

    name: str
    group: str
    stream: str
    stream_cut: Mapping[int, int]
    taken_at_ms: int
    lower: int | None = None
    upper: int | None = None
    watermark_seq: int | None = None
    readers: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> bytes:
        return json_bytes(
            {
                "name": self.name,
                "group": self.group,
                "stream": self.stream,
                "stream_cut": cut_to_json(self.stream_cut),
                "taken_at_ms": self.taken_at_ms,
                "lower": self.lower,
                "upper": self.upper,
                "watermark_seq": self.watermark_seq,
                "readers": list(self.readers),
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        raw = json_from_bytes(data)
        return cls(
            name=str(raw["name"]),
            group=str(raw["group"]),
            stream=str(raw["stream"]),
            stream_cut=cut_from_json(raw["stream_cut"]),
            taken_at_ms=int(raw["taken_at_ms"]),
            lower=raw.get("lower"),
            upper=raw.get("upper"),
            watermark_seq=raw.get("watermark_seq"),
            readers=tuple(raw.get("readers", ())),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (for the CLI)."""
        return json_from_bytes(self.to_json())


class CheckpointHost(Protocol):
    """What taking a checkpoint needs of a group (``ReaderGroup`` is one)."""

    name: str
    stream: str
    registry: GroupRegistry

    def view(self) -> GroupView: ...
    def segments(self) -> Mapping[int, Segment]: ...
    def watermark_feed(self) -> WatermarkFeed: ...


class PendingCheckpoint:
    """A checkpoint being taken; :meth:`done` moves it on, :meth:`result` waits for it.

    It also moves on by itself, as Pravega's checkpoint future does: a daemon
    thread takes it once every online reader has acknowledged, or withdraws
    the request at the timeout. An initiator that never waits (or the reader
    thread itself, which cannot wait: it must read to acknowledge) does not
    hold the group still for ever.
    """

    DRIVE_S = 0.05
    """How often the background thread looks at the acknowledgements."""

    def __init__(
        self,
        group: CheckpointHost,
        name: str,
        *,
        timeout_ms: int,
        monotonic: Callable[[], float] = time.monotonic,
        keep_request: bool = False,
    ) -> None:
        """``keep_request``: once taken, the request stands (the readers still hold) until
        :meth:`release`, for a checkpoint that is one part of a larger one."""
        self.group = group
        self.name = check_name("checkpoint", name)
        self._monotonic = monotonic
        self._keep_request = keep_request
        self._deadline = monotonic() + timeout_ms / 1000
        self._result: Checkpoint | None = None
        self._error: CheckpointTimeoutError | CheckpointExistsError | None = None
        self._lock = threading.Lock()
        self._over = threading.Event()
        registry = group.registry
        if registry.checkpoint(group.name, name) is not None:
            raise CheckpointExistsError(group.name, name)
        if not registry.request_checkpoint(group.name, name):
            raise CheckpointInProgressError(group.name, registry.checkpoint_request(group.name))
        log.info("reader group %s: checkpoint %s requested", group.name, name)
        threading.Thread(
            target=self._drive, name=f"checkpoint-{group.name}-{name}", daemon=True
        ).start()

    def missing(self) -> list[str]:
        """Online readers that have not acknowledged yet."""
        registry, group = self.group.registry, self.group.name
        acks = registry.checkpoint_acks(group, self.name)
        return [r for r in registry.readers(group) if r not in acks]

    def done(self) -> bool:
        """True once taken; takes it when every online reader has acknowledged.

        :class:`CheckpointTimeoutError` after the timeout (the request is withdrawn)."""
        with self._lock:
            if self._result is not None:
                return True
            if self._error is not None:
                raise self._error
            missing = self.missing()
            if not missing and not self._over.is_set():  # (never taken once cancelled)
                try:
                    self._take()
                except CheckpointExistsError as exc:  # taken meanwhile under this name
                    self._error = exc
                    raise
                finally:
                    self._over.set()
                return True
            if self._monotonic() >= self._deadline:
                self._over.set()
                self._error = CheckpointTimeoutError(self.group.name, self.name, missing)
                self.group.registry.end_checkpoint_request(self.group.name, self.name)
                raise self._error
            return False

    def result(self, timeout_ms: int | None = None) -> Checkpoint:
        """Wait (at most ``timeout_ms`` more, or until the checkpoint's timeout) and return it."""
        until = None if timeout_ms is None else self._monotonic() + timeout_ms / 1000
        while not self.done():
            if until is not None and self._monotonic() >= until:
                raise CheckpointTimeoutError(self.group.name, self.name, self.missing())
            time.sleep(POLL_S)
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        """Withdraw the request (the readers carry on); nothing is recorded."""
        with self._lock:
            if self._result is None:
                self._over.set()
                self.group.registry.end_checkpoint_request(self.group.name, self.name)

    def release(self) -> None:
        """Withdraw a kept request (``keep_request``), taken or not: the readers carry on."""
        with self._lock:
            self._over.set()
            self.group.registry.end_checkpoint_request(self.group.name, self.name)

    def _take(self) -> Checkpoint:
        group, registry = self.group, self.group.registry
        try:
            acks = registry.checkpoint_acks(group.name, self.name)
            view = group.view()
            window, seq = _window_and_seq(group, view)
            checkpoint = Checkpoint(
                name=self.name,
                group=group.name,
                stream=group.stream,
                stream_cut=view.cut,
                taken_at_ms=wall_clock_ms(),
                lower=window.lower,
                upper=window.upper,
                watermark_seq=seq,
                readers=tuple(sorted(acks)),
            )
            if not registry.save_checkpoint(group.name, self.name, checkpoint.to_json()):
                raise CheckpointExistsError(group.name, self.name)
            # Done before the request goes: no reader carries on past the checkpoint
            # while its future still says "not yet".
            self._result = checkpoint
        finally:
            if not (self._keep_request and self._result is not None):
                registry.end_checkpoint_request(group.name, self.name)
        log.info("reader group %s: checkpoint %s at %s", group.name, self.name, checkpoint)
        return checkpoint

    def _drive(self) -> None:
        """The background thread: :meth:`done` until taken, timed out or cancelled. A
        registry error (ZooKeeper away) is tried again; past the deadline the request
        is withdrawn as soon as the registry answers."""
        while not self._over.wait(self.DRIVE_S):
            try:
                self.done()
            except (CheckpointTimeoutError, CheckpointExistsError):
                return
            except Exception as exc:  # the registry may come back before the deadline
                log.debug("reader group %s: checkpoint %s: %s", self.group.name, self.name, exc)
                if self._monotonic() >= self._deadline:
                    self._withdraw_late()
                    return

    def _withdraw_late(self) -> None:
        # No time limit: a standing request holds the group's readers until it is gone.
        until_withdrawn = RetryPolicy(first_delay_s=1.0, max_delay_s=1.0, max_elapsed_s=math.inf)
        until_withdrawn.call(
            self.cancel,
            retry_on=Exception,
            what=f"reader group {self.group.name}: checkpoint {self.name} timed out; withdrawing",
            logger=log,
            level=logging.WARNING,
        )


def _window_and_seq(group: CheckpointHost, view: GroupView) -> tuple[TimeWindow, int | None]:
    segments = group.segments()
    try:
        feed = group.watermark_feed()
        window = window_at(feed, reader_position(view.cut, view.finished, segments), segments)
    except DeltaUnavailableError:
        return TimeWindow(None, None), None
    seq = next((w.seq for w in feed.watermarks if w.time == window.lower), None)
    return window, seq


class CheckpointParticipation:
    """A reader's side: notice a request, commit, acknowledge, hold still until it ends."""

    def __init__(
        self, registry: GroupRegistry, group: str, reader: str, commit: Callable[[], None]
    ) -> None:
        self._registry = registry
        self._group = group
        self._reader = reader
        self._commit = commit
        self._acked: str | None = None
        self.acknowledged: str | None = None
        """A checkpoint acknowledged whose place the reader has not returned yet."""

    def take_acknowledged(self) -> str | None:
        """The acknowledged checkpoint whose place is still to be returned (once)."""
        name, self.acknowledged = self.acknowledged, None
        return name

    def holding(self) -> bool:
        """True while a checkpoint is being taken (after committing and acknowledging it)."""
        request = self._registry.checkpoint_request(self._group)
        if request is None:
            self._acked = None
            return False
        if request != self._acked:
            self._commit()
            self._registry.ack_checkpoint(self._group, request, self._reader)
            self._acked = request
            self.acknowledged = request
            log.info("reader %s: holding for checkpoint %s", self._reader, request)
        return True


def load_checkpoint(registry: GroupRegistry, group: str, name: str) -> Checkpoint | None:
    data = registry.checkpoint(group, name)
    return None if data is None else Checkpoint.from_json(data)


__all__ = [
    "POLL_S",
    "Checkpoint",
    "CheckpointHost",
    "CheckpointParticipation",
    "PendingCheckpoint",
    "load_checkpoint",
]
