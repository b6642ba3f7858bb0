"""A writer's view of its stream's metadata, and what a scale cuts off its segments.

    view = StreamView(store, store.get_stream("shop/orders"), on_change=wake_writer)
    view.watch()                          # the store's watch offers each change
    if view.latest is not view.applied:   # the writer's check before a write
        sealed = sealed_by(epoch, view.latest)
        latest = view.await_sealed_sizes(sealed, timeout_s=30)
        ...                               # cut off, replay or report
        view.applied = latest

Every writer (``EventWriter``, ``TransactionalWriter``, ``TidemarkProducer``)
follows its stream the same way: the store's watch hands over the newest
metadata (``latest``), which the writer applies (``applied``) at its next
write, under its own lock, after waiting for what it had in flight. When a
scale seals a segment the writer wrote to, the seal's recorded size says
where the segment's content ends (``tidemark.controller.streams``): records the
writer had acknowledged at or beyond it are not in the stream and are sent
again (``EventWriter``) or reported failed (``TidemarkProducer``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.model import Epoch
from tidemark.controller.states import WRITABLE
from tidemark.controller.store import MetadataStore
from tidemark.pipelines.writing.exceptions import WriterTimeoutError

_POLL_S = 0.05


class StreamView:
    """The metadata a writer routes by (``applied``) and the newest it has seen (``latest``).

    ``on_change`` is called (on the store's thread) when ``latest`` changes:
    a writer whose hot path does not look may wake up there. Plain attributes:
    writers compare ``latest is not applied`` on every write.
    """

    def __init__(
        self,
        store: MetadataStore,
        metadata: StreamMetadata,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.name = metadata.name
        self.store = store
        self.applied = metadata
        self.latest = metadata
        self._on_change = on_change

    def watch(self) -> None:
        """Follow the stream's changes from the store's watch."""
        self.store.watch_stream(self.name, self.offer)

    def offer(self, metadata: StreamMetadata) -> None:
        """Take ``metadata`` as the newest unless it is what is known already (a watch's
        first call repeats it) or older (fewer epochs: a watch may deliver a change after
        a direct read gave a newer one). Only hands the value over; writers apply it."""
        latest = self.latest
        if metadata == latest or len(metadata.epochs) < len(latest.epochs):
            return
        self.latest = metadata
        if self._on_change is not None:
            self._on_change()

    def read_now(self) -> StreamMetadata:
        """Read the metadata from the store, not waiting for the watch (a scale whose new
        epoch is written may not have reached the watch yet); the newest known."""
        self.offer(self.store.get_stream(self.name))
        return self.latest

    def await_sealed_sizes(self, seg_ids: Sequence[int], timeout_s: float) -> StreamMetadata:
        """The newest metadata once it records the sealed sizes of ``seg_ids`` (read from
        the store: the watch may lag behind)."""
        deadline = time.monotonic() + timeout_s
        while True:
            latest = self.latest
            if all(s in latest.sealed_sizes for s in seg_ids):
                return latest
            if time.monotonic() > deadline:
                raise WriterTimeoutError(
                    f"stream {self.name}: segments {list(seg_ids)} left the current epoch but "
                    "their sealed sizes were not recorded in time (is the scale still running?)"
                )
            time.sleep(_POLL_S)
            self.read_now()


def sealed_by(epoch: Epoch, latest: StreamMetadata) -> list[int]:
    """Segments of ``epoch`` (the one a writer routes by) no writer may write again in
    ``latest``: those outside its current epoch, or all of them once the stream is sealed."""
    if latest.state not in WRITABLE:
        return [s.id for s in epoch.segments]
    current = {s.id for s in latest.current_epoch().segments}
    return [s.id for s in epoch.segments if s.id not in current]


__all__ = ["StreamView", "sealed_by"]
