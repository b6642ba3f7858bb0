"""``tidemark controller ...``: the controller's verbs.

    tidemark controller buckets --format json

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


VERBS: list[Callable[[Any], None]] = [register_buckets, register_run]
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
