"""What a writer keeps of its recent records, to re-send those a seal cut off; pure.

    >>> buf = ReplayBuffer(window_ms=1_000)
    >>> buf.sent(7, b"k", b"v1", 100, now_ms=0); buf.sent(7, b"k", b"v2", 101, now_ms=0)
    >>> buf.acked(7, 40); buf.acked(7, 41)
    >>> [r.value for r in buf.cut_off(7, sealed_size=41)]
    [b'v2']

Kafka cannot seal a partition: a scale records each sealed segment's size
(its end offset) a short drain time after the new epoch appears, and readers
never read past it (``controller.streams``). A writer that learned of the
epoch late may have had records acknowledged at or beyond that size; it
re-sends them, in order, to the successors. For that it keeps every record
sent in the last ``window_ms`` (and every one not yet acknowledged), with
its offset once acknowledged. A record that fell out of the window but is
beyond a sealed size is reported by :meth:`ReplayBuffer.lost`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Retained:
    """A record sent to a segment and stored at ``offset``."""

    key: bytes | None
    value: bytes
    timestamp: int
    offset: int


class ReplayBuffer:
    """Per segment: the records sent (key, value, timestamp, sent_ms), oldest first, and
    the offsets of the acknowledged ones -- a prefix of them, Kafka reporting in order."""

    def __init__(self, window_ms: int) -> None:
        self.window_ms = window_ms
        self._records: dict[int, deque[tuple[bytes | None, bytes, int, int]]] = {}
        self._offsets: dict[int, deque[int]] = {}
        self._dropped_max: dict[int, int] = {}
        """segment -> the highest offset of a record no longer retained."""

    def sent(
        self, segment: int, key: bytes | None, value: bytes, timestamp: int, now_ms: int
    ) -> None:
        records = self._records.get(segment)
        if records is None:
            records = self._records[segment] = deque()
            self._offsets[segment] = deque()
        records.append((key, value, timestamp, now_ms))
        offsets = self._offsets[segment]
        if offsets and records[0][3] < now_ms - self.window_ms:
            # Forget acknowledged records older than the window.
            horizon = now_ms - self.window_ms
            dropped = self._dropped_max.get(segment, -1)
            while offsets and records[0][3] < horizon:
                records.popleft()
                off = offsets.popleft()
                if off > dropped:
                    dropped = off
            self._dropped_max[segment] = dropped

    def acked(self, segment: int, offset: int) -> None:
        """The oldest unacknowledged record of ``segment`` was stored at ``offset``."""
        offsets = self._offsets.get(segment)
        if offsets is not None:
            offsets.append(offset)

    def failed(self, segment: int) -> None:
        self.acked(segment, -1)

    def cut_off(self, segment: int, sealed_size: int) -> list[Retained]:
        """Retained records of ``segment`` stored at or beyond ``sealed_size``, in order."""
        records = self._records.get(segment, deque())
        offsets = self._offsets.get(segment, deque())
        return [
            Retained(rec[0], rec[1], rec[2], off)
            for rec, off in zip(records, offsets, strict=False)
            if off >= sealed_size
        ]

    def lost(self, segment: int, sealed_size: int) -> bool:
        """True when a record beyond ``sealed_size`` was already forgotten."""
        return self._dropped_max.get(segment, -1) >= sealed_size

    def forget(self, segment: int) -> None:
        self._records.pop(segment, None)
        self._offsets.pop(segment, None)
        self._dropped_max.pop(segment, None)

    def segments(self) -> list[int]:
        return list(self._records)

    def retained(self, segment: int) -> int:
        return len(self._records.get(segment, ()))


__all__ = ["ReplayBuffer", "Retained"]
