"""The nemesis's checker: pure functions from a ``History`` to the violations found.

Each invariant is one function returning ``Violation``s that name the events concerned,
so a failing run says what broke, not only that something did. Nothing here touches a
service: the unit tests feed it hand-made histories (tests/unit/test_nemesis_checker.py).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tests.deploy.nemesis.history import EventId, History, Read, Reset

SHOWN = 10  # events named in one violation; the count says how many there were


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


def _named(items: Iterable[object]) -> str:
    listed = sorted(items, key=repr)
    more = f" (+{len(listed) - SHOWN} more)" if len(listed) > SHOWN else ""
    return ", ".join(map(str, listed[:SHOWN])) + more


def acknowledged_not_lost(h: History) -> list[Violation]:
    """Every committed event is in Kafka; no aborted one is visible; none twice."""
    stored = Counter(s.id for s in h.stored)
    found: list[Violation] = []
    lost = [w.id for w in h.written if w.committed and w.id not in stored]
    if lost:
        found.append(Violation("acknowledged event lost", f"{len(lost)}: {_named(lost)}"))
    aborted = [w.id for w in h.written if not w.committed and w.id in stored]
    if aborted:
        found.append(Violation("aborted event visible", f"{len(aborted)}: {_named(aborted)}"))
    twice = [i for i, n in stored.items() if n > 1]
    if twice:
        found.append(Violation("event stored twice", f"{len(twice)}: {_named(twice)}"))
    return found


def watermark_sequence(h: History) -> list[Violation]:
    """``seq`` 0..n-1 with no gap or duplicate; times and cuts never go backwards."""
    marks = sorted((o.watermark for o in h.observed), key=lambda m: m.seq)
    found: list[Violation] = []
    seqs = [m.seq for m in marks]
    if seqs != list(range(len(seqs))):
        dup = [s for s, n in Counter(seqs).items() if n > 1]
        gaps = sorted(set(range(max(seqs, default=-1) + 1)) - set(seqs))
        found.append(Violation("seq gap or duplicate", f"gaps {gaps[:SHOWN]}, twice {dup}"))
    for prev, new in itertools.pairwise(marks):
        if new.time < prev.time:
            found.append(Violation("time backwards", f"seq {prev.seq} -> {new.seq}"))
        back = {
            s: (o, new.stream_cut[s])
            for s, o in prev.stream_cut.items()
            if s in new.stream_cut and new.stream_cut[s] < o
        }
        if back:
            found.append(Violation("cut backwards", f"seq {prev.seq} -> {new.seq}: {back}"))
    return found


def cuts_cover_noted_events(h: History) -> list[Violation]:
    """A watermark at T lies past every event with time <= T that its writer had
    acknowledged before a note of a time >= T, the note returning before a read
    began that did not hold the watermark yet (so before the watermark was made:
    a watermark is seen some time after it is made); and no cut lies past the end
    of a segment's data.

    The first holds for writers in the watermark's writer set: a watermark seen before
    every writer had noted a time is not held to it, nor would one computed while a
    writer had timed out be (the run's faults stay well under the writer timeout)."""
    where = {s.id: s for s in h.stored}
    by_writer: dict[str, list[tuple[int, int, EventId]]] = {}
    for w in h.written:
        if w.committed:
            by_writer.setdefault(w.writer, []).append((w.at, w.time, w.id))
    first_notes: dict[str, int] = {}
    for n in h.noted:
        first_notes[n.writer] = min(n.at, first_notes.get(n.writer, n.at))
    all_noted = max(first_notes.values(), default=0)
    found: list[Violation] = []
    for o in h.observed:
        mark = o.watermark
        past = {
            s: (c, h.ends[s]) for s, c in mark.stream_cut.items() if s in h.ends and c > h.ends[s]
        }
        if past:
            found.append(Violation("cut past committed data", f"seq {mark.seq}: {past}"))
        made_after = o.unseen_at  # notes before it were surely made before the watermark
        if made_after is None or made_after < all_noted:
            continue
        uncovered: list[tuple[EventId, int, int]] = []
        for writer, events in by_writer.items():
            notes = [
                n.at
                for n in h.noted
                if n.writer == writer and n.time >= mark.time and n.at < made_after
            ]
            if not notes:
                continue
            before = min(notes)
            for at, time, event in events:
                pos = where.get(event)
                if at < before and time <= mark.time and pos is not None:
                    cut = mark.stream_cut.get(pos.segment)
                    if cut is not None and pos.offset >= cut:
                        uncovered.append((event, pos.segment, pos.offset))
        if uncovered:
            found.append(
                Violation(
                    "cut misses a noted event",
                    f"seq {mark.seq} time {mark.time} cut {dict(mark.stream_cut)}: "
                    f"{len(uncovered)}: {_named(uncovered)}",
                )
            )
    return found


def group_read_exactly_once(h: History) -> list[Violation]:
    """Across its checkpoints the group handed out each committed event once, no
    aborted one: a reset to a checkpoint's cut takes back the reads at or past it."""
    kept: list[Read] = []
    for entry in sorted(h.reads, key=lambda r: r.at):
        if isinstance(entry, Reset):
            kept = [r for r in kept if r.offset < entry.cut.get(r.segment, r.offset + 1)]
        else:
            kept.append(entry)
    counts = Counter(r.id for r in kept)
    committed = {s.id for s in h.stored}
    aborted = {w.id for w in h.written if not w.committed}
    found: list[Violation] = []
    missing = committed - set(counts)
    if missing:
        found.append(Violation("group missed an event", f"{len(missing)}: {_named(missing)}"))
    twice = [i for i, n in counts.items() if n > 1]
    if twice:
        found.append(Violation("group read an event twice", f"{len(twice)}: {_named(twice)}"))
    bad = [i for i in counts if i in aborted]
    if bad:
        found.append(Violation("group read an aborted event", f"{len(bad)}: {_named(bad)}"))
    return found


INVARIANTS: tuple[Callable[[History], list[Violation]], ...] = (
    acknowledged_not_lost,
    watermark_sequence,
    cuts_cover_noted_events,
    group_read_exactly_once,
)


def check(h: History) -> list[Violation]:
    """Every invariant's violations, in the order above (empty: the run was sound)."""
    return [v for invariant in INVARIANTS for v in invariant(h)]
