"""tidemark.jobs.worker_setup: invalidating import caches re-reads a zip archive only when it
changed."""

from __future__ import annotations

import importlib
import os
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

from tidemark.jobs.worker_setup import keep_zip_directories


def _zip(path: Path, source: str) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("tm_zipped_module.py", source)


def test_an_unchanged_archive_is_not_read_again_a_changed_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "lib.zip"
    _zip(archive, "VALUE = 1\n")
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.delitem(sys.modules, "tm_zipped_module", raising=False)
    assert importlib.import_module("tm_zipped_module").VALUE == 1

    reads: list[str] = []
    real = zipimport._read_directory  # type: ignore[attr-defined]

    def counting(archive_path: str) -> object:
        reads.append(archive_path)
        return real(archive_path)

    monkeypatch.setattr(zipimport, "_read_directory", counting)
    monkeypatch.setattr(
        zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches
    )
    keep_zip_directories()
    keep_zip_directories()  # idempotent: one wrapper, not two

    def invalidate_and_look() -> None:
        # Python 3.11 re-reads the directory in invalidate_caches, 3.13 at the next lookup
        importlib.invalidate_caches()
        sys.path_importer_cache[str(archive)].find_spec("tm_no_such_module")

    invalidate_and_look()  # first time: read (nothing recorded yet)
    invalidate_and_look()
    invalidate_and_look()
    assert reads.count(str(archive)) == 1

    _zip(archive, "VALUE = 22\nMORE = 3\n")  # other size: a changed archive
    os.utime(archive, ns=(1, 1))
    invalidate_and_look()
    assert reads.count(str(archive)) == 2
    del sys.modules["tm_zipped_module"]
    assert importlib.import_module("tm_zipped_module").VALUE == 22
