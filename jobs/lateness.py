"""The controller job's side of laggards: what to record after a stream's cycle.

    found = laggards_of("shop/orders", state, now_ms)          # from the workflow's state
    rows = laggard_update("shop/orders", found, recorded, now_ms)  # None: nothing changed

The decision is :func:`tidemark.controller.laggards.laggards` (pure); this adds the
workflow's :class:`~tidemark.jobs.workflow.StreamState` and the rule "append a
snapshot to the ``laggards`` table only when it differs from the last one
recorded" (a ``clear`` row when the last laggard is gone).

In the job: the workflow keeps the last recorded snapshot per stream in its
state (``StreamState.laggards``) and, after each cycle, outputs
:class:`~tidemark.jobs.workflow.LaggardRows` when :func:`laggard_update` gives rows;
the processor emits them as ``laggard`` rows and the sink appends them to
``tidemark.schemas.tables.LAGGARDS`` in the batch's idempotent transaction, like the
other tables; ``tidemark controller status`` shows each stream's last
snapshot. Marks refused as stale are in ``rejected_marks`` (reason
``stale_time``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidemark.controller.laggards import Laggard, changed, laggards
from tidemark.schemas.tables import laggard_rows

if TYPE_CHECKING:  # tidemark.jobs.workflow imports this module
    from tidemark.jobs.workflow import StreamState


def laggards_of(
    stream: str, state: StreamState, now_ms: int, threshold_ms: int = 0
) -> list[Laggard]:
    """The writers holding ``stream`` back, from the workflow's state after a cycle
    (``threshold_ms``: see :func:`tidemark.controller.laggards.laggards`), each with who it is."""
    marks = {writer: stored.mark for writer, stored in state.marks.items()}
    seen = {writer: stored.seen for writer, stored in state.marks.items()}
    return laggards(stream, marks, state.generation, now_ms, threshold_ms, seen)


def laggard_update(
    stream: str, found: Sequence[Laggard], recorded: Sequence[Laggard] | None, now_ms: int
) -> list[dict[str, Any]] | None:
    """Rows for the ``laggards`` table when ``found`` differs from the last snapshot
    ``recorded`` (``None``: none recorded yet, and an empty one needs no row)."""
    if recorded is None and not found:
        return None
    if recorded is not None and not changed(recorded, found):
        return None
    return laggard_rows(stream, now_ms, found)


__all__ = ["laggard_update", "laggards_of"]
