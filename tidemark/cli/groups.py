"""``tidemark group checkpoint | checkpoints | reset``: reader-group checkpoints.

tidemark group checkpoint billing before-migration   # waits for online readers
tidemark group checkpoints billing --format json
tidemark group reset billing --checkpoint before-migration   # no reader online
tidemark group reset billing --cut '{"0": 120, "1": 98}'
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from controller.metadata import cut_from_json, cut_to_json
from tidemark.cli.output import add_verb, emit, emit_rows
from tidemark.cli.read import reader_group
from tidemark.errors import ConfigurationError


def register(sub: Any) -> None:
    group = sub.add_parser("group", help="reader groups: checkpoints and reset")
    verbs = group.add_subparsers(dest="group_command", metavar="VERB", required=True)

    take = add_verb(
        verbs,
        "checkpoint",
        cmd_checkpoint,
        "take a named checkpoint of a group (online readers must be reading)",
        on="group",
    )
    take.add_argument("name", help="checkpoint name")
    take.add_argument(
        "--timeout-ms", type=int, default=30_000, help="wait this long for the readers"
    )

    add_verb(verbs, "checkpoints", cmd_checkpoints, "list a group's checkpoints", on="group")

    reset = add_verb(
        verbs,
        "reset",
        cmd_reset,
        "move a group to a checkpoint or a stream cut (no reader online)",
        on="group",
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--checkpoint", help="a checkpoint's name")
    target.add_argument("--cut", help='a stream cut as JSON: {"segment id": offset, ...}')


def _describe(checkpoint: Any) -> dict[str, Any]:
    out: dict[str, Any] = checkpoint.to_dict()
    return out


def cmd_checkpoint(args: argparse.Namespace) -> int:
    with reader_group(args.group) as group:
        taken = group.initiate_checkpoint(args.name, timeout_ms=args.timeout_ms).result()
    emit(
        args,
        _describe(taken),
        f"checkpoint {taken.name} of {taken.group}: cut {dict(taken.stream_cut)}, "
        f"window [{taken.lower}, {taken.upper}]",
    )
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    with reader_group(args.group) as group:
        found = group.checkpoints()
    emit_rows(args, [_describe(c) for c in found])
    return 0


def _parse_cut(text: str) -> dict[int, int]:
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not an object")
        return cut_from_json(raw)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(
            f'--cut must be a JSON object {{"segment id": offset}}, got {text!r} ({exc})'
        ) from exc


def cmd_reset(args: argparse.Namespace) -> int:
    target: Any = args.checkpoint if args.checkpoint is not None else _parse_cut(args.cut)
    with reader_group(args.group) as group:
        cut = group.reset_to(target)
    emit(
        args,
        {"group": args.group, "stream_cut": cut_to_json(cut)},
        f"group {args.group} reset to {cut}",
    )
    return 0
