"""The JVM interceptor's rules against tidemark's Python writers, with no service running.

A small harness (``tests/unit/jvm/RulesHarness.java``, compiled against the
interceptor's jar) drives the interceptor's own classes: its timestamp rules
give exactly what ``SegmentClock`` (every Python writer's) gives, for random
policies and records; its marks are the bytes of ``schemas/README.md``'s
example and of ``tidemark.schemas``; its positions cover exactly the records
sent before a note; its registrations land under the znode the controller reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.jvm_clients import compile_java, run_java_lines
from tidemark.controller.config import TimestampingMode
from tidemark.controller.naming import bucket_of, writer_node_name
from tidemark.infra.ports import free_port
from tidemark.pipelines.writing.exceptions import MissingTimestampError, TimestampAdjustmentError
from tidemark.pipelines.writing.timestamping import SegmentClock, TimestampPolicy
from tidemark.schemas.records import WriterMarkRecord

HARNESS = Path(__file__).resolve().parent / "jvm" / "RulesHarness.java"
MAIN = "dev.tidemark.kafka.RulesHarness"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_java(tmp_path_factory.mktemp("harness"), HARNESS.read_text())


def test_a_mark_is_the_documents_example(harness: Path) -> None:
    # schemas/README.md, section 3: the v2 example, byte for byte
    (got,) = run_java_lines(
        harness, MAIN, ["encode shop/orders w1 1000 true 9f2c 1200 0:5 4294967297:3"]
    )
    example = (
        "c301066b40372471b44f 16 73686f702f6f7264657273 04 7731 d00f"
        " 04 000a 828080802006 00 01 00 02 0839663263 02e012"
    )
    assert got == example.replace(" ", "")


marks = st.tuples(
    st.text("abc/xyz-é", min_size=1, max_size=12).filter(str.strip),
    st.text("wxyz0123", min_size=1, max_size=8),
    st.integers(0, 2**62),
    st.dictionaries(st.integers(0, 2**40), st.integers(0, 2**40), max_size=4),
    st.booleans(),
    st.none() | st.text("0123456789abcdef", min_size=1, max_size=32),
    st.none() | st.integers(-(2**62), 2**62),
)


@settings(max_examples=8, deadline=None)
@given(st.lists(marks, min_size=1, max_size=12))
def test_marks_are_the_bytes_tidemark_schemas_writes(harness: Path, cases) -> None:
    lines = []
    for stream, writer, time, position, alive, instance, top in cases:
        cells = "".join(f" {s}:{o}" for s, o in sorted(position.items()))
        lines.append(
            f"encode {stream} {writer} {time} {str(alive).lower()} {instance or '-'} "
            f"{'-' if top is None else top}{cells}"
        )
        lines.append(f"bucket {stream} 8")
    got = run_java_lines(harness, MAIN, lines)
    for i, (stream, writer, time, position, alive, instance, top) in enumerate(cases):
        record = WriterMarkRecord(stream, writer, time, position, alive, None, instance, top)
        assert bytes.fromhex(got[2 * i]) == record.encode()
        assert int(got[2 * i + 1]) == bucket_of(stream, 8)


scenarios = st.tuples(
    st.sampled_from(list(TimestampingMode)),
    st.booleans(),
    st.booleans(),
    st.lists(
        st.tuples(st.integers(0, 2), st.none() | st.integers(0, 200), st.integers(50, 150)),
        min_size=1,
        max_size=30,
    ),
)


@settings(max_examples=8, deadline=None)
@given(st.lists(scenarios, min_size=1, max_size=10))
def test_timestamps_are_stamped_as_the_python_writers_stamp_them(harness: Path, cases) -> None:
    lines, expected = [], []
    for mode, uncapped, refuse, sent in cases:
        clock = SegmentClock(TimestampPolicy(mode, uncapped, refuse, "s/x"))
        lines.append(f"policy {mode.value} {str(uncapped).lower()} {str(refuse).lower()}")
        for partition, ts, arrival in sent:
            lines.append(f"stamp {partition} {'-' if ts is None else ts} {arrival}")
            try:
                stored = clock.peek(partition, ts, arrival)
                clock.advance(partition, stored)
                expected.append(str(stored))
            except (MissingTimestampError, TimestampAdjustmentError):
                expected.append("refused")
        lines.append("highest")
        highest = clock.highest()
        expected.append("null" if highest is None else str(highest))
    assert run_java_lines(harness, MAIN, lines) == expected


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=20))
@settings(max_examples=10, deadline=None)
def test_registrations_are_under_the_writer_ids_node_the_controller_reads(
    harness: Path, writer_ids: list[str]
) -> None:
    ids = [*writer_ids, ".", "..", "a/b", "job 3"]
    lines = [f"node {w.encode().hex()}" for w in ids]
    assert run_java_lines(harness, MAIN, lines) == [writer_node_name(w) for w in ids]


def test_a_note_covers_exactly_the_records_sent_before_it(harness: Path) -> None:
    got = run_java_lines(
        harness,
        MAIN,
        [
            "sent 0",
            "sent 0",
            "sent 1",
            "note 100",  # waits for two acks on 0, one on 1
            "sent 0",  # after the note: not in its position
            "ack 0 10 ok",
            "ack 1 4 ok",
            "ready",  # one of 0's two still missing
            "ack 0 11 ok",
            "ack 0 12 ok",
            "ready",  # 0's third ack came after: not counted
            "note 200",
            "ready",  # nothing in flight: at once
            "sent 2",
            "note 300",
            "ack 2 -1 fail",
            "ready",  # a record not stored fails it
            "sent 2",
            "note 400",
            "ack 2 7 ok",
            "ready",  # the next note is published again
        ],
    )
    assert got == [
        "",
        "100 0:12 1:5;",
        "200 0:13 1:5;",
        "300 failed 0:13 1:5;",
        "400 0:13 1:5 2:8;",
    ]


def test_bad_settings_are_refused_naming_the_setting(harness: Path) -> None:
    base = "configure client.id=w1 key.serializer=x"
    got = run_java_lines(
        harness,
        MAIN,
        [
            f"{base}",
            f"{base} tidemark.stream=orders",
            f"{base} tidemark.stream=s/x tidemark.strem=s/y",
            f"{base} tidemark.stream=s/x tidemark.note.interval.ms=soon",
            f"{base} tidemark.stream=s/x tidemark.bucket.count=0",
            f"{base} tidemark.stream=s/x partitioner.class=MyPartitioner",
            f"{base} tidemark.stream=s/x transactional.id=t1",
            f"{base} tidemark.stream=s/x tidemark.create.marks.topic=yes",
        ],
    )
    assert got[0].startswith("Invalid value null for configuration tidemark.stream: required")
    assert "tidemark.stream" in got[1] and "scope/name" in got[1]
    assert "tidemark.strem" in got[2] and "not a tidemark setting; valid:" in got[2]
    assert "tidemark.note.interval.ms" in got[3] and "integer >= 1" in got[3]
    assert "tidemark.bucket.count" in got[4] and "integer >= 1" in got[4]
    assert "partitioner.class" in got[5] and "leave partitioner.class unset" in got[5]
    assert "transactional.id" in got[6] and "TransactionalWriter" in got[6]
    assert "tidemark.create.marks.topic" in got[7] and "true or false" in got[7]


def test_zookeeper_credentials_come_from_the_setting_else_the_variable(harness: Path) -> None:
    """``tidemark.zookeeper.auth`` first, then ``$TIDEMARK_ZK_AUTH`` (as the Python side
    reads it); a malformed value is refused by the name of where it came from, unquoted."""
    got = run_java_lines(
        harness,
        MAIN,
        [
            "zkauth alice:a-pw bob:b-pw",
            "zkauth - bob:b:pw",
            "zkauth - -",
            "zkauth alice-pw -",
            "zkauth - :bob-pw",
            "zkauth - bob:",
        ],
    )
    assert got[:3] == ["user alice", "user bob", "anonymous"]
    must_be = "must be user:password (ZooKeeper's digest scheme); its value is not shown"
    assert got[3] == f"tidemark.zookeeper.auth {must_be}"
    assert got[4:] == [f"$TIDEMARK_ZK_AUTH {must_be}"] * 2


def test_the_shaded_zookeeper_client_runs_and_names_a_silent_zookeeper(harness: Path) -> None:
    port = free_port()  # nothing listens there
    (got,) = run_java_lines(harness, MAIN, [f"zookeeper 127.0.0.1:{port}"])
    assert got == (
        f"Invalid value 127.0.0.1:{port} for configuration tidemark.zookeeper.connect: "
        "no ZooKeeper answered within 1000 ms"
    )


@st.composite
def deliveries(draw: st.DrawFn) -> list[str]:
    """Sends, acknowledgements (in send order per partition, some failed) and notes, mixed."""
    sent = [0, 0, 0]
    acked = [0, 0, 0]
    offsets = [0, 0, 0]
    steps: list[str] = []
    for _ in range(draw(st.integers(1, 40))):
        p = draw(st.integers(0, 2))
        kind = draw(st.sampled_from(["sent", "sent", "ack", "ack", "note"]))
        if kind == "sent":
            sent[p] += 1
            steps.append(f"sent {p}")
        elif kind == "ack" and acked[p] < sent[p]:
            acked[p] += 1
            if draw(st.integers(0, 9)) == 0:
                steps.append(f"ack {p} -1 fail")
            else:
                offsets[p] += draw(st.integers(1, 3))  # another producer may write between
                steps.append(f"ack {p} {offsets[p]} ok")
        elif kind == "note":
            steps.append(f"note {len(steps)}")
    steps.extend(
        f"ack {p} {offsets[p] + 1 + i} ok" for p in range(3) for i in range(sent[p] - acked[p])
    )
    return steps


def expected_notes(steps: list[str]) -> str:
    """The model: a note needs the acknowledgements of the records sent before it, takes
    each partition's highest stored offset + 1 among them, fails on a failed one of its own
    records (sent after the previous note); published in order once complete."""
    sent = [0, 0, 0]
    acks: list[list[tuple[int, bool]]] = [[], [], []]
    notes = []
    for step in steps:
        w = step.split()
        if w[0] == "sent":
            sent[int(w[1])] += 1
        elif w[0] == "ack":
            acks[int(w[1])].append((int(w[2]), w[3] == "ok"))
        else:
            notes.append((int(w[1]), list(sent)))
    out = ""
    previous = [0, 0, 0]
    for time_, need in notes:
        failed = any(not ok for p in range(3) for _, ok in acks[p][previous[p] : need[p]])
        cells = ""
        for p in range(3):
            stored = [off for off, ok in acks[p][: need[p]] if ok]
            if stored:
                cells += f" {p}:{max(stored) + 1}"
        out += f"{time_}{' failed' if failed else ''}{cells};"
        previous = need
    return out


@settings(max_examples=10, deadline=None)
@given(st.lists(deliveries(), min_size=1, max_size=8))
def test_notes_cover_exactly_what_was_acknowledged_before_them(harness: Path, runs) -> None:
    for steps in runs:  # one harness run per case: each starts from empty positions
        got = run_java_lines(harness, MAIN, [*steps, "ready"])
        assert got == [expected_notes(steps)], steps
