"""``tidemark read s1 s2 ...``: several streams read as one, in timestamp order.

    tidemark read shop/orders shop/payments --ago 10m --format json

Each stream starts at its own cut for the time (``stream_cut_at``); a record is
printed once every stream's watermark has passed its time
(``pipelines.reading.merge``), each row naming its ``stream``. The read ends
at the end of the data committed on every stream when it started (what is
still held back is then printed, in order), after ``--count`` records, or
when nothing arrives for ``--wait-ms``. Records that came late (below a time
already printed, from writers whose events run behind their noted times) are
printed out of order and counted on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import islice

from controller.model import segment_number
from tidemark.cli.control_plane import control_plane, service_addresses
from tidemark.cli.output import emit_rows
from tidemark.cli.read import READ_FETCH_WAIT_MS, at_committed_end, delta_root, event_row


def read_merged(args: argparse.Namespace, since: int | None) -> int:
    # confluent_kafka, deltalake: only a read loads them
    from controller.kafka.admin import StreamTopics
    from pipelines.reading.config import ReaderConfig
    from pipelines.reading.merge import merged_reader
    from pipelines.reading.seek import live_metadata
    from pipelines.reading.streams import check_streams

    names = check_streams(args.stream)
    kafka, _ = service_addresses()
    root = delta_root()
    index = None
    if since is not None:
        # the time service's HTTP client: only a read from a time loads it
        from pipelines.reading.time_service import default_index

        index = default_index(root)
    with control_plane() as cp:
        # Where committed data ends now, on every stream: read to there and stop.
        topics = StreamTopics(kafka)
        ends = {}
        for name in names:
            meta = live_metadata(cp.store, name)
            parts = sorted({segment_number(s) for s in meta.segments()})
            ends[name] = topics.last_stable_offsets(meta.topic, parts)
        config = ReaderConfig(
            rebalance_interval_ms=20, consumer_overrides={"fetch.wait.max.ms": READ_FETCH_WAIT_MS}
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
                done = all(
                    at_committed_end(r, ends[n]) for r, n in zip(merged.readers, names, strict=True)
                )
                if done:
                    out += merged.flush()
                elif out or held != merged.held:
                    idle_since = time.monotonic()
                elif (time.monotonic() - idle_since) * 1000 >= args.wait_ms:
                    out += merged.flush()  # the safety net: something below an end never came
                    done = True
                room = None if left is None else left - printed
                rows = [{"stream": e.stream, **event_row(e)} for e in islice(out, room)]
                emit_rows(args, rows)
                printed += len(rows)
                if done:
                    break
            if merged.late:
                print(f"tidemark: {merged.late} record(s) came late", file=sys.stderr)
    return 0


__all__ = ["read_merged"]
