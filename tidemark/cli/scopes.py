"""``tidemark scope create|list|delete``: scopes hold streams.

    tidemark scope create shop
    tidemark scope list --format json
    tidemark scope delete shop        # refused while it holds streams

A stream is created only in an existing scope (``tidemark stream create``
names the missing scope and this verb). Creating a scope that exists is not
an error (the output says it existed).
"""

from __future__ import annotations

import argparse
from typing import Any

from tidemark.cli.control_plane import control_plane, delete_verb
from tidemark.cli.output import add_verb, emit, emit_list


def register(sub: Any) -> None:
    group = sub.add_parser("scope", help="create, list, delete scopes (streams live in a scope)")
    verbs = group.add_subparsers(dest="scope_command", metavar="VERB", required=True)

    add_verb(verbs, "create", cmd_create, "create a scope", on="scope")
    add_verb(verbs, "delete", cmd_delete, "delete an empty scope", on="scope")
    add_verb(verbs, "list", cmd_list, "list scopes and how many streams each holds")


def cmd_create(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        created = cp.manager.create_scope(args.scope)
    text = f"created scope {args.scope}" if created else f"scope {args.scope} exists already"
    emit(args, {"scope": args.scope, "created": created}, text)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    return delete_verb(
        args, args.scope, "scope ", lambda manager, scope: manager.delete_scope(scope)
    )


def cmd_list(args: argparse.Namespace) -> int:
    with control_plane() as cp:
        rows = [{"scope": s, "streams": len(cp.manager.list(s))} for s in cp.manager.list_scopes()]
    emit_list(args, rows, lambda r: f"{r['scope']:<40} {r['streams']} stream(s)", "no scopes")
    return 0
