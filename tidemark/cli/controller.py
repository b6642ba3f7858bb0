"""``tidemark controller ...``: the controller's verbs.

    tidemark controller buckets --format json
    tidemark controller policies --policy-interval-ms 10000 --delta-root ~/.tidemark/delta

Each verb is a ``register_<verb>(verbs)`` function listed in :data:`VERBS`;
add a verb (``run``) by writing its function and appending it there.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from controller.naming import ClusterSettings
from tidemark.cli.output import add_format_option, emit


def register_buckets(verbs: Any) -> None:
    from jobs.cli_args import positive_int

    parser = verbs.add_parser("buckets", help="show which controller instance owns each bucket")
    parser.add_argument(
        "--bucket-count", type=positive_int, default=None, help="buckets of the cluster (default 8)"
    )
    add_format_option(parser)
    parser.set_defaults(func=cmd_buckets)


def register_run(verbs: Any) -> None:
    from jobs.cli_args import add_controller_arguments

    parser = verbs.add_parser(
        "run",
        help="run a watermark controller instance (a Spark streaming query per owned bucket)",
    )
    add_controller_arguments(parser)
    parser.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from jobs.controller_job import run_local

    return run_local(args)


def register_policies(verbs: Any) -> None:
    parser = verbs.add_parser(
        "policies",
        help="run the stream policy loop alone (retention, auto-scaling; no Spark)",
        description="Acts on every stream's retention and scaling policy. Only one loop "
        "acts per cluster: loops contend in a ZooKeeper election, the others wait.",
    )
    parser.add_argument("--instance", default=None, help="this loop's name in the election")
    parser.add_argument("--policy-interval-ms", type=int, default=10_000)
    parser.add_argument("--rate-window-ms", type=int, default=60_000)
    parser.add_argument("--scale-cooldown-ms", type=int, default=120_000)
    parser.add_argument(
        "--delta-root", default=None, help="the controller's tables (default $TIDEMARK_DELTA_ROOT)"
    )
    parser.add_argument(
        "--once", action="store_true", help="one pass now, print what it did, no election"
    )
    add_format_option(parser)
    parser.set_defaults(func=cmd_policies)


def cmd_policies(args: argparse.Namespace) -> int:
    import os
    import socket

    from tidemark.cli.output import emit_rows
    from tidemark.cli.streams import control_plane
    from tidemark.policy_loop import PolicyLoop, PolicySettings, run_when_elected

    settings = PolicySettings(
        interval_ms=args.policy_interval_ms,
        rate_window_ms=args.rate_window_ms,
        cooldown_ms=args.scale_cooldown_ms,
        delta_root=args.delta_root,
    )
    with control_plane() as cp:
        loop = PolicyLoop(cp.manager, settings)
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


VERBS: list[Callable[[Any], None]] = [register_buckets, register_run, register_policies]
"""The ``controller`` group's verbs; each adds its subparser."""


def register(sub: Any) -> None:
    group = sub.add_parser("controller", help="the watermark controller and its buckets")
    verbs = group.add_subparsers(dest="controller_command", metavar="VERB", required=True)
    for add_verb in VERBS:
        add_verb(verbs)


def cmd_buckets(args: argparse.Namespace) -> int:
    from controller.buckets import bucket_ownership
    from tidemark.cli.streams import control_plane

    defaults = ClusterSettings()
    settings = ClusterSettings(
        marks_topic=defaults.marks_topic,
        bucket_count=defaults.bucket_count if args.bucket_count is None else args.bucket_count,
        zk_root=defaults.zk_root,
    )
    with control_plane(settings) as cp:
        view = bucket_ownership(cp.client, settings.bucket_count, settings.zk_root)
    emit(
        args,
        {
            "members": list(view.members),
            "buckets": {str(b): owner for b, owner in sorted(view.owners.items())},
        },
        [f"members: {', '.join(view.members) or '(none)'}"]
        + [f"bucket {b:<4} {owner or '(unowned)'}" for b, owner in sorted(view.owners.items())],
    )
    return 0
