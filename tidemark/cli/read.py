"""``tidemark read | watermarks | window | seek``: reading streams by time (S2-like).

    tidemark read shop/orders --ago 1h --count 10 --format json
    tidemark read shop/orders --from 2026-11-27T01:00:00Z --until 2026-11-27T02:00:00Z
    tidemark read shop/orders --ago 5m --follow      # until Ctrl-C (exit 0)
    tidemark read shop/orders --timestamp 1700000000000
    tidemark read shop/orders shop/payments --ago 10m --format json   # merged by time
    tidemark watermarks shop/orders --since 1700000000000 --format json
    tidemark window billing
    tidemark seek billing --timestamp 1700000000000

``read`` starts at ``stream_cut_at(t)`` (one consistent cut; nothing with time
>= t lies before it for well-behaved writers) and prints the events with
timestamp >= t, one JSON object per line with ``--format json``: segment,
partition, offset, timestamp, key, body (UTF-8, else base64 with
``"body_encoding": "base64"``), and headers, in order, as
``[{"name": ..., "value": ...}]`` (each value UTF-8 text, else base64 with
``"value_encoding": "base64"``; a null value is ``null``). It stops after ``--count`` events, or at
the end of the data committed when it started (the segments' last stable
offsets, read in one request before reading), or -- a safety net -- when
nothing arrives for ``--wait-ms``. ``--until T`` prints the events before T and stops
once it has read everything before the cut of the first watermark at or past T
(``complete_cut_at``: every event with a time before T lies before it); while no
watermark has reached T it reads as without ``--until``, leaving out events at or
after T, and looks again. ``--follow`` never stops at the end, only on Ctrl-C
(SIGINT, exit 0) or, with ``--until``, at that cut. It commits
nothing anywhere. Times take one syntax (``tidemark.cli.times``). With
``TIDEMARK_TIME_SERVICE`` set, the start cut comes from ``tidemark serve``.

Given several streams, ``read`` merges them by time: each starts at its own cut,
a record is printed once every stream's watermark has passed its time, each row
names its ``stream``, and records that came late are counted on stderr
(``tidemark.pipelines.reading.merge``).

Services come from ``TIDEMARK_KAFKA_BOOTSTRAP`` / ``TIDEMARK_ZK_CONNECT`` /
``TIDEMARK_DELTA_ROOT``, else from ``tidemark up``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

from tidemark.cli.control_plane import (
    ControlPlane,
    control_plane,
    kafka_answers,
    kafka_topics,
    metadata_store,
    service_addresses,
)
from tidemark.cli.cuts import format_cut
from tidemark.cli.output import add_verb, emit, emit_rows, text_value
from tidemark.cli.signals import stopping_on
from tidemark.cli.times import (
    TIME_HELP,
    add_duration_flag,
    parse_ago,
    parse_time,
)
from tidemark.controller.delta.location import Root, TableLocation
from tidemark.controller.metadata import cut_to_json
from tidemark.controller.model import segment_number
from tidemark.environment import Environment
from tidemark.errors import ConfigurationError
from tidemark.infra.services import ZOOKEEPER, data_root, noted_processes, resolve_services
from tidemark.jobs.cli_args import positive_int
from tidemark.schemas.tables import MARKS


def _add_time_options(parser: argparse.ArgumentParser, *, since: bool = False) -> None:
    group = parser.add_mutually_exclusive_group(required=False)
    # --timestamp and --since: both names kept (scripts rely on them), one syntax
    group.add_argument(
        "--from",
        "--since" if since else "--timestamp",
        *(("--timestamp",) if since else ("--since",)),
        dest="timestamp",
        metavar="TIME",
        help=f"from this time: {TIME_HELP}",
    )
    group.add_argument(
        "--ago", metavar="DURATION", help="a time this long ago: 500ms, 90s, 15m, 2h, 1h30m, 2d"
    )


def register(sub: Any) -> None:
    read = add_verb(
        sub, "read", cmd_read, "read a stream from a time (or its head); several: merged by time"
    )
    read.add_argument("stream", nargs="+", help="scope/name (several: merged in time order)")
    _add_time_options(read)
    read.add_argument("--count", type=positive_int, default=None, help="stop after N events")
    read.add_argument(
        "--until",
        metavar="TIME",
        help="print the events before this time; stop once the watermarks show all of "
        f"them read: {TIME_HELP}",
    )
    read.add_argument(
        "--follow",
        action="store_true",
        help="keep reading new events until Ctrl-C (SIGINT; exit 0) or --until's bound, "
        "instead of stopping at the end of the committed data",
    )
    add_duration_flag(
        read,
        "--wait",
        "read stops at the end of the data committed when it started; it also "
        "stops when nothing arrives for this long (default 5000)",
        minimum_ms=1,
        default=5000,
    )

    marks = add_verb(sub, "watermarks", cmd_watermarks, "list a stream's watermarks", on="stream")
    _add_time_options(marks, since=True)

    add_verb(sub, "window", cmd_window, "a reader group's position and time window", on="group")

    seek = add_verb(
        sub, "seek", cmd_seek, "move a reader group to a time (no reader online)", on="group"
    )
    _add_time_options(seek)


def _time_of(args: argparse.Namespace, *, required: bool = False) -> int | None:
    if args.timestamp is not None:
        return parse_time(args.timestamp, "--from")
    if args.ago is not None:
        return parse_ago(args.ago)
    if required:
        raise ConfigurationError("give --timestamp TIME or --ago DURATION")
    return None


def lake() -> TableLocation:
    """Where the controller's tables are: the tables under the local data root (the
    environment's ``TIDEMARK_DELTA_ROOT`` first), as the one location every verb passes."""
    return TableLocation.of(str(data_root(Environment.from_env())))


def require_tables(root: TableLocation) -> None:
    """Refuse a delta root the controller never wrote to (rather than print nothing)."""
    # deltalake: only the verbs that read the tables load it
    from tidemark.controller.delta.tables import is_table

    if not is_table(root.table(MARKS)):
        raise ConfigurationError(
            f"no watermark tables under {root.uri}: start a controller "
            "(tidemark controller run) or set TIDEMARK_DELTA_ROOT to its delta root"
        )


def known_streams(names: Sequence[str], *, where_known: bool = False) -> None:
    """Fail at once, naming it, on the first of ``names`` the metadata store does not
    hold (or is deleting): a verb would otherwise wait on a stream that never moves.
    ``where_known``: only when ZooKeeper is known (flag, environment, ``tidemark up``)
    -- the verbs that read only the tables also run where it is not."""
    # seek's metadata check: off tidemark --help (the parser imports every verb module)
    from tidemark.pipelines.reading.seek import live_metadata

    if where_known:
        try:
            resolve_services(ZOOKEEPER)
        except ConfigurationError:
            return
    with metadata_store() as (_, store):
        for name in names:
            live_metadata(store, name)


def tables_or_their_controller(root: TableLocation) -> None:
    """:func:`require_tables`, unless a controller running here (``controller run``
    under this ``TIDEMARK_HOME``) writes to ``root``: started a moment ago, it has not
    made its tables yet, and a ``wait`` beside it waits for them (the README's tour)."""
    from tidemark.controller.delta.tables import is_table  # deltalake: as require_tables

    if is_table(root.table(MARKS)):
        return
    home = Environment.from_env().home
    for noted in noted_processes(home):
        if noted.tables is not None and TableLocation.of(noted.tables).uri == root.uri:
            return
    require_tables(root)


def local_tables(root: TableLocation) -> None:
    """:func:`require_tables` unless the time service answers for the tables
    (``TIDEMARK_TIME_SERVICE``: it reads its own)."""
    from tidemark.pipelines.reading.time_service import time_service_url  # as above

    if time_service_url() is None:
        require_tables(root)


def _text(field: str, value: bytes | None) -> dict[str, Any]:
    """``{field: value}``, the value as text when it is UTF-8, else base64 with
    ``field_encoding: base64`` beside it (``None`` stays ``null``)."""
    if value is None:
        return {field: None}
    try:
        return {field: value.decode("utf-8")}
    except UnicodeDecodeError:
        return {field: base64.b64encode(value).decode("ascii"), f"{field}_encoding": "base64"}


def _headers(headers: Sequence[tuple[str, bytes | None]]) -> list[dict[str, Any]]:
    """Kafka headers in order: ``{"name": ..., "value": ...}`` each, the value as ``_text``."""
    return [{"name": name, **_text("value", value)} for name, value in headers]


def _key(value: bytes | None) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", errors="backslashreplace")


def event_row(event: Any, with_headers: bool = False) -> dict[str, Any]:
    """One event as ``read`` prints it (its headers when it has some, or ``with_headers``:
    JSON output always names them)."""
    row: dict[str, Any] = {
        "segment": event.segment,
        "partition": event.partition,
        "offset": event.offset,
        "timestamp": event.timestamp,
        "key": _key(event.routing_key),
        **_text("body", event.body),
    }
    if event.headers or with_headers:
        row["headers"] = _headers(event.headers)
    return row


def at_committed_end(reader: Any, ends: dict[int, int]) -> bool:
    """True when the reader has read everything committed up to ``ends`` (a snapshot of
    the last stable offsets): each readable segment it owns is read to its end, and
    every other readable one starts at or after its end.

    An owned segment is at its end when the next offset to return reached it -- known
    without asking Kafka again -- or, when transaction markers sit just below the
    end (no record carries their offsets), when Kafka said so (end of partition)."""
    view = reader.group.view()
    position = {s: o for s, o in reader.position().items() if o >= 0}
    for seg in view.readable:
        end = ends.get(segment_number(seg), 0)
        if seg in position:
            if position[seg] < end and not reader.at_tail():
                return False
        elif view.offsets.get(seg, 0) < end:
            return False
    return True


READ_FETCH_WAIT_MS = 50
"""``fetch.wait.max.ms`` of ``read``'s consumer: how long Kafka holds a fetch that finds
nothing new (librdkafka's default, 500 ms, is what a read ending on transaction markers
would wait for the end-of-partition notice)."""


def cmd_read(args: argparse.Namespace) -> int:
    # confluent_kafka: off tidemark --help (the parser imports every verb module)
    from tidemark.pipelines.reading.group import (  # confluent_kafka: as above
        ReaderConfig,
        ReaderGroup,
    )
    from tidemark.pipelines.reading.seek import (  # as _time_of
        complete_cut_at,
        live_metadata,
        stream_cut_at,
    )

    if len(args.stream) > 1:
        if args.until is not None or args.follow:
            raise ConfigurationError("--until and --follow read one stream (give one)")
        return _read_merged(args, _time_of(args))
    stream = args.stream[0]
    since = _time_of(args)
    until = None if args.until is None else parse_time(args.until, "--until")
    if until is not None and since is not None and until <= since:
        raise ConfigurationError(f"--until {args.until} is not after the start time ({since})")
    kafka, _ = service_addresses()
    root = lake()
    with control_plane() as cp:
        meta = live_metadata(cp.store, stream)
        cut = end = index = None
        if since is not None or until is not None:
            # the time service's HTTP client: only a read by time loads it
            from tidemark.pipelines.reading.time_service import default_index

            local_tables(root)  # else a wrong root would read from the head
            index = default_index(root)
        if since is not None:
            cut = stream_cut_at(stream, since, delta_root=root, store=cp.store, index=index)

        def end_cut() -> dict[int, int] | None:
            """Where every event before ``--until`` has been read (None: not known yet)."""
            if until is None:
                return None
            return complete_cut_at(stream, max(until - 1, 0), store=cp.store, index=index)

        end = end_cut()
        # Where committed data ends now: read to there and stop, no timeout to wait out.
        with kafka_answers(kafka):
            ends = kafka_topics(kafka).last_stable_offsets(
                meta.topic, sorted({segment_number(s) for s in meta.segments()})
            )
        group = ReaderGroup.ephemeral_group(
            stream,
            cut,
            store=cp.store,
            bootstrap_servers=kafka,
            delta_root=root,
            config=ReaderConfig(
                rebalance_interval_ms=20,
                consumer_overrides={"fetch.wait.max.ms": READ_FETCH_WAIT_MS},
            ),
        )
        printed = 0
        idle_since = looked_at = time.monotonic()
        with group, group.reader("cli") as reader, _until_interrupted(args.follow) as stop:
            while (args.count is None or printed < args.count) and not stop.is_set():
                if end is not None and past_cut(reader.position(), end, group.segments()):
                    break  # every event before --until is read
                event = reader.read_next(timeout_ms=min(args.wait_ms, 20))
                if event is None:
                    if until is not None and end is None and time.monotonic() - looked_at >= 1:
                        end, looked_at = end_cut(), time.monotonic()  # complete by now?
                    if args.follow:
                        continue
                    if at_committed_end(reader, ends):
                        break
                    if (time.monotonic() - idle_since) * 1000 >= args.wait_ms:
                        break  # the safety net: something below the end never came
                    continue
                idle_since = time.monotonic()
                if event.is_checkpoint:
                    continue  # another process's checkpoint: no event to print
                if since is not None and event.timestamp < since:
                    continue
                if until is not None and event.timestamp >= until:
                    continue
                emit_rows(args, [event_row(event, args.format == "json")])
                sys.stdout.flush()  # a follower's rows are out before the next wait
                printed += 1
    return 0


def past_cut(position: Mapping[int, int], cut: Mapping[int, int], segments: Any) -> bool:
    """True when a reader at ``position`` has read everything before ``cut``: it holds
    (or holds overlapping segments of) each of the cut's segments -- a reader not yet
    given all its segments has not -- and the position is at or past the cut."""
    from tidemark.controller.timewindow import compare  # pure; off tidemark --help's path

    if any(seg not in segments for seg in (*cut, *position)):
        return False  # a segment of a new epoch: known once the group refreshes
    held = [segments[seg] for seg in position]
    if not all(any(h.overlaps(segments[seg]) for h in held) for seg in cut):
        return False
    return compare(position, cut, segments) > 0


def _until_interrupted(follow: bool) -> contextlib.AbstractContextManager[threading.Event]:
    """With ``--follow``, Ctrl-C (SIGINT) ends the read normally (exit 0): every row
    read was printed and flushed, and the reader group is ephemeral (it commits nothing),
    so stopping there loses nothing.

    The signal only sets the event the read loop checks (:func:`stopping_on`); a second
    Ctrl-C interrupts at once, as without the handler."""
    if follow and threading.current_thread() is threading.main_thread():
        return stopping_on(signal.SIGINT, once=True)
    return contextlib.nullcontext(threading.Event())


def _read_merged(args: argparse.Namespace, since: int | None) -> int:
    """Several streams merged by time (``tidemark.pipelines.reading.merge``); each row names its
    ``stream``. Ends as a read of one stream does, then prints what was held back, in
    order; late records (below a time already printed) are printed and counted."""
    # confluent_kafka, deltalake: off tidemark --help (the parser imports every verb module)
    from tidemark.pipelines.reading.config import ReaderConfig
    from tidemark.pipelines.reading.merge import merged_reader
    from tidemark.pipelines.reading.seek import live_metadata
    from tidemark.pipelines.reading.streams import check_streams

    names = check_streams(args.stream)
    kafka, _ = service_addresses()
    root = lake()
    index = None
    if since is not None:
        # the time service's HTTP client: only a read from a time loads it
        from tidemark.pipelines.reading.time_service import default_index

        index = default_index(root)
    with control_plane() as cp:
        # Where committed data ends now, on every stream: read to there and stop.
        topics = kafka_topics(kafka)
        ends = {}
        for name in names:
            meta = live_metadata(cp.store, name)
            parts = sorted({segment_number(s) for s in meta.segments()})
            with kafka_answers(kafka):
                ends[name] = topics.last_stable_offsets(meta.topic, parts)
        # commit_interval_ms=0: the (in-memory) position is committed at every call, so a
        # sealed segment read to its end lets its successors in before the end check.
        config = ReaderConfig(
            rebalance_interval_ms=20,
            commit_interval_ms=0,
            consumer_overrides={"fetch.wait.max.ms": READ_FETCH_WAIT_MS},
        )
        with merged_reader(
            names,
            since,
            store=cp.store,
            bootstrap_servers=kafka,
            delta_root=root,
            config=config,
            index=index,
        ) as merged:
            printed = 0
            idle_since = time.monotonic()
            left = None if args.count is None else args.count
            while left is None or printed < left:
                held = merged.held
                out = merged.poll(timeout_ms=20)
                # At the end only after a call that read nothing (as read_next's None): that
                # call finished the sealed segments read to their end and let successors in.
                came = held != merged.held + len(out)
                done = not came and all(
                    at_committed_end(r, ends[n]) for r, n in zip(merged.readers, names, strict=True)
                )
                if done:
                    out += merged.flush()
                elif came:
                    idle_since = time.monotonic()
                elif (time.monotonic() - idle_since) * 1000 >= args.wait_ms:
                    out += merged.flush()  # the safety net: something below an end never came
                    done = True
                room = None if left is None else left - printed
                rows = [
                    {"stream": e.stream, **event_row(e, args.format == "json")}
                    for e in islice(out, room)
                ]
                emit_rows(args, rows)
                printed += len(rows)
                if done:
                    break
            if merged.late:
                print(f"tidemark: {merged.late} record(s) came late", file=sys.stderr)
    return 0


def cmd_watermarks(args: argparse.Namespace) -> int:
    # the watermark feed: off tidemark --help (the parser imports every verb module)
    from tidemark.pipelines.reading.windows import WatermarkFeed

    since = _time_of(args) or 0
    known_streams([args.stream])
    root = lake()
    require_tables(root)
    marks = WatermarkFeed(root, args.stream).since(since)
    observed = observations(root, args.stream) if marks else {}
    emit_rows(
        args,
        [
            {
                "seq": m.seq,
                "time": m.time,
                "upper_time": m.upper_time,
                "stream_cut": cut_to_json(m.stream_cut),
                **({"observed": observed[m.seq]} if m.seq in observed else {}),
            }
            for m in marks
        ],
    )
    return 0


def observations(root: Root, stream: str) -> dict[int, dict[str, Any]]:
    """``seq`` -> what each watermark resting on observation says of it (``observed``
    writers, ``lateness_ms``, ``possibly_late``); noted watermarks are left out."""
    # deltalake: off tidemark --help (the parser imports every verb module)
    from tidemark.controller.delta.tables import read_table
    from tidemark.schemas.tables import MARKS, observation_of

    found = {int(row["seq"]): observation_of(row) for row in read_table(root, MARKS, stream)}
    return {seq: o for seq, o in found.items() if o is not None}


@contextlib.contextmanager
def reader_group(name: str, plane: ControlPlane | None = None) -> Iterator[Any]:
    """The reader group ``name``, open for a ``with`` block: on ``plane`` when given,
    else on a control plane of its own."""
    # confluent_kafka: off tidemark --help (the parser imports every verb module)
    from tidemark.pipelines.reading.group import open_group

    with contextlib.ExitStack() as stack:
        cp = plane if plane is not None else stack.enter_context(control_plane())
        yield stack.enter_context(
            open_group(name, store=cp.store, bootstrap_servers=cp.kafka, delta_root=lake())
        )


def cmd_window(args: argparse.Namespace) -> int:
    with reader_group(args.group) as group:
        local_tables(lake())  # else a wrong root would show no window at all
        window = group.current_time_window()
        cut = group.stream_cut()
        readers = group.online_readers()
    payload = {
        "group": args.group,
        "stream": group.stream,
        "lower": window.lower,
        "upper": window.upper,
        "stream_cut": cut_to_json(cut),
        "readers": readers,
    }
    emit(
        args,
        payload,
        [
            f"group   {args.group} on {group.stream}",
            f"window  [{text_value(window.lower)}, {text_value(window.upper)}]",
            f"cut     {format_cut(cut) or '(the head)'}",
            f"readers {', '.join(readers) or '(none online)'}",
        ],
    )
    return 0


def cmd_seek(args: argparse.Namespace) -> int:
    ts = _time_of(args, required=True)
    with reader_group(args.group) as group:
        local_tables(lake())  # else a wrong root would move the group to the head
        cut = group.seek(ts)
    emit(
        args,
        {"group": args.group, "timestamp": ts, "stream_cut": cut_to_json(cut)},
        f"group {args.group} moved to {format_cut(cut) or 'the head'} (time {ts})",
    )
    return 0
