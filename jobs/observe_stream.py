"""Observed time as a job: note a stream's time from the brokers' offsets until stopped.

    spark-submit jobs/observe_stream.py --stream shop/legacy --lateness 30s
    python -m tidemark.jobs.observe_stream --stream shop/legacy --lateness 30s --zk zk:2181

The same as ``tidemark stream observe`` (:mod:`tidemark.pipelines.writing.observer`),
for a scheduler that runs Spark applications: the observer runs on the driver
and needs no executor (the session, if spark-submit made one, is not used).
SIGINT or SIGTERM ends it with the observer's shutdown mark, exit 0; a bad
duration or an unknown stream is an error naming it, exit 1.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from tidemark.controller.naming import ClusterSettings
from tidemark.controller.zookeeper.session import open_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.environment import Environment
from tidemark.errors import TidemarkError
from tidemark.infra.services import KAFKA, ZOOKEEPER, resolve_services
from tidemark.pipelines.reading.exceptions import InvalidDurationError
from tidemark.pipelines.reading.seek import parse_duration
from tidemark.pipelines.writing.observer import ObserverConfig, ObserverConfigError, StreamObserver

log = logging.getLogger(__name__)


def duration_ms(text: str, flag: str) -> int:
    """``text`` (``500ms``, ``30s``, ``1m``...) in milliseconds, else an
    :class:`ObserverConfigError` naming ``flag``."""
    if text.strip().startswith("-"):
        raise ObserverConfigError(f"{flag} {text!r}: a duration must not be negative")
    try:
        return parse_duration(text)
    except InvalidDurationError:
        raise ObserverConfigError(
            f"{flag} {text!r} is no duration: use e.g. 500ms, 30s, 5m, 1h30m"
        ) from None


def config_from_text(lateness: str, interval: str = "1s", idle: str = "10s") -> ObserverConfig:
    """The observer's settings from the flags of this job and ``tidemark stream observe``."""
    return ObserverConfig(
        lateness_ms=duration_ms(lateness, "--lateness"),
        interval_ms=duration_ms(interval, "--interval"),
        idle_ms=duration_ms(idle, "--idle"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="observe_stream", description=__doc__.split("\n")[0])
    parser.add_argument("--stream", required=True, help="scope/name")
    parser.add_argument("--lateness", required=True, help="e.g. 30s")
    parser.add_argument("--interval", default="1s")
    parser.add_argument("--idle", default="10s")
    parser.add_argument("--writer-id", help="default observer:<stream>")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEMARK_KAFKA_BOOTSTRAP)")
    parser.add_argument("--zk", help="ZooKeeper connect string (TIDEMARK_ZK_CONNECT)")
    parser.add_argument("--zk-root", default=ClusterSettings().zk_root)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    try:
        config = config_from_text(args.lateness, args.interval, args.idle)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        found = resolve_services(
            KAFKA, ZOOKEEPER, kafka=args.bootstrap, zk=args.zk, env=Environment.from_env()
        )
        client = open_session(str(found.zk_connect), start_timeout_s=15)
        try:
            store = ZooKeeperStore(client, args.zk_root)
            with StreamObserver(
                args.stream,
                config,
                store=store,
                bootstrap_servers=str(found.kafka_bootstrap),
                writer_id=args.writer_id,
            ) as observer:
                log.info("observing %s as %s", args.stream, observer.writer_id)
                observer.run(stop)
        finally:
            client.stop()
            client.close()
    except TidemarkError as exc:
        print(f"observe_stream: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
