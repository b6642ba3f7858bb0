"""What a streaming query wrote to a Delta table, and what it had consumed when it did.

    commits = table_commits("/lake/orders_enriched", after=41)   # versions 42 ... latest
    query = StreamingCheckpoint("/chk/orders_enriched")
    query.query_id()                  # the id the Delta sink names its commits by
    query.consumed(17)                # {"tidemark.shop.orders": {0: 812, 1: 790}}

Two logs, read as files (a local file system): the table's Delta log, one JSON commit
per version (``_delta_log/<version>.json``) whose ``txn`` action names the writer and
its batch -- the Delta streaming sink writes ``txn(appId = query id, version = batch
id)``, a ``foreachBatch`` writer with ``txnAppId``/``txnVersion`` its own -- and
whose ``add``/``remove`` actions say whether the version changed data; and a Structured
Streaming checkpoint, whose ``metadata`` holds the query id and ``offsets/<batch>``
the end offsets of each batch per source (for Kafka: topic -> partition -> next
offset). A version's commit that log clean-up has removed, or a batch's offsets that
the checkpoint has purged, reads as unknown (``None``), never guessed.

A writer that uses neither names its batch and what it consumed in the commit's
``commitInfo.userMetadata`` instead (:func:`consumed_metadata`, written by
:func:`tidemark.pipelines.reading.tracking.recording_consumed`): read back as a
``txn`` of that writer, with the consumed offsets in the commit itself.

Watching costs one ``stat`` per table while nothing commits: :func:`next_commit`
checks for the next version's file only.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.schemas.tables import on_object_store

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet")


def local_path(uri: str, what: str) -> str:
    """``uri`` as a local path (``file://`` stripped); a clear error for an object store."""
    if on_object_store(uri):
        raise DeltaUnavailableError(
            f"{what} {uri} is on an object store; tracking reads tables and checkpoints "
            "on a local or mounted file system (give its path)"
        )
    return os.path.abspath(uri.removeprefix("file://"))


@dataclass(frozen=True)
class Commit:
    """One table version as its commit tells it (``readable`` False: the commit file is
    gone, so nothing is known of it)."""

    version: int
    operation: str | None = None
    txns: Mapping[str, int] = field(default_factory=dict)
    """Writer id (``appId``) -> its batch (``txn.version``) committed in this version."""
    data_change: bool = False
    """Whether an ``add`` or ``remove`` changed data (OPTIMIZE's do not)."""
    readable: bool = True
    recorded: Mapping[str, Mapping[str, Mapping[int, int]]] = field(default_factory=dict)
    """Writer id -> the offsets its batch had consumed (topic -> partition -> next
    offset), when the commit records them (:func:`consumed_metadata`)."""


METADATA_KEY = "tidemark"
"""The key of a commit's ``userMetadata`` JSON object that records a writer's batch."""


def consumed_metadata(writer: str, batch: int, consumed: Mapping[str, Mapping[int, int]]) -> str:
    """The ``userMetadata`` of a commit made by ``writer``'s batch ``batch``, which had
    consumed ``consumed`` (topic -> partition -> next offset)."""
    offsets = {t: {str(p): o for p, o in sorted(c.items())} for t, c in sorted(consumed.items())}
    record = {"writer": writer, "batch": batch, "consumed": offsets}
    return json.dumps({METADATA_KEY: record}, sort_keys=True)


def recorded_batch(user_metadata: object) -> tuple[str, int, dict[str, dict[int, int]]] | None:
    """(writer, batch, consumed) from a commit's ``userMetadata``; ``None`` when it records
    none (any other text, or a record that is not whole: logged, never guessed)."""
    if not isinstance(user_metadata, str) or METADATA_KEY not in user_metadata:
        return None
    try:
        record = json.loads(user_metadata)[METADATA_KEY]
        writer, batch = record["writer"], record["batch"]
        if not isinstance(writer, str) or type(batch) is not int or batch < 0:
            raise ValueError("writer must be text, batch a whole number >= 0")
        consumed = {
            str(t): {int(p): max(int(o), 0) for p, o in c.items()}
            for t, c in record["consumed"].items()
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("a commit's userMetadata names no whole batch (%r): ignored", exc)
        return None
    return writer, batch, consumed


def latest_version(table: str) -> int | None:
    """The table's latest version from its log's names (``None``: no Delta table there)."""
    log_dir = os.path.join(local_path(table, "table"), "_delta_log")
    try:
        names = os.listdir(log_dir)
    except OSError:
        return None
    versions = [int(m[1]) for n in names if (m := _COMMIT.fullmatch(n) or _CHECKPOINT.fullmatch(n))]
    return max(versions, default=None)


def next_commit(table: str, version: int) -> bool:
    """Whether version ``version + 1`` has been committed (one ``stat``)."""
    path = os.path.join(local_path(table, "table"), "_delta_log", f"{version + 1:020d}.json")
    return os.path.exists(path)


def table_commits(table: str, after: int | None, upto: int | None = None) -> list[Commit]:
    """Versions ``after + 1`` (``None``: 0) through ``upto`` (``None``: the latest), in order."""
    last = latest_version(table) if upto is None else upto
    if last is None:
        return []
    log_dir = os.path.join(local_path(table, "table"), "_delta_log")
    first = 0 if after is None else after + 1
    return [_commit(log_dir, v) for v in range(first, last + 1)]


def _commit(log_dir: str, version: int) -> Commit:
    try:
        with open(os.path.join(log_dir, f"{version:020d}.json"), encoding="utf-8") as f:
            actions = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return Commit(version, readable=False)
    except (OSError, ValueError) as exc:
        log.warning("version %d of %s is not readable: %r", version, log_dir, exc)
        return Commit(version, readable=False)
    txns: dict[str, int] = {}
    recorded: dict[str, Mapping[str, Mapping[int, int]]] = {}
    operation, changed = None, False
    for action in actions:
        if (txn := action.get("txn")) is not None:
            txns[str(txn.get("appId"))] = int(txn.get("version"))
        elif (info := action.get("commitInfo")) is not None:
            operation = info.get("operation")
            if (found := recorded_batch(info.get("userMetadata"))) is not None:
                writer, batch, consumed = found
                txns.setdefault(writer, batch)
                recorded[writer] = consumed
        else:
            file_action = action.get("add") or action.get("remove")
            if file_action is not None and file_action.get("dataChange", True):
                changed = True
    return Commit(version, operation, txns, changed, recorded=recorded)


class StreamingCheckpoint:
    """A Structured Streaming query's checkpoint directory, read as files."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.path = local_path(uri, "checkpoint")

    def exists(self) -> bool:
        return os.path.isfile(os.path.join(self.path, "metadata"))

    def query_id(self) -> str | None:
        """The query's id (``metadata``'s ``id``); ``None`` when the checkpoint is gone."""
        try:
            with open(os.path.join(self.path, "metadata"), encoding="utf-8") as f:
                found = json.loads(f.readline()).get("id")
        except (OSError, ValueError):
            return None
        return None if found is None else str(found)

    def batches(self) -> list[int]:
        """The batch ids whose offsets the checkpoint still holds, in order."""
        try:
            names = os.listdir(os.path.join(self.path, "offsets"))
        except OSError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def consumed(self, batch: int) -> dict[str, dict[int, int]] | None:
        """Batch ``batch``'s end offsets per Kafka topic and partition, over all of the
        query's Kafka sources; ``None`` when the checkpoint no longer holds them."""
        try:
            with open(os.path.join(self.path, "offsets", str(batch)), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        out: dict[str, dict[int, int]] = {}
        for line in lines[2:]:  # (the log's version, then the batch's metadata)
            for topic, partitions in _kafka_offsets(line).items():
                mine = out.setdefault(topic, {})
                for partition, offset in partitions.items():
                    mine[partition] = max(offset, mine.get(partition, offset))
        return out

    def topics(self) -> set[str]:
        """The Kafka topics the query reads: from its latest batch's offsets, else from
        its sources' starting offsets (``sources/<n>/0``)."""
        batches = self.batches()
        if batches:
            return set(self.consumed(batches[-1]) or {})
        found: set[str] = set()
        try:
            sources = os.listdir(os.path.join(self.path, "sources"))
        except OSError:
            return found
        for source in sources:
            try:
                with open(os.path.join(self.path, "sources", source, "0"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            for line in text.splitlines():
                found |= set(_kafka_offsets(line.lstrip("\x00")))
        return found


def _kafka_offsets(line: str) -> dict[str, dict[int, int]]:
    """One source's offsets as a Kafka source writes them (``{topic: {partition:
    offset}}``); empty for another kind of source or a source with none yet (``-``)."""
    try:
        value: Any = json.loads(line)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            return {}  # not a Kafka source's offsets
        try:
            # (a negative offset is Spark's "earliest"/"latest": nothing known consumed)
            out[str(topic)] = {int(p): max(int(o), 0) for p, o in partitions.items()}
        except (TypeError, ValueError):
            return {}
    return out


__all__ = [
    "METADATA_KEY",
    "Commit",
    "StreamingCheckpoint",
    "consumed_metadata",
    "latest_version",
    "local_path",
    "next_commit",
    "recorded_batch",
    "table_commits",
]
