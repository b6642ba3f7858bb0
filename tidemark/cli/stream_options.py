"""A stream's configuration on the command line (``stream create|update|adopt``), and
the summary those verbs print.

    add_config_options(parser)                       # --segments, --retention, ...
    config = config_from_args(args, StreamConfiguration())
"""

from __future__ import annotations

import argparse

from tidemark.cli.times import add_duration_flag, parse_duration
from tidemark.controller.config import (
    RetentionPolicy,
    RetentionType,
    ScalingPolicy,
    ScalingType,
    StreamConfiguration,
    TimestampingMode,
)
from tidemark.controller.exceptions import InvalidConfigurationError
from tidemark.controller.metadata import StreamMetadata
from tidemark.errors import ConfigurationError


def add_config_options(parser: argparse.ArgumentParser) -> None:
    numbers = {
        "--segments": "(minimum) number of segments",
        "--target-rate": "events or bytes per second per segment",
        "--scale-factor": "how many segments a hot segment splits into",
    }
    retention = {
        "--retention-limit": "how long (by-time: a duration, 7d) or how many bytes (by-size)",
        "--retention-min": "keep at least this much (a duration or bytes; default 0)",
    }
    choices = {
        "--scaling": (ScalingType, "scaling policy: fixed, or by event or byte rate"),
        "--retention": (RetentionType, "none, by time or by size (with --retention-limit)"),
        "--timestamping": (TimestampingMode, "record timestamps from the client or on arrival"),
    }
    for flag, text in numbers.items():
        parser.add_argument(flag, type=int, help=text)
    for flag, text in retention.items():  # parsed with --retention: its unit depends on it
        parser.add_argument(flag, metavar="DURATION|BYTES", help=text)
    for flag, (kind, text) in choices.items():
        parser.add_argument(flag, choices=[t.value for t in kind], help=text)
    parser.add_argument(
        "--uncapped",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let a client timestamp run ahead of the arrival time (no cap)",
    )
    add_duration_flag(
        parser,
        "--aggregation-timeout",
        "drop a lagging writer after this long (default: the controller's)",
    )
    add_duration_flag(
        parser,
        "--first-watermark-delay",
        "wait this long after the first mark before the first watermark",
    )
    parser.add_argument(
        "--refuse-adjustments",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="refuse a record whose timestamp would be capped or raised, instead of adjusting",
    )
    parser.add_argument(
        "--writers",
        metavar="ID,ID|any",
        help="accept marks only from these writer ids (others: unknown_writer); 'any': all",
    )
    parser.add_argument(
        "--max-future",
        "--max-future-ms",
        dest="max_future_ms",
        metavar="DURATION|none",
        help="how far ahead of its arrival a writer mark's time may be (default 1 h); "
        "'none': no bound, for times that are not milliseconds",
    )


def retention_amount(text: str | None, flag: str, kind: RetentionType, base: int) -> int:
    """A retention flag's value: a duration in the one syntax by time (a bare number:
    ms), whole bytes by size; ``base`` when not given."""
    if text is None:
        return base
    if kind is RetentionType.BY_TIME:
        return parse_duration(text, flag)
    try:
        return int(text)
    except ValueError:
        raise InvalidConfigurationError(
            f"{flag} {text!r}: a {kind} retention takes whole bytes (by-time takes a duration)"
        ) from None


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
    limit = retention_amount(args.retention_limit, "--retention-limit", rtype, rp.limit)
    minimum = retention_amount(args.retention_min, "--retention-min", rtype, rp.min_limit)
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
        writers=_writers(getattr(args, "writers", None), base.writers),
    )


def _writers(text: str | None, base: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if text is None:
        return base
    if text.strip().lower() == "any":
        return None
    ids = tuple(w.strip() for w in text.split(",") if w.strip())
    if not ids:
        raise ConfigurationError(f"--writers {text!r}: expected writer ids (a,b,...) or 'any'")
    return ids


def _max_future_ms(text: str | None, base: int | None) -> int | None:
    if text is None:
        return base
    if text.strip().lower() == "none":
        return None
    if text.strip().lstrip("+-").isdigit():  # a number: the configuration checks its sign
        return int(text)
    return parse_duration(text, "--max-future-ms")


def summary(meta: StreamMetadata) -> list[str]:
    """The lines a stream verb prints about the stream it changed."""
    cfg = meta.config
    return [
        f"stream   {meta.name}  (topic {meta.topic})",
        f"state    {meta.state}",
        f"epoch    {meta.current_epoch().number}  segments "
        + " ".join(f"{s.id}{s.key_range}" for s in meta.current_epoch().segments),
        f"config   scaling={cfg.scaling_policy.type}/{cfg.scaling_policy.min_segments} "
        f"retention={cfg.retention_policy.type} timestamping={cfg.timestamping} "
        f"uncapped={_yes_no(cfg.uncapped)} refuse_adjustments={_yes_no(cfg.refuse_adjustments)} "
        f"writers={'any' if cfg.writers is None else ','.join(cfg.writers)}",
    ]


__all__ = ["add_config_options", "config_from_args", "summary"]


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"
