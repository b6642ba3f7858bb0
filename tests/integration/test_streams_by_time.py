"""Time across two streams on real Kafka, ZooKeeper, Delta (and Spark for window run).

Stream A is written by a writer whose clock is right, stream B by one whose clock
runs 5 s ahead; B is scaled from one segment to two midway. Watermarks come from
``watermark_cycle`` over the writers' own positions (``Marks``, as in
test_reader_group), so no controller job is needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import threading
import time

import pytest

from tests.integration import test_reader_group as rg
from tidemark.cli.main import main
from tidemark.controller.laggards import laggards
from tidemark.controller.model import KeyRange, TimeWindow
from tidemark.pipelines.reading.exceptions import ReaderConfigError, StreamsTimeTimeoutError
from tidemark.pipelines.reading.group import ReaderGroup, open_streams_group
from tidemark.pipelines.reading.lateness import append_laggards
from tidemark.pipelines.reading.merge import merged_reader
from tidemark.pipelines.reading.seek import SeekIndex, complete_cut_at, stream_cut_at
from tidemark.pipelines.reading.stream_time import EXIT_NOT_YET, wait_for_time
from tidemark.pipelines.writing.writer import EventWriter

BASE = rg.BASE
SKEW_MS = 5_000
ROUND_MS = 200
ROUNDS = 40
PER_ROUND = 5
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig


def write_round(marks, writer, rnd, skew, written, tag):
    """``PER_ROUND`` events from ``BASE + rnd * ROUND_MS + skew`` on keys k0..k4, a note at
    the round's end and a watermark cycle; (time, body) pairs go to ``written``."""
    start = BASE + rnd * ROUND_MS + skew
    for j in range(PER_ROUND):
        body = f"{tag}:{rnd}:{j}".encode()
        writer.write(body, routing_key=f"k{j}", timestamp=start + j * 10)
        written.append((start + j * 10, body))
    marks.note(writer, start + ROUND_MS - 1)
    marks.cycle()


@pytest.fixture
def two_streams(manager, store, kafka, wconfig, unique, tmp_path):
    """(root, A, B, written) with A's rounds 0..ROUNDS-1 and B's rounds 0..ROUNDS-1 (B 5 s
    ahead, scaled at round ROUNDS // 2); the writers stay open: (marks, writer) per stream."""
    root = str(tmp_path / "delta")
    a = rg.make_stream(manager, f"{unique}a", segments=2)
    b = rg.make_stream(manager, f"{unique}b", segments=1)
    marks = {a: rg.Marks(a, store, root), b: rg.Marks(b, store, root)}
    written: dict[str, list[tuple[int, bytes]]] = {a: [], b: []}
    with (
        EventWriter("wa", a, store=store, bootstrap_servers=kafka, config=wconfig) as wa,
        EventWriter("wb", b, store=store, bootstrap_servers=kafka, config=wconfig) as wb,
    ):
        for rnd in range(ROUNDS):
            if rnd == ROUNDS // 2:
                wb.flush()
                manager.scale(b, [0], [KeyRange(0.0, 0.5), KeyRange(0.5, 1.0)])
            write_round(marks[a], wa, rnd, 0, written[a], "a")
            write_round(marks[b], wb, rnd, SKEW_MS, written[b], "b")
        yield root, a, b, written, marks, {a: wa, b: wb}


def read_from(stream, cut, store, kafka, root, wanted, deadline_s=60.0):
    """The bodies of ``stream`` read from ``cut`` on (a private group) until every one of
    ``wanted`` came or ``deadline_s`` passed: an idle gap on busy cores is no end."""
    group = ReaderGroup.ephemeral_group(
        stream, cut, store=store, bootstrap_servers=kafka, delta_root=root, config=rg.FAST
    )
    got: set[bytes] = set()
    deadline = time.monotonic() + deadline_s
    with group, group.reader("r") as reader:
        while not wanted <= got and time.monotonic() < deadline:
            event = reader.read_next(timeout_ms=500)
            if event is not None:
                got.add(event.body)
    return got


def test_joint_cuts_miss_nothing_and_complete_only_on_both(two_streams, store, kafka):
    root, a, b, written, _, _ = two_streams
    index = SeekIndex(root)
    assert len(store.get_stream(b).segments()) == 3  # scaled midway
    for t in (BASE + 1_000, BASE + ROUNDS // 2 * ROUND_MS + SKEW_MS + 50, BASE + 7_000):
        cuts = stream_cut_at([a, b], t, store=store, index=index)
        assert list(cuts) == [a, b]
        assert cuts[a] == stream_cut_at(a, t, store=store, index=index)  # each its own
        for stream, cut in cuts.items():
            wanted = {body for ts, body in written[stream] if ts >= t}
            missing = wanted - read_from(stream, cut, store, kafka, root, wanted)
            assert not missing, (stream, t, sorted(missing)[:5])
    # A's watermarks end at BASE + 7999, B's at BASE + 12999: complete on both up to
    # the smaller only.
    last_a = BASE + ROUNDS * ROUND_MS - 1
    ends = complete_cut_at([a, b], last_a, index=index)
    assert ends is not None and set(ends) == {a, b}
    assert ends[b] == complete_cut_at(b, last_a, index=index)
    assert complete_cut_at([a, b], last_a + 1, index=index) is None
    assert complete_cut_at(b, last_a + 1, index=index) is not None
    with pytest.raises(ReaderConfigError, match="repeated"):
        stream_cut_at([a, a], BASE, index=index)
    with pytest.raises(ReaderConfigError, match="at least one"):
        complete_cut_at([], BASE, index=index)


def test_wait_for_both_returns_after_the_slower_and_names_its_laggard(
    two_streams, store, kafka, zookeeper, wconfig, unique, capsys, monkeypatch
):
    root, a, b, written, marks, writers = two_streams
    # the verbs check the streams in this ZooKeeper (the store's chroot)
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", f"{zookeeper}/tidemark-test-{unique}")
    target = BASE + ROUNDS * ROUND_MS + 500  # B is past it already; A is not
    with pytest.raises(StreamsTimeTimeoutError) as err:
        wait_for_time([a, b], target, 0, delta_root=root)
    assert err.value.streams == [a] and err.value.last.time == BASE + ROUNDS * ROUND_MS - 1

    def later():
        time.sleep(1.0)
        for rnd in range(ROUNDS, ROUNDS + 4):
            write_round(marks[a], writers[a], rnd, 0, written[a], "a")

    thread = threading.Thread(target=later)
    started = time.monotonic()
    thread.start()
    got = wait_for_time([a, b], target, 30_000, delta_root=root)
    waited = time.monotonic() - started
    thread.join()
    assert waited >= 0.9  # not before A passed the time
    assert got[a].time >= target and got[b].time >= target

    # A second writer on A falls behind: A is held back, and the timeout names it.
    with EventWriter("slow", a, store=store, bootstrap_servers=kafka, config=wconfig) as slow:
        slow.write(b"s", routing_key="k0", timestamp=target)
        marks[a].note(slow, target + 10)
        write_round(marks[a], writers[a], ROUNDS + 4, 0, written[a], "a")
        write_round(marks[a], writers[a], ROUNDS + 5, 0, written[a], "a")
        found = laggards(a, marks[a].marks, marks[a].state, now_ms=int(time.time() * 1000))
        append_laggards(root, a, int(time.time() * 1000), found)
        late = BASE + (ROUNDS + 6) * ROUND_MS
        with pytest.raises(StreamsTimeTimeoutError) as err:
            wait_for_time([a, b], late, 300, delta_root=root)
        assert err.value.streams == [a]
        assert err.value.holding[0].startswith(f"{a}: slow (lagging")
        code = main(
            ["wait", a, b, "--time", str(late), "--timeout-ms", "200", "--delta-root", root]
        )
        assert code == EXIT_NOT_YET
        assert "slow (lagging" in capsys.readouterr().err
    assert (
        main(["wait", a, b, "--time", str(target), "--delta-root", root, "--format", "json"]) == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["stream"] for r in rows] == [a, b] and all(r["time"] >= target for r in rows)


def test_merged_read_is_in_time_order_and_complete(
    two_streams, store, kafka, zookeeper, unique, monkeypatch, capsys
):
    root, a, b, written, _, _ = two_streams
    since = BASE + 3_000
    with merged_reader(
        [a, b], since, store=store, bootstrap_servers=kafka, delta_root=root, config=rg.FAST
    ) as merged:
        # The batch API (merged.events() is these batches' events, one after another):
        # bodies, times and streams without events, in the events' order.
        got = []
        for batch in merged.batches(idle_ms=1_500):
            events = batch.events
            assert batch.values() == [e.body for e in events]
            assert batch.times() == [e.timestamp for e in events]
            assert batch.streams() == [e.stream for e in events]
            got.extend(events)
        assert merged.late == 0 and merged.held == 0
    times = [e.timestamp for e in got]
    assert times == sorted(times)
    expected = {(s, body) for s in (a, b) for ts, body in written[s] if ts >= since}
    assert {(e.stream, e.body) for e in got} == expected and len(got) == len(expected)

    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", kafka)
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", f"{zookeeper}/tidemark-test-{unique}")
    monkeypatch.setenv("TIDEMARK_DELTA_ROOT", root)
    assert main(["read", a, b, "--timestamp", str(since), "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    assert {(r["stream"], r["body"].encode()) for r in rows} == expected
    assert len(rows) == len(expected)


def test_a_reader_taking_its_segment_after_connecting_fetches_at_once(
    manager, store, kafka, wconfig, unique
):
    """A merge's readers take their segments at their first read, often a while after
    their consumers connected: the reader then asks for its topic's metadata, so the
    fetch starts at once, not at librdkafka's next topic scan (0.75-0.9 s later when
    the partition is assigned 0.05-0.2 s after the consumer was made; half the
    8-stream merges waited so)."""
    stream = rg.make_stream(manager, f"{unique}f", segments=1)
    with EventWriter("wf", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        w.write(b"first", routing_key="k", timestamp=BASE)
    group = ReaderGroup.ephemeral_group(
        stream, None, store=store, bootstrap_servers=kafka, config=rg.FAST
    )
    with group, group.reader("r") as reader:
        time.sleep(0.2)  # the consumer connects and has its first metadata meanwhile
        started = time.monotonic()
        batch = reader.read_batch(timeout_ms=500)
        assert [e.body for e in batch.events] == [b"first"], time.monotonic() - started


def check_joint(joint, windows, marks):
    """The joint window is the streams' (lowest lower, highest upper), never above any."""
    lowers = [w.lower for w in windows.values()]
    assert joint.lower == (None if None in lowers else min(lowers))
    for stream, window in windows.items():
        if joint.lower is not None:
            assert joint.lower <= window.lower <= marks[stream].emitted[-1].time


def test_reader_group_over_both_shares_checkpoints_and_resets(two_streams, store, kafka, unique):
    root, a, b, written, marks, _ = two_streams
    since = BASE + 3_000
    expected = {(s, body) for s in (a, b) for ts, body in written[s] if ts >= since}
    kw = {"store": store, "bootstrap_servers": kafka, "delta_root": root}
    group = ReaderGroup.create(f"g{unique}", streams=[a, b], from_time=since, config=rg.FAST, **kw)
    assert group.streams == [a, b]
    with pytest.raises(ReaderConfigError, match="several streams"):
        ReaderGroup(f"g{unique}", **kw)
    with open_streams_group(f"g{unique}", **kw) as opened:
        assert opened.streams == [a, b] and opened.stream_cuts() == group.stream_cuts()
    with group:
        readers = {"r1": group.reader("r1"), "r2": group.reader("r2")}
        got: list[tuple[str, str, int, bytes]] = []
        after: set[tuple[str, bytes]] = set()
        places: dict[str, int] = {}  # reader -> how many events it returned before c1
        pending = checkpoint = None
        idle = turns = 0
        while idle < 30:
            turns += 1
            idle += 1
            for name, reader in readers.items():
                event = reader.read_next(50)
                if event is not None and event.is_checkpoint:
                    idle = 0
                    places[name] = len([g for g in got if g[0] == name])
                elif event is not None:
                    idle = 0
                    got.append((name, event.stream, event.timestamp, event.body))
                    if checkpoint is not None:
                        after.add((event.stream, event.body))
            if pending is None and len(got) >= len(expected) // 2:
                pending = group.initiate_checkpoint("c1", timeout_ms=20_000)
            elif pending is not None and checkpoint is None and pending.done():
                checkpoint = pending.result()
            if turns % 10 == 0:
                check_joint(group.current_time_window(), group.time_windows(), marks)
                for reader in readers.values():
                    check_joint(reader.current_time_window(), reader.time_windows(), marks)
        for reader in readers.values():
            reader.close()
        read = [(s, body) for _, s, ts, body in got if ts >= since]
        assert set(read) == expected and len(read) == len(expected)  # none lost, none twice
        assert {s for _, s, _, _ in got} == {a, b}
        assert {name for name, _, _, _ in got} == {"r1", "r2"}  # segments shared
        assert checkpoint is not None and after
        assert set(checkpoint.stream_cuts) == {a, b}
        # each reader returned c1's place once every stream had reached it; what the
        # readers returned before their places is exactly what the cuts hold
        assert set(places) == {"r1", "r2"}
        before = sum(places.values())
        start = sum(len([1 for ts, _ in written[s] if ts < since]) for s in (a, b))
        assert before == sum(sum(c.values()) for c in checkpoint.stream_cuts.values()) - start
        check_joint(
            checkpoint.window,
            {s: TimeWindow(c.lower, c.upper) for s, c in checkpoint.checkpoints.items()},
            marks,
        )
        assert [c.name for c in group.checkpoints()] == ["c1"]
        assert group.reset_to("c1") == checkpoint.stream_cuts
        with group.reader("again") as reader:
            again = {(e.stream, e.body) for e in rg.read_all(reader, idle_ms=1_000)}
        assert after <= again  # everything after the checkpoint is read again
        group.delete()


def test_a_reader_holds_still_on_every_stream_until_the_checkpoint_is_taken(
    two_streams, store, kafka, unique
):
    """Over two streams, a reader that has returned the checkpoint's place returns
    nothing more, of either stream, until every stream's checkpoint is taken (B's is held
    up here by a reader of B alone that does not read yet), though A's is taken: once a
    stream's checkpoint is taken early, its events must not overtake the other stream's
    place, so what a reader returns before its place is exactly what the cuts hold."""
    root, a, b, _, _, writers = two_streams
    kw = {"store": store, "bootstrap_servers": kafka, "delta_root": root}
    group = ReaderGroup.create(f"h{unique}", streams=[a, b], config=rg.FAST, **kw)
    member_a = group.members[a]
    with group, group.reader("r") as reader, group.members[b].reader("slow") as slow:
        slow.read_next(100)  # online: B's checkpoint waits for it
        pending = group.initiate_checkpoint("c1", timeout_ms=60_000)
        deadline = time.monotonic() + 30
        from_a = 0
        while (event := reader.read_next(50)) is None or not event.is_checkpoint:
            assert time.monotonic() < deadline, "the reader never reached the checkpoint"
            from_a += event is not None and event.stream == a
        while "c1" not in member_a.registry.checkpoint_names(member_a.name):
            assert time.monotonic() < deadline, "stream A's checkpoint was not taken"
            time.sleep(0.05)
        cut_a = member_a.checkpoint("c1").stream_cut
        assert from_a == sum(cut_a.values())
        writers[a].write(b"a:after", routing_key="k0", timestamp=BASE + 2 * SKEW_MS)
        writers[a].flush()
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            assert reader.read_next(50) is None  # holding still while B's is being taken
        while (event := slow.read_next(100)) is None or not event.is_checkpoint:
            assert time.monotonic() < deadline + 30, "the reader of B alone never acknowledged"
        checkpoint = pending.result(timeout_ms=30_000)
        assert checkpoint.stream_cuts[a] == dict(cut_a)
        after = []
        while (event := reader.read_next(2_000)) is not None:
            after.append(event.body)
        assert b"a:after" in after


def test_reader_group_over_both_holds_back_the_stream_ahead(two_streams, store, kafka, unique):
    root, a, b, written, _, _ = two_streams
    since = BASE + 3_000
    config = dataclasses.replace(rg.FAST, max_drift_ms=1_000)
    group = ReaderGroup.create(
        f"d{unique}",
        streams=[a, b],
        from_time=since,
        config=config,
        store=store,
        bootstrap_servers=kafka,
        delta_root=root,
    )
    got = []
    with group, group.reader("r") as reader:
        # ~2 ms an event, so that pausing (decided every 50 ms) is not outrun by a
        # reader that would take all of B's 200 events between two ticks
        while (event := reader.read_next(1_500 if got else 5_000)) is not None:
            got.append(event)
            time.sleep(0.002)
    by_stream = {s: {e.body for e in got if e.stream == s} for s in (a, b)}
    assert {body for ts, body in written[a] if ts >= since} <= by_stream[a]
    # B runs 5 s ahead: its segments pause 1 s past A's last watermark (BASE + 7999),
    # give or take what one tick reads; B's last 10 rounds stay unread
    assert {body for ts, body in written[b] if ts >= BASE + 11_000}.isdisjoint(by_stream[b])
    assert max(e.timestamp for e in got if e.stream == b) > BASE + 7_999  # B did move


@pytest.mark.spark
@pytest.mark.slow
def test_window_run_over_both_runs_once_after_both_are_complete(
    two_streams, spark, store, kafka, zookeeper, unique, tmp_path
):
    from deltalake import DeltaTable

    from tidemark.jobs.complete_window import run_from_args
    from tidemark.jobs.window_args import add_window_arguments

    root, a, b, written, _, _ = two_streams
    parser = argparse.ArgumentParser()
    add_window_arguments(parser)
    common = ["--delta-root", root, "--bootstrap", kafka, "--zk"]
    common += [f"{zookeeper}/tidemark-test-{unique}", "--zk-root", "/tidemark"]
    out = str(tmp_path / "joined")
    query = (
        "SELECT stream AS source, count(*) AS n, min(ts) AS lo FROM window_events GROUP BY stream"
    )

    def run(start, end, *more):
        argv = [a, b, "--from", str(start), "--to", str(end), "--output", out, *more]
        return run_from_args(parser.parse_args([*argv, *common]), spark=spark)

    # B is complete to BASE + 12999, A only to BASE + 7999: a window past A's time waits.
    assert run(BASE + 7_000, BASE + 9_000) == EXIT_NOT_YET
    assert not (tmp_path / "joined").exists()
    start, end = BASE + 5_000, BASE + 8_000
    assert run(start, end, "--sql", query) == 0
    rows = DeltaTable(out).to_pyarrow_table().to_pylist()
    got = {r["source"]: (r["n"], r["lo"], r["stream"], r["window_start"]) for r in rows}
    for s in (a, b):
        inside = [ts for ts, _ in written[s] if start <= ts < end]
        assert got[s] == (len(inside), min(inside), f"{a}+{b}", start)
    assert run(start, end, "--sql", query) == 0  # again: the same one result
    assert len(DeltaTable(out).to_pyarrow_table().to_pylist()) == 2
