"""The freshness benchmark's writers, in a process of their own.

    python -m tests.bench.fresh_writers BOOTSTRAP ZK_CONNECT MARKS_TOPIC BUCKETS STREAM...

Two ``EventWriter`` per stream note wall-clock time every 200 ms (one event
and one ``note_time`` each) until stdin closes. Each round writes every
writer's event and flushes them, then notes the time for all of them: a
writer's mark is published within its ``note_time`` call (its events are
acknowledged), as a writer serving its own producer would. (Noting right
after each write published a mark only when that writer's turn to flush
came: the 200th writer's mark left up to ~1 s after its note, and the
benchmark measured this loop, not the controller.) They run apart from the
Spark driver because 200 Kafka producers hold well over 1 000 file
descriptors, and py4j's callback server (``select()``) stops answering
``foreachBatch`` once the driver process holds a descriptor >= 1024 -- as a
user's writers would run apart from the controller anyway.
"""

from __future__ import annotations

import sys
import threading
import time


def main(argv: list[str]) -> int:
    from kazoo.client import KazooClient

    from tidemark.controller.naming import ClusterSettings
    from tidemark.controller.zookeeper.store import ZooKeeperStore
    from tidemark.pipelines.writing.config import WriterConfig
    from tidemark.pipelines.writing.writer import EventWriter

    bootstrap, zk_connect, marks_topic, buckets, *streams = argv
    cluster = ClusterSettings(marks_topic=marks_topic, bucket_count=int(buckets))
    client = KazooClient(hosts=zk_connect)
    client.start(timeout=30)
    store = ZooKeeperStore(client, cluster.zk_root)
    cfg = WriterConfig(cluster=cluster, linger_ms=1)
    writers = [
        EventWriter(f"w{j}", s, store=store, bootstrap_servers=bootstrap, config=cfg)
        for s in streams
        for j in range(2)
    ]
    halt = threading.Event()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        halt.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    print("ready", flush=True)
    try:
        while not halt.is_set():
            for w in writers:
                w.write(b"e", routing_key="k")
            for w in writers:
                w.flush()
            now = time.time_ns() // 1_000_000  # every event so far is acknowledged
            for w in writers:
                w.note_time(now)
            for w in writers:
                w.flush()
            halt.wait(0.2)
    finally:
        for w in writers:
            w.close()
        client.stop()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
