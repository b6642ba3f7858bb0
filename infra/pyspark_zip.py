"""Compiled bytecode inside Spark's ``pyspark.zip``, so its Python workers start fast.

    python -m tidemark.infra.pyspark_zip          # the installed pyspark's zip (make setup)
    python -m tidemark.infra.pyspark_zip ZIP ...  # given archives (another Spark's on a machine)

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on every Python worker's path,
ahead of the installed pyspark, and Python never writes bytecode caches into a zip: a
new worker compiles every pyspark module it imports, each time it starts. The
driver-side worker a ``transformWithStateInPandas`` query starts must connect back to
the JVM within Spark's fixed ten seconds, which a loaded machine then misses, failing
the query's start. This adds each module's bytecode beside its source in the archive
(PEP 552 unchecked hash-based ``.pyc``, which ``zipimport`` loads without looking at
the source). A Python of another version finds the wrong magic number and compiles the
source, as before. Rewriting is idempotent and atomic (a new file renamed over the old
one, so a worker reading the old archive keeps reading it).
"""

from __future__ import annotations

import importlib.util
import logging
import marshal
import os
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

_UNCHECKED_HASH_FLAGS = 0b01
"""PEP 552 flags: hash-based, not checked against the source."""


def installed_zip() -> Path:
    """The ``pyspark.zip`` of the pyspark this interpreter imports."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("pyspark is not installed in this Python")
    return Path(spec.origin).parent / "python" / "lib" / "pyspark.zip"


def _pyc(source: bytes, archive: Path, name: str) -> bytes:
    code = compile(source, f"{archive}{os.sep}{name}", "exec", dont_inherit=True)
    flags = _UNCHECKED_HASH_FLAGS.to_bytes(4, "little")
    return (
        importlib.util.MAGIC_NUMBER
        + flags
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


def is_compiled(archive: Path) -> bool:
    """Whether ``archive`` holds this Python's bytecode for every module in it."""
    with zipfile.ZipFile(archive) as zf:
        names = set(zf.namelist())
        sources = [n for n in names if n.endswith(".py")]
        if not all(n + "c" in names for n in sources):
            return False
        first = min(sources, default=None)
        return first is None or zf.read(first + "c")[:4] == importlib.util.MAGIC_NUMBER


def compile_zip(archive: Path) -> int:
    """Add (or renew) each ``.py``'s ``.pyc`` in ``archive``; the number compiled, 0 when
    it already held this Python's bytecode. A module that does not compile keeps only its
    source (Python reports the error when it is imported, as without this)."""
    if is_compiled(archive):
        return 0
    compiled = 0
    fd, tmp = tempfile.mkstemp(prefix=".pyspark-", suffix=".zip", dir=archive.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(archive) as src, zipfile.ZipFile(tmp, "w") as out:
            for info in src.infolist():
                if info.filename.endswith(".pyc"):
                    continue  # renewed below from its source
                data = src.read(info)
                out.writestr(info, data)
                if not info.filename.endswith(".py"):
                    continue
                try:
                    pyc = _pyc(data, archive, info.filename)
                except (SyntaxError, ValueError) as exc:
                    log.warning("%s: %s kept as source only: %s", archive, info.filename, exc)
                    continue
                entry = zipfile.ZipInfo(info.filename + "c", info.date_time)
                entry.compress_type = zipfile.ZIP_DEFLATED
                entry.external_attr = info.external_attr
                out.writestr(entry, pyc)
                compiled += 1
        os.chmod(tmp, archive.stat().st_mode & 0o777)
        os.replace(tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return compiled


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    for archive in [Path(a) for a in args] or [installed_zip()]:
        count = compile_zip(archive)
        if count:
            log.info("setup: compiled %d modules into %s", count, archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
