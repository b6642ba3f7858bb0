"""The controller's command-line options, shared by spark-submit and ``tidemark controller run``.

    parser = argparse.ArgumentParser(); add_controller_arguments(parser)
    settings = settings_from_args(parser.parse_args(["--instance", "c1"]))

Imports no Spark, so the CLI can list its verbs without loading it.
"""

from __future__ import annotations

import argparse

from tidemark.controller.exceptions import InvalidModelError
from tidemark.controller.naming import ClusterSettings, check_instance_id
from tidemark.controller.timestamps import add_duration_flag
from tidemark.environment import Environment
from tidemark.errors import ConfigurationError
from tidemark.infra.services import KAFKA, ZOOKEEPER, data_root, resolve_services
from tidemark.jobs.config import DEFAULT_STOP_TIMEOUT_MS, ControllerSettings, CycleTrigger
from tidemark.jobs.exceptions import JobConfigurationError


def instance_id(text: str) -> str:
    """``--instance``: refused by argparse, before Spark or Kafka is touched."""
    try:
        return check_instance_id(text)
    except InvalidModelError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (``--bucket-count``, ``read --count``, ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_controller_arguments(parser: argparse.ArgumentParser) -> None:
    cluster = ClusterSettings()
    defaults = ControllerSettings  # the settings' own defaults (class attributes)
    parser.add_argument(
        "--instance", required=True, type=instance_id, help="this instance's id (unique)"
    )
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (TIDEMARK_KAFKA_BOOTSTRAP)")
    parser.add_argument("--zk", help="ZooKeeper connect string (TIDEMARK_ZK_CONNECT)")
    parser.add_argument("--zk-root", default=cluster.zk_root, help="metadata root in ZooKeeper")
    parser.add_argument(
        "--marks-topic", default=cluster.marks_topic, help="the topic writers send marks to"
    )
    parser.add_argument(
        "--bucket-count",
        type=positive_int,
        default=cluster.bucket_count,
        help="buckets: partitions of the marks topic; the query's slots are 4 per bucket "
        "(fixed by the checkpoint)",
    )
    parser.add_argument(
        "--state-partitions",
        type=positive_int,
        default=None,
        help="tasks per micro-batch of the query's stateful operator (default: Spark's "
        "default parallelism, at most the slot count; fixed by the checkpoint)",
    )
    add_duration_flag(
        parser, "--interval", "watermark interval (trigger)", default=defaults.interval_ms
    )
    add_duration_flag(
        parser,
        "--writer-timeout",
        "drop a lagging writer after this long, for streams that set no "
        "timestamp_aggregation_timeout_ms",
        default=defaults.writer_timeout_ms,
    )
    add_duration_flag(
        parser,
        "--lso-hold",
        "hold a cut past the last stable offset this long, then reject the writers",
        default=defaults.lso_hold_ms,
    )
    parser.add_argument("--delta-root", help="where the tables live (TIDEMARK_DELTA_ROOT)")
    parser.add_argument(
        "--checkpoint-root",
        help="shared checkpoint storage (default: <delta root>/_checkpoints)",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=None,
        help="marks read per micro-batch at most (default: no limit)",
    )
    add_duration_flag(
        parser,
        "--zk-session-timeout",
        "the driver's ZooKeeper session: a standby takes over this long after a crash",
        default=defaults.zk_session_timeout_ms,
    )
    parser.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the query's plan over a few retained marks (or synthetic rows) before "
        "contending when another driver leads, so a standby takes over with Python workers, "
        "code, Kafka source and Delta tables warm (on by default; --no-warm-up)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics on this port (jobs/metrics.py names them)",
    )
    add_duration_flag(
        parser,
        "--stop-timeout",
        "on SIGINT/SIGTERM, stop within this long, even with Kafka, ZooKeeper or the "
        "store gone (a second signal exits at once)",
        default=DEFAULT_STOP_TIMEOUT_MS,
        minimum_ms=1,
    )


def delta_root_of(args: argparse.Namespace, env: Environment) -> str:
    """Where the driver writes its tables: ``--delta-root``, else the local data root."""
    return str(args.delta_root or data_root(env))


def settings_from_args(args: argparse.Namespace) -> ControllerSettings:
    """Options, then the environment (``tidemark.environment``), then ``tidemark up``'s services."""
    env = Environment.from_env()
    try:
        found = resolve_services(KAFKA, ZOOKEEPER, kafka=args.bootstrap, zk=args.zk, env=env)
    except ConfigurationError as exc:
        raise JobConfigurationError(str(exc)) from exc
    kafka, zk = str(found.kafka_bootstrap), str(found.zk_connect)
    delta_root = delta_root_of(args, env)
    return ControllerSettings(
        kafka_bootstrap=kafka,
        zk_connect=zk,
        delta_root=delta_root,
        checkpoint_root=args.checkpoint_root or f"{delta_root.rstrip('/')}/_checkpoints",
        cluster=ClusterSettings(
            marks_topic=args.marks_topic, bucket_count=args.bucket_count, zk_root=args.zk_root
        ),
        interval_ms=args.interval_ms,
        writer_timeout_ms=args.writer_timeout_ms,
        lso_hold_ms=args.lso_hold_ms,
        trigger=CycleTrigger.TIMERS,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        zk_session_timeout_ms=args.zk_session_timeout_ms,
        warm_up=args.warm_up,
        state_partitions=args.state_partitions,
    )


__all__ = ["add_controller_arguments", "instance_id", "positive_int", "settings_from_args"]
