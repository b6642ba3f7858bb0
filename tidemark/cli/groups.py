"""``tidemark group list | describe | checkpoint | checkpoints | reset``: reader groups.

tidemark group list --format json                     # every group with its lag
tidemark group describe billing                       # lag in records and in time, readers
tidemark group checkpoint billing before-migration   # waits for online readers
tidemark group checkpoints billing --format json
tidemark group reset billing --checkpoint before-migration   # no reader online
tidemark group reset billing --cut '{"0": 120, "1": 98}'
"""

from __future__ import annotations

import argparse
from typing import Any

from tidemark.cli.control_plane import control_plane
from tidemark.cli.cuts import CUT_HELP, format_cut, parse_cut
from tidemark.cli.output import add_verb, emit, emit_rows, text_value
from tidemark.cli.read import reader_group
from tidemark.cli.times import add_duration_flag
from tidemark.controller.metadata import cut_to_json
from tidemark.controller.timestamps import wall_clock_ms


def register(sub: Any) -> None:
    group = sub.add_parser("group", help="reader groups: lag, checkpoints and reset")
    verbs = group.add_subparsers(dest="group_command", metavar="VERB", required=True)

    add_verb(verbs, "list", cmd_list, "every reader group with its lag (records, time)")
    add_verb(
        verbs,
        "describe",
        cmd_describe,
        "a group's lag in records and time, its readers",
        on="group",
    )

    take = add_verb(
        verbs,
        "checkpoint",
        cmd_checkpoint,
        "take a named checkpoint of a group (online readers must be reading)",
        on="group",
    )
    take.add_argument("name", help="checkpoint name")
    add_duration_flag(take, "--timeout", "wait this long for the readers", default=30_000)

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
    target.add_argument("--cut", help=f"a stream cut: {CUT_HELP}")


def _lag_row(lag: Any, now_ms: int) -> dict[str, Any]:
    return {
        "group": lag.group,
        "stream": lag.stream,
        "lag_records": lag.records,
        "time": lag.time,
        "lag_ms": lag.time_lag_ms(now_ms),
        "readers": lag.readers,
    }


def _lags(names: list[str]) -> list[dict[str, Any]]:
    # confluent_kafka: off tidemark --help (the parser imports every verb module)
    from tidemark.controller.kafka.admin import StreamTopics
    from tidemark.pipelines.reading.lag import group_lag
    from tidemark.pipelines.reading.registry import registry_for

    rows = []
    with control_plane() as cp:
        topics = StreamTopics(cp.kafka)
        if not names:
            names = registry_for(cp.store).names()
        for name in names:
            with reader_group(name, cp) as group:
                rows.append(_lag_row(group_lag(group, topics), wall_clock_ms()))
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    emit_rows(args, _lags([]))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    (row,) = _lags([args.group])
    lag_ms = (
        "unknown (no watermark at its position yet)"
        if row["lag_ms"] is None
        else (f"{row['lag_ms']} ms behind the wall clock (time {row['time']})")
    )
    emit(
        args,
        row,
        [
            f"group {row['group']} on stream {row['stream']}: {row['readers']} reader(s) online",
            f"  lag: {row['lag_records']} record(s); in time: {lag_ms}",
        ],
    )
    return 0


def _describe(checkpoint: Any) -> dict[str, Any]:
    out: dict[str, Any] = checkpoint.to_dict()
    return out


def cmd_checkpoint(args: argparse.Namespace) -> int:
    with reader_group(args.group) as group:
        taken = group.initiate_checkpoint(args.name, timeout_ms=args.timeout_ms).result()
    emit(
        args,
        _describe(taken),
        f"checkpoint {taken.name} of {taken.group}: cut {format_cut(taken.stream_cut)}, "
        f"window [{text_value(taken.lower)}, {text_value(taken.upper)}]",
    )
    return 0


def cmd_checkpoints(args: argparse.Namespace) -> int:
    with reader_group(args.group) as group:
        found = group.checkpoints()
    emit_rows(args, [_describe(c) for c in found])
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    target: Any = args.checkpoint if args.checkpoint is not None else parse_cut(args.cut)
    with reader_group(args.group) as group:
        cut = group.reset_to(target)
    emit(
        args,
        {"group": args.group, "stream_cut": cut_to_json(cut)},
        f"group {args.group} reset to {format_cut(cut)}",
    )
    return 0
