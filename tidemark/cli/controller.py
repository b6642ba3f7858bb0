"""``tidemark controller ...``: the controller's verbs.

    tidemark controller status --format json
    tidemark controller run --instance a --bucket-count 8   # also runs the policy loop
    tidemark controller policies --policy-interval-ms 10000 --delta-root ~/.tidemark/delta

Each verb is a ``register_<verb>(verbs)`` function listed in :data:`VERBS`;
add a verb by writing its function and appending it there.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidemark.cli.control_plane import control_plane
from tidemark.cli.output import add_format_option, emit, emit_rows
from tidemark.cli.read import require_tables
from tidemark.cli.times import add_duration_flag
from tidemark.controller.delta.location import Root, TableLocation
from tidemark.controller.naming import ClusterSettings
from tidemark.environment import Environment
from tidemark.errors import ConfigurationError
from tidemark.infra.services import noted_process
from tidemark.jobs.cli_args import add_controller_arguments, delta_root_of, settings_from_args
from tidemark.python_zygote import PRELOAD, PythonZygote
from tidemark.schemas.tables import laggards_by_stream

if TYPE_CHECKING:
    from tidemark.controller.policy_loop import PolicySettings

log = logging.getLogger(__name__)


def register_status(verbs: Any) -> None:
    defaults = ClusterSettings()
    parser = verbs.add_parser(
        "status",
        help="the leading and standby drivers, buckets, the last batch, each stream's lag",
    )
    parser.add_argument(
        "--marks-topic", default=defaults.marks_topic, help="the topic writers send marks to"
    )
    parser.add_argument("--zk-root", default=defaults.zk_root, help="metadata root in ZooKeeper")
    parser.add_argument(
        "--delta-root", help="where the tables live (default: what the leader published)"
    )
    add_format_option(parser)
    parser.set_defaults(func=cmd_status)


def register_run(verbs: Any) -> None:
    parser = verbs.add_parser(
        "run",
        help="run a controller driver: it leads (runs the streaming query) or waits as standby",
    )
    add_controller_arguments(parser)
    add_policy_arguments(
        parser,
        interval_help="while leading, act on stream policies (retention, auto-scaling) this "
        "often; 0 turns the policy loop off (then run `tidemark controller policies` elsewhere)",
    )
    parser.set_defaults(func=cmd_run)


def add_policy_arguments(parser: argparse.ArgumentParser, interval_help: str | None = None) -> None:
    """The options :func:`policy_settings` reads: how often the policy loop acts and what it
    measures over (``controller run`` and ``controller policies``)."""
    add_duration_flag(
        parser,
        "--policy-interval",
        interval_help or "act on stream policies (retention, auto-scaling) this often",
        default=10_000,
    )
    add_duration_flag(
        parser, "--rate-window", "the span the policies measure rates over", default=60_000
    )
    add_duration_flag(
        parser,
        "--scale-cooldown",
        "the least time between two scalings of a stream",
        default=120_000,
    )


def policy_settings(args: argparse.Namespace) -> PolicySettings:
    """``PolicySettings`` from the options."""
    # tidemark.controller.policy_loop loads kazoo and confluent_kafka (~0.1 s): only for these verbs
    from tidemark.controller.policy_loop import PolicySettings

    return PolicySettings(
        interval_ms=args.policy_interval_ms,
        rate_window_ms=args.rate_window_ms,
        cooldown_ms=args.scale_cooldown_ms,
    )


def index_lookup(lake: Root) -> Callable[[str, int], dict[int, int]]:
    """The policy loop's cut lookup: ``stream_cut_at`` over the index under ``lake``
    (``$TIDEMARK_DELTA_ROOT`` if ``None``; the table is opened on the first lookup)."""
    # the seek index's modules load only for the policy verbs: the parser imports every
    # verb module, and they would add ~30 ms to every `tidemark` command
    from tidemark.pipelines.reading.seek import stream_cut_at

    return functools.partial(stream_cut_at, delta_root=lake)


def policy_tasks(args: argparse.Namespace) -> Callable[[Any], list[Any]]:
    """``controller run``'s leader tasks: the stream policy loop, unless
    ``--policy-interval-ms 0``. Given the driver's ``ControllerSettings``."""
    if args.policy_interval_ms < 0:
        raise ConfigurationError(
            f"--policy-interval-ms must be >= 0 (0: no policy loop), got {args.policy_interval_ms}"
        )
    policies = policy_settings(args) if args.policy_interval_ms else None  # checks them

    def leader_tasks(settings: Any) -> list[Any]:
        from tidemark.controller.policy_loop import PolicySwitch  # as in policy_settings

        if policies is None:
            return []
        return [
            PolicySwitch(
                policies,
                settings.kafka_bootstrap,
                settings.zk_connect,
                settings.cluster,
                identifier=f"controller-{args.instance}",
                cut_at=index_lookup(settings.delta_root),
                zk_session_timeout_ms=settings.zk_session_timeout_ms,
            )
        ]

    return leader_tasks


def cmd_run(args: argparse.Namespace) -> int:
    env = Environment.from_env()
    # noted first (before pyspark loads): `tidemark down` stops it, and a `wait`
    # started beside it waits for its tables
    with noted_process("controller", args.instance, env, tables=delta_root_of(args, env)):
        # pyspark and pandas: only for this verb
        from tidemark.jobs.controller_job import driver_work_dir, run_local, spark_log_path

        work_dir = driver_work_dir(settings_from_args(args), args.instance)
        print(
            f"tidemark controller {args.instance}: Spark's own log is {spark_log_path(work_dir)}",
            file=sys.stderr,
            flush=True,
        )
        if not env.python_zygote or not (env.spark_master or "local").startswith("local"):
            return run_local(args, policy_tasks(args))
        from tidemark.jobs import processor  # pyspark and pandas, as run_local

        zygote = PythonZygote.start(work_dir, (*PRELOAD, processor.__name__))
        try:
            return run_local(args, policy_tasks(args), python=str(zygote.launcher))
        finally:
            zygote.stop()


def register_policies(verbs: Any) -> None:
    parser = verbs.add_parser(
        "policies",
        help="run the stream policy loop alone (retention, auto-scaling; no Spark)",
        description="Acts on every stream's retention and scaling policy. Only one loop "
        "acts per cluster: loops contend in a ZooKeeper election, the others wait.",
    )
    parser.add_argument("--instance", default=None, help="this loop's name in the election")
    add_policy_arguments(parser)
    parser.add_argument(
        "--delta-root", default=None, help="the controller's tables (default $TIDEMARK_DELTA_ROOT)"
    )
    parser.add_argument(
        "--once", action="store_true", help="one pass now, print what it did, no election"
    )
    add_format_option(parser)
    parser.set_defaults(func=cmd_policies)


def cmd_policies(args: argparse.Namespace) -> int:
    from tidemark.controller.policy_loop import (  # as in policy_settings
        PolicyLoop,
        run_when_elected,
    )

    settings = policy_settings(args)
    with control_plane() as cp:
        loop = PolicyLoop(cp.manager, settings, cut_at=index_lookup(args.delta_root))
        try:
            if args.once:
                actions = loop.run_once()
                emit_rows(args, [vars(a) for a in actions])
                return 0
            identifier = args.instance or f"{socket.gethostname()}-{os.getpid()}"
            run_when_elected(cp.client, loop, identifier, cp.settings.zk_root)
        finally:
            loop.close()
    return 0


VERBS: list[Callable[[Any], None]] = [register_status, register_run, register_policies]
"""The ``controller`` group's verbs; each adds its subparser."""


def register(sub: Any) -> None:
    group = sub.add_parser("controller", help="the watermark controller")
    verbs = group.add_subparsers(dest="controller_command", metavar="VERB", required=True)
    for add_verb in VERBS:
        add_verb(verbs)


def stream_lags(rows: Sequence[Mapping[str, Any]], now_ms: int) -> dict[str, dict[str, int]]:
    """Each stream's latest watermark: its seq, how far its time is behind now (lag) and
    how long ago it was emitted (age), in ms."""
    latest: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        seen = latest.get(row["stream"])
        if seen is None or row["seq"] > seen["seq"]:
            latest[row["stream"]] = row
    return {
        stream: {
            "seq": int(row["seq"]),
            "lag_ms": now_ms - int(row["time"]),
            "age_ms": now_ms - int(row["emitted_at"]),
        }
        for stream, row in sorted(latest.items())
    }


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe_laggard(row: Mapping[str, Any], now_ms: int) -> str:
    """``w2 (instance 9f3c) lagging since 2026-11-22T17:01:02Z (for 12.0 s), 5.0 s behind,
    noted 1700000000000, first seen 2026-11-22T16:58:40Z, last seen 0.4 s ago (as of 1.0 s
    ago)``; a table from before the writer's instance and times leaves them out."""
    text = f"{row['writer']}"
    if row.get("instance") is not None:
        text += f" (instance {row['instance']})"
    text += f" {row['kind']}"
    since = row.get("since")
    if since is not None:
        text += f" since {_utc(int(since))} (for {(now_ms - int(since)) / 1000:.1f} s)"
    behind = row.get("behind_ms")
    if behind is not None:
        text += f", {int(behind) / 1000:.1f} s behind"
    if row.get("noted_time") is not None:
        text += f", noted {row['noted_time']}"
    if row.get("first_seen") is not None:
        text += f", first seen {_utc(int(row['first_seen']))}"
    if row.get("last_seen") is not None:
        text += f", last seen {(now_ms - int(row['last_seen'])) / 1000:.1f} s ago"
    return text + f" (as of {(now_ms - int(row['at'])) / 1000:.1f} s ago)"


def cmd_status(args: argparse.Namespace) -> int:
    from tidemark.controller.zookeeper.driver import controller_view  # kazoo: as in policy_settings
    from tidemark.jobs.tables import LAGGARDS, MARKS, read_table  # pyarrow: only for this verb

    if args.delta_root:  # a root given by hand must hold the tables; the leader's may not yet
        require_tables(TableLocation.of(str(args.delta_root)))
    defaults = ClusterSettings()
    settings = ClusterSettings(
        marks_topic=args.marks_topic, bucket_count=defaults.bucket_count, zk_root=args.zk_root
    )
    with control_plane(settings) as cp:
        view = controller_view(cp.client, settings.zk_root, settings.marks_topic)
    layout = view.layout or {}
    now = time.time_ns() // 1_000_000
    delta_root = args.delta_root or layout.get("delta_root")
    lags: dict[str, dict[str, int]] = {}
    laggards: dict[str, list[dict[str, Any]]] = {}
    delta_error: str | None = None
    if delta_root:
        lake = TableLocation.of(str(delta_root))
        try:
            lags = stream_lags(read_table(lake, MARKS), now)
        except Exception as exc:  # no table yet: nothing emitted
            delta_error = str(exc)
        try:
            laggards = laggards_by_stream(read_table(lake, LAGGARDS))
        except Exception as exc:  # a controller from before the laggards table
            log.debug("no laggards under %s: %s", lake.uri, exc)
    progress = view.progress
    data = {
        "leader": view.leader,
        "standbys": list(view.standbys),
        "bucket_count": layout.get("bucket_count"),
        "slot_count": layout.get("slot_count"),
        "state_partitions": layout.get("state_partitions"),
        "checkpoint": layout.get("checkpoint"),
        "delta_root": delta_root,
        "last_batch": None
        if progress is None
        else {**progress, "age_ms": now - int(progress.get("at_ms", now))},
        "streams": {
            stream: {**lags.get(stream, {}), "laggards": laggards.get(stream, [])}
            for stream in sorted(set(lags) | set(laggards))
        },
    }
    lines = [
        f"leader:   {view.leader or '(none)'}",
        f"standbys: {', '.join(view.standbys) or '(none)'}",
        f"buckets:  {layout.get('bucket_count', '?')} ({layout.get('slot_count', '?')} slots "
        f"on {layout.get('state_partitions', '?')} state partitions)",
    ]
    if progress is None:
        lines.append("last batch: (none yet)")
    else:
        lines.append(
            f"last batch: {progress.get('batch_id')} by {progress.get('leader')}, "
            f"{(now - int(progress.get('at_ms', now))) / 1000:.1f} s ago, "
            f"{progress.get('watermarks', 0)} watermarks, {progress.get('rejected', 0)} rejected"
        )
    if delta_error:
        lines.append(f"watermarks: none readable under {delta_root} ({delta_error})")
    for stream in sorted(set(lags) | set(laggards)):
        lag = lags.get(stream)
        if lag is None:
            lines.append(f"  {stream:<40} no watermark yet")
        else:
            lines.append(
                f"  {stream:<40} seq {lag['seq']:<8} lag {lag['lag_ms'] / 1000:>9.1f} s  "
                f"emitted {lag['age_ms'] / 1000:.1f} s ago"
            )
        lines += [f"    held back by {describe_laggard(r, now)}" for r in laggards.get(stream, [])]
    emit(args, data, lines)
    return 0
