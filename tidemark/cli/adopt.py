"""``tidemark stream adopt|release``: existing topics as streams.

    tidemark stream adopt shop/legacy --topic orders-v1            # Kafka's partitioner
    tidemark stream adopt shop/routed --topic orders-v2 --tidemark-routing
    tidemark stream release shop/legacy                           # the topic stays

Adopting registers the topic's partitions as epoch 0 and touches no record
and no topic setting (``--apply-config`` sets the stream configuration's
topic settings). See ``tidemark.controller.streams.StreamManager.adopt``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from tidemark.cli.control_plane import control_plane
from tidemark.cli.output import emit
from tidemark.cli.stream_options import config_from_args, summary
from tidemark.controller.config import ScalingPolicy, StreamConfiguration
from tidemark.controller.metadata import metadata_to_dict


def register_verbs(verb: Callable[..., Any], config_options: Callable[[Any], None]) -> None:
    """Add ``adopt`` and ``release`` to the ``stream`` group (``verb`` as in its ``register``)."""
    adopt = verb("adopt", "register an existing topic as a stream (no data touched)", cmd_adopt)
    adopt.add_argument("--topic", required=True, help="the existing Kafka topic")
    adopt.add_argument(
        "--tidemark-routing",
        action="store_true",
        help="its producers route keys by the stream's key ranges (allows scaling)",
    )
    adopt.add_argument(
        "--apply-config",
        action="store_true",
        help="also set the stream configuration's topic settings (default: touch none)",
    )
    config_options(adopt)
    verb("release", "unregister an adopted stream; its topic stays as it is", cmd_release)


def _given(args: argparse.Namespace) -> bool:
    names = (
        *("segments", "scaling", "target_rate", "scale_factor", "retention"),
        *("retention_limit", "timestamping", "uncapped", "aggregation_timeout_ms"),
        "refuse_adjustments",
    )
    return any(getattr(args, n, None) is not None for n in names)


def cmd_adopt(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        config = None
        if _given(args):
            partitions = cp.manager.topics.partition_count(args.topic) or 1
            base = StreamConfiguration(scaling_policy=ScalingPolicy.fixed(partitions))
            config = config_from_args(args, base)
        meta = cp.manager.adopt(
            args.stream,
            args.topic,
            tidemark_routing=args.tidemark_routing,
            config=config,
            apply_topic_config=args.apply_config,
        )
    routing = "tidemark key ranges" if args.tidemark_routing else "Kafka's partitioner (no scale)"
    emit(args, metadata_to_dict(meta), [*summary(meta), f"adopted  routing by {routing}"])
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        meta = cp.manager.release(args.stream)
    emit(
        args,
        {"released": args.stream, "topic": meta.topic},
        f"released {args.stream}; topic {meta.topic} left as it is",
    )
    return 0
