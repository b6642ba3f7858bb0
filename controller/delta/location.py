"""Where Delta tables live, and the process's one shared object per place.

    lake = TableLocation.of("s3://lake/tidemark", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    marks = lake.table("marks")      # TableLocation("s3://lake/tidemark/marks", same options)
    source = shared("source", marks, lambda: DeltaSource(marks))   # one per process

A :class:`TableLocation` is a URI (a local path, ``file://``, ``s3://``, ...) and the
delta-rs storage options that reach it; it is a value (frozen, hashable), so it keys
the process-wide caches of :func:`shared` -- the open tables that many streams' tails
follow, the shared lookup indexes -- one place for all of them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from tidemark.controller.delta.exceptions import DeltaUnavailableError
from tidemark.environment import DELTA_ROOT
from tidemark.schemas.tables import on_object_store, table_path

T = TypeVar("T")

DELTA_ROOT_ENV = DELTA_ROOT
"""The variable ``tidemark.environment`` names; read here only as a fallback, since
``controller`` does not import ``infra``."""


def resolve_delta_root(delta_root: str | os.PathLike[str] | None) -> str:
    """``delta_root`` if given, else ``$TIDEMARK_DELTA_ROOT``; a clear error when neither."""
    if delta_root is not None and str(delta_root):
        return str(delta_root)
    found = os.environ.get(DELTA_ROOT_ENV, "").strip()
    if found:
        return found
    raise DeltaUnavailableError(
        f"no delta root: pass delta_root=... or set {DELTA_ROOT_ENV} to where the "
        "controller writes its tables"
    )


@dataclass(frozen=True)
class TableLocation:
    """A Delta table's (or the tables' root's) URI and delta-rs storage options."""

    uri: str
    options: tuple[tuple[str, str], ...] = ()
    """The storage options, sorted by name (a tuple: the location is hashable)."""

    @classmethod
    def of(
        cls,
        root: Root = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> TableLocation:
        """``root`` as a location (a location is returned as it is); no root: the
        ``$TIDEMARK_DELTA_ROOT`` variable's."""
        if isinstance(root, TableLocation):
            return root
        options = tuple(sorted((storage_options or {}).items()))
        return cls(resolve_delta_root(root), options)

    @property
    def storage_options(self) -> dict[str, str]:
        """The options as a mapping (empty: the ``AWS_*`` variables and the like, as
        delta-rs reads them)."""
        return dict(self.options)

    @property
    def delta_rs_options(self) -> dict[str, str] | None:
        """The options as delta-rs takes them (``None`` when there are none)."""
        return dict(self.options) or None

    @property
    def on_object_store(self) -> bool:
        """Whether the location is on an object store, not a local path."""
        return on_object_store(self.uri)

    def table(self, name: str) -> TableLocation:
        """The table ``name`` (one of the layout's) under this root."""
        return TableLocation(table_path(self.uri, name), self.options)


_SHARED: dict[tuple[str, TableLocation, tuple[Any, ...]], object] = {}
_SHARED_LOCK = threading.Lock()


def shared(kind: str, location: TableLocation, make: Callable[[], T], *key: Any) -> T:
    """The process's one object of ``kind`` for ``location`` (and ``key``, when the
    object depends on more), made by ``make`` on first ask. The process-wide caches of
    the Delta tables (open tables, lookup indexes) are all kept here."""
    found_key = (kind, location, key)
    with _SHARED_LOCK:
        found = _SHARED.get(found_key)
        if found is None:
            found = _SHARED[found_key] = make()
        return cast(T, found)


Root = TableLocation | str | os.PathLike[str] | None
"""Where the tables are: a :class:`TableLocation`, or a delta root (a path or URI) with
``storage_options`` beside it (``None``: ``$TIDEMARK_DELTA_ROOT``)."""


__all__ = ["DELTA_ROOT_ENV", "Root", "TableLocation", "resolve_delta_root", "shared"]
