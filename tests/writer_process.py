"""A writer in a process of its own, for tests that kill it (``kill -9``) and start it again.

    python -m tests.writer_process KAFKA ZK_CONNECT MARKS_TOPIC BUCKETS STREAM WRITER KIND

``KIND`` is ``event`` (an ``EventWriter``) or ``transactional`` (a ``TransactionalWriter``
committing a transaction per event); both note time automatically every 200 ms. The
process prints one JSON line once the writer is made (``{"instance": token}``: it has
registered), then writes an event every 100 ms until it is killed. A write or commit that
fails (a slow broker on a loaded machine) is reported on stderr and tried again, as an
application would: the process ends only when it is killed.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

from tidemark.controller.naming import ClusterSettings
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.errors import TidemarkError
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.transactions import (
    Transaction,
    TransactionalWriter,
    TransactionState,
)
from tidemark.pipelines.writing.writer import EventWriter


def main(kafka: str, zk: str, marks_topic: str, buckets: str, stream: str, writer: str, kind: str):
    cluster = ClusterSettings(marks_topic=marks_topic, bucket_count=int(buckets))
    config = WriterConfig(
        cluster=cluster, linger_ms=1, automatically_note_time=True, note_time_interval_ms=200
    )
    with zookeeper_session(zk) as client:
        store = ZooKeeperStore(client, cluster.zk_root)
        if kind == "transactional":
            txn_writer = TransactionalWriter(
                writer, stream, store=store, bootstrap_servers=kafka, config=config
            )
            print(json.dumps({"instance": txn_writer.instance}), flush=True)
            for n in range(10**9):
                txn: Transaction | None = None
                try:
                    txn = txn_writer.begin()
                    txn.write(f"event-{n}".encode(), routing_key=f"k{n % 7}")
                    txn.commit()
                except TidemarkError:
                    traceback.print_exc()
                    if txn is not None and txn.state is TransactionState.OPEN:
                        txn.abort()
                time.sleep(0.1)
        event_writer = EventWriter(
            writer, stream, store=store, bootstrap_servers=kafka, config=config
        )
        print(json.dumps({"instance": event_writer.instance}), flush=True)
        for n in range(10**9):
            try:
                event_writer.write(f"event-{n}".encode(), routing_key=f"k{n % 7}")
            except TidemarkError:
                traceback.print_exc()
            time.sleep(0.1)


if __name__ == "__main__":
    main(*sys.argv[1:])
