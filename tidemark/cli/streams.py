"""``tidemark stream create|adopt|describe|update|scale|truncate|seal|delete|release|list``.

    tidemark stream create shop/orders --segments 2
    tidemark stream scale shop/orders --seal 0 --ranges 0:0.25,0.25:0.5
    tidemark stream describe shop/orders --format json

Services come from ``TIDEMARK_KAFKA_BOOTSTRAP`` / ``TIDEMARK_ZK_CONNECT``
(a connect string may end in a chroot), else from ``tidemark up``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from controller.config import (
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    StreamConfiguration,
    TimestampingMode,
)
from controller.metadata import StreamMetadata, metadata_to_dict
from controller.model import KeyRange
from controller.naming import ClusterSettings
from infra.services import KAFKA, ZOOKEEPER, resolve_services
from tidemark.cli.output import add_format_option, emit, emit_rows
from tidemark.environment import Environment
from tidemark.errors import ConfigurationError


@dataclass(frozen=True)
class ControlPlane:
    """What a control-plane verb talks to."""

    client: Any  # a started KazooClient
    store: Any  # controller.zk_store.ZooKeeperStore
    settings: ClusterSettings
    kafka: str

    @functools.cached_property
    def manager(self) -> Any:
        """The stream manager (controller.streams.StreamManager), made on first use:
        verbs that only read metadata do not import it."""
        from controller.streams import StreamManager

        return StreamManager(self.store, self.kafka, self.settings)


def service_addresses(env: Environment | None = None) -> tuple[str, str]:
    """(Kafka bootstrap, ZooKeeper connect): the environment's, else ``tidemark up``'s."""
    found = resolve_services(KAFKA, ZOOKEEPER, env=env)
    assert found.kafka_bootstrap is not None and found.zk_connect is not None
    return found.kafka_bootstrap, found.zk_connect


@contextlib.contextmanager
def control_plane(settings: ClusterSettings | None = None) -> Iterator[ControlPlane]:
    from kazoo.client import KazooClient

    from controller.zk_store import ZooKeeperStore

    settings = settings or ClusterSettings()
    kafka, zk = service_addresses()
    client = KazooClient(hosts=zk)
    client.start(timeout=15)
    try:
        store = ZooKeeperStore(client, settings.zk_root)
        yield ControlPlane(client, store, settings, kafka)
    finally:
        client.stop()
        client.close()


# --- parsing helpers ---------------------------------------------------------------------


def parse_ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigurationError(f"--seal {text!r}: expected segment ids like 0,1") from None


def parse_ranges(text: str) -> list[KeyRange]:
    """``"0:0.5,0.5:1"`` -> key ranges."""
    out = []
    for part in text.split(","):
        low, sep, high = part.partition(":")
        try:
            if not sep:
                raise ValueError(part)
            out.append(KeyRange(float(low), float(high)))
        except ValueError:
            raise ConfigurationError(
                f"--ranges {text!r}: expected low:high pairs like 0:0.5,0.5:1"
            ) from None
    return out


def parse_cut(text: str) -> dict[int, int]:
    """``"4294967297=10,1=0"`` -> {segment id: offset}."""
    cut = {}
    for part in text.split(","):
        seg, sep, off = part.partition("=")
        try:
            if not sep:
                raise ValueError(part)
            cut[int(seg)] = int(off)
        except ValueError:
            raise ConfigurationError(
                f"--cut {text!r}: expected segment=offset pairs like 0=10,1=0"
            ) from None
    return cut


def _config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--segments", type=int, help="(minimum) number of segments")
    parser.add_argument("--scaling", choices=[t.value for t in ScalingType])
    parser.add_argument("--target-rate", type=int, help="events or bytes per second per segment")
    parser.add_argument("--scale-factor", type=int)
    parser.add_argument("--retention", choices=[t.value for t in RetentionType])
    parser.add_argument("--retention-limit", type=int, help="ms (by-time) or bytes (by-size)")
    parser.add_argument(
        "--retention-min", type=int, help="keep at least this much (ms or bytes; default 0)"
    )
    parser.add_argument("--timestamping", choices=[m.value for m in TimestampingMode])
    parser.add_argument("--uncapped", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument(
        "--aggregation-timeout-ms",
        type=int,
        help="drop a lagging writer after this long (default: the controller's)",
    )
    parser.add_argument(
        "--first-watermark-delay-ms",
        type=int,
        help="wait this long after the first mark before the first watermark",
    )
    parser.add_argument(
        "--refuse-adjustments",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="refuse a record whose timestamp would be capped or raised, instead of adjusting",
    )
    parser.add_argument(
        "--max-future-ms",
        help="how far ahead of its arrival a writer mark's time may be (default 1 h); "
        "'none': no bound, for times that are not milliseconds",
    )


def config_from_args(args: argparse.Namespace, base: StreamConfiguration) -> StreamConfiguration:
    """``base`` with the options given on the command line."""
    sp, rp = base.scaling_policy, base.retention_policy
    scaling = ScalingPolicy(
        type=ScalingType(args.scaling) if args.scaling else sp.type,
        target_rate=sp.target_rate if args.target_rate is None else args.target_rate,
        scale_factor=sp.scale_factor if args.scale_factor is None else args.scale_factor,
        min_segments=sp.min_segments if args.segments is None else args.segments,
    )
    rtype = RetentionType(args.retention) if args.retention else rp.type
    limit = args.retention_limit if args.retention_limit is not None else rp.limit
    minimum = args.retention_min if args.retention_min is not None else rp.min_limit
    none = rtype is RetentionType.NONE
    retention = RetentionPolicy(rtype, 0 if none else limit, 0 if none else minimum)
    return StreamConfiguration(
        scaling_policy=scaling,
        retention_policy=retention,
        timestamp_aggregation_timeout_ms=(
            base.timestamp_aggregation_timeout_ms
            if args.aggregation_timeout_ms is None
            else args.aggregation_timeout_ms
        ),
        timestamping=(
            TimestampingMode(args.timestamping) if args.timestamping else base.timestamping
        ),
        uncapped=base.uncapped if args.uncapped is None else args.uncapped,
        first_watermark_delay_ms=(
            base.first_watermark_delay_ms
            if args.first_watermark_delay_ms is None
            else args.first_watermark_delay_ms
        ),
        refuse_adjustments=(
            base.refuse_adjustments
            if getattr(args, "refuse_adjustments", None) is None
            else args.refuse_adjustments
        ),
        max_future_ms=_max_future_ms(args.max_future_ms, base.max_future_ms),
    )


def _max_future_ms(text: str | None, base: int | None) -> int | None:
    if text is None:
        return base
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(
            f"--max-future-ms {text!r}: expected milliseconds or 'none'"
        ) from None


# --- verbs -------------------------------------------------------------------------------


def register(sub: Any) -> None:
    group = sub.add_parser("stream", help="create, scale, truncate, seal, delete streams")
    verbs = group.add_subparsers(dest="stream_command", metavar="VERB", required=True)

    def verb(name: str, help_text: str, func: Any, stream_arg: bool = True) -> Any:
        parser = verbs.add_parser(name, help=help_text)
        if stream_arg:
            parser.add_argument("stream", help="scope/name")
        add_format_option(parser)
        parser.set_defaults(func=func)
        return parser

    _config_options(verb("create", "create a stream (its topic, epoch 0)", cmd_create))
    verb("describe", "epochs, segments, offsets, state, configuration", cmd_describe)
    _config_options(verb("update", "change a stream's configuration", cmd_update))
    scale = verb("scale", "seal adjacent segments and replace them", cmd_scale)
    scale.add_argument("--seal", required=True, help="segment ids to seal, e.g. 0,1")
    scale.add_argument("--ranges", required=True, help="new key ranges, e.g. 0:0.25,0.25:0.5")
    truncate = verb("truncate", "delete everything before a stream cut", cmd_truncate)
    truncate.add_argument("--cut", required=True, help="segment=offset pairs, e.g. 0=10,1=4")
    verb("seal", "seal a stream: no more writes", cmd_seal)
    verb("delete", "delete a sealed stream (topic and metadata)", cmd_delete)
    listing = verb("list", "list streams", cmd_list, stream_arg=False)
    listing.add_argument("scope", nargs="?", help="only this scope")
    from tidemark.cli.adopt import register_verbs

    register_verbs(verb, _config_options)


def _summary(meta: StreamMetadata) -> list[str]:
    cfg = meta.config
    return [
        f"stream   {meta.name}  (topic {meta.topic})",
        f"state    {meta.state}",
        f"epoch    {meta.current_epoch().number}  segments "
        + " ".join(f"{s.id}{s.key_range}" for s in meta.current_epoch().segments),
        f"config   scaling={cfg.scaling_policy.type}/{cfg.scaling_policy.min_segments} "
        f"retention={cfg.retention_policy.type} timestamping={cfg.timestamping} "
        f"uncapped={cfg.uncapped} refuse_adjustments={cfg.refuse_adjustments}",
    ]


def cmd_create(args: argparse.Namespace) -> int:
    config = config_from_args(args, StreamConfiguration())
    with control_plane() as cp:
        meta = cp.manager.create(args.stream, config)
    emit(args, metadata_to_dict(meta), _summary(meta))
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        current = cp.manager.describe(args.stream)
        meta = cp.manager.update(args.stream, config_from_args(args, current.config))
    emit(args, metadata_to_dict(meta), _summary(meta))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    from controller.navigation import head_segments

    with control_plane() as cp:
        meta = cp.manager.describe(args.stream)
        offsets = cp.manager.segment_offsets(args.stream)
    head = {s.id for s in head_segments(meta)}
    segments = []
    for seg_id, seg in sorted(meta.segments().items()):
        start, end = offsets.get(seg_id, (None, None))
        segments.append(
            {
                "id": seg_id,
                "epoch": seg.epoch,
                "number": seg.number,
                "partition": seg.number,
                "low": seg.key_range.low,
                "high": seg.key_range.high,
                "sealed": meta.is_sealed(seg_id),
                "sealed_size": meta.sealed_sizes.get(seg_id),
                "start_offset": start,
                "end_offset": end,
                "head": seg_id in head,
            }
        )
    payload = metadata_to_dict(meta)
    payload["segments"] = segments
    payload["bucket"] = cp.manager.bucket_of(args.stream)
    lines = _summary(meta)
    lines.append(f"bucket   {payload['bucket']}")
    for epoch in meta.epochs:
        lines.append(
            f"epoch {epoch.number} (from {epoch.created_at_ms} ms): "
            + " ".join(str(s.id) for s in epoch.segments)
        )
    lines.append("segment      partition  range          offsets       sealed size")
    for row in segments:
        lines.append(
            f"{row['id']:<12} {row['partition']:<10} [{row['low']:g}, {row['high']:g})".ljust(40)
            + f" {row['start_offset']}..{row['end_offset']}".ljust(14)
            + f" {row['sealed_size'] if row['sealed'] else '-'}"
        )
    if meta.truncation:
        lines.append(f"truncated at {dict(meta.truncation)}")
    emit(args, payload, lines)
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    sealed, ranges = parse_ids(args.seal), parse_ranges(args.ranges)
    with control_plane() as cp:
        meta = cp.manager.scale(args.stream, sealed, ranges)
    emit(args, metadata_to_dict(meta), _summary(meta))
    return 0


def cmd_truncate(args: argparse.Namespace) -> int:
    cut = parse_cut(args.cut)
    with control_plane() as cp:
        meta = cp.manager.truncate(args.stream, cut)
    emit(args, metadata_to_dict(meta), [*_summary(meta), f"truncated at {cut}"])
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        meta = cp.manager.seal(args.stream)
    emit(args, metadata_to_dict(meta), _summary(meta))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        cp.manager.delete(args.stream)
    emit(args, {"deleted": args.stream}, f"deleted {args.stream}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        names = cp.manager.list(args.scope)
        rows = [{"stream": n, "state": str(cp.store.get_stream(n).state)} for n in names]
    if args.format == "json":
        emit_rows(args, rows)
    else:
        emit(args, rows, [f"{r['stream']:<40} {r['state']}" for r in rows] or ["no streams"])
    return 0
