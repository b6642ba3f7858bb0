"""``tidemark stream create|adopt|describe|update|scale|truncate|seal|delete|release|list|observe``.

    tidemark stream create shop/orders --segments 2
    tidemark stream scale shop/orders --seal 0 --ranges 0:0.25,0.25:0.5
    tidemark stream describe shop/orders --format json

Services come from ``TIDEMARK_KAFKA_BOOTSTRAP`` / ``TIDEMARK_ZK_CONNECT``
(a connect string may end in a chroot), else from ``tidemark up``
(:mod:`tidemark.cli.control_plane`); the configuration options are
:mod:`tidemark.cli.stream_options`'s.
"""

from __future__ import annotations

import argparse
from typing import Any

from tidemark.cli.adopt import register_verbs
from tidemark.cli.control_plane import control_plane, delete_verb
from tidemark.cli.cuts import CUT_HELP, format_cut, parse_cut
from tidemark.cli.observe import register_observe
from tidemark.cli.output import add_verb, emit, emit_list, text_value
from tidemark.cli.stream_options import add_config_options, config_from_args, summary
from tidemark.controller.config import StreamConfiguration
from tidemark.controller.metadata import metadata_to_dict
from tidemark.controller.model import KeyRange
from tidemark.controller.navigation import head_segments
from tidemark.errors import ConfigurationError

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


# --- verbs -------------------------------------------------------------------------------


def register(sub: Any) -> None:
    group = sub.add_parser("stream", help="create, scale, truncate, seal, delete streams")
    verbs = group.add_subparsers(dest="stream_command", metavar="VERB", required=True)

    def verb(name: str, help_text: str, func: Any, stream_arg: bool = True) -> Any:
        return add_verb(verbs, name, func, help_text, on="stream" if stream_arg else None)

    add_config_options(verb("create", "create a stream (its topic, epoch 0)", cmd_create))
    verb("describe", "epochs, segments, offsets, state, configuration", cmd_describe)
    add_config_options(verb("update", "change a stream's configuration", cmd_update))
    scale = verb("scale", "seal adjacent segments and replace them", cmd_scale)
    scale.add_argument("--seal", required=True, help="segment ids to seal, e.g. 0,1")
    scale.add_argument("--ranges", required=True, help="new key ranges, e.g. 0:0.25,0.25:0.5")
    truncate = verb("truncate", "delete everything before a stream cut", cmd_truncate)
    truncate.add_argument("--cut", required=True, help=CUT_HELP)
    verb("seal", "seal a stream: no more writes", cmd_seal)
    verb("delete", "delete a sealed stream (topic and metadata)", cmd_delete)
    listing = verb("list", "list streams", cmd_list, stream_arg=False)
    listing.add_argument("scope", nargs="?", help="only this scope")
    register_verbs(verb, add_config_options)
    register_observe(verb)


def cmd_create(args: argparse.Namespace) -> int:
    config = config_from_args(args, StreamConfiguration())
    with control_plane() as cp:
        meta = cp.manager.create(args.stream, config)
    emit(args, metadata_to_dict(meta), summary(meta))
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        current = cp.manager.describe(args.stream)
        meta = cp.manager.update(args.stream, config_from_args(args, current.config))
    emit(args, metadata_to_dict(meta), summary(meta))
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
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
    lines = summary(meta)
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
            + f" {text_value(row['start_offset'])}..{text_value(row['end_offset'])}".ljust(14)
            + f" {row['sealed_size'] if row['sealed'] else '-'}"
        )
    if meta.truncation:
        lines.append(f"truncated at {format_cut(meta.truncation)}")
    emit(args, payload, lines)
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    sealed, ranges = parse_ids(args.seal), parse_ranges(args.ranges)
    with control_plane() as cp:
        meta = cp.manager.scale(args.stream, sealed, ranges)
    emit(args, metadata_to_dict(meta), summary(meta))
    return 0


def cmd_truncate(args: argparse.Namespace) -> int:
    cut = parse_cut(args.cut)
    with control_plane() as cp:
        meta = cp.manager.truncate(args.stream, cut)
    emit(args, metadata_to_dict(meta), [*summary(meta), f"truncated at {format_cut(cut)}"])
    return 0


def cmd_seal(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        meta = cp.manager.seal(args.stream)
    emit(args, metadata_to_dict(meta), summary(meta))
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    return delete_verb(args, args.stream, "", lambda manager, stream: manager.delete(stream))


def cmd_list(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        names = cp.manager.list(args.scope)
        rows = [{"stream": n, "state": str(cp.store.get_stream(n).state)} for n in names]
    emit_list(args, rows, lambda r: f"{r['stream']:<40} {r['state']}", "no streams")
    return 0
