"""A process that read the Delta tables exits cleanly: no SIGABRT at interpreter exit.

A pyarrow dataset scan over deltalake's tables (``DeltaTable.to_pyarrow_dataset``:
deltalake's Python file system, ``pre_buffer``) reads on pyarrow's I/O threads into
buffers that are Python objects. An I/O thread that drops the last of them after the
scan returned takes the GIL; once the interpreter is finalizing, that ends the thread
(``pthread_exit``) through C++ frames that may not be unwound: ``std::terminate``,
"terminate called without an active exception", exit -6 after the output was printed
(now and then, more often on busy cores). The reads run on the
calling thread instead (``tidemark.controller.delta.tables.scan_files``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tidemark.controller.delta.tables import append_watermarks, read_table, read_watermarks
from tidemark.controller.model import Watermark
from tidemark.schemas.tables import MARKS

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("controller", "pipelines", "tidemark", "jobs")


def test_no_table_is_read_through_a_pyarrow_dataset_scan() -> None:
    scans = re.compile(r"\.to_pyarrow_(dataset|table)\(")
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for top in SOURCES
        for path in sorted((REPO / top).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if scans.search(line)
    ]
    assert found == []


def _lake(root: Path) -> None:
    previous = None
    for seq in range(3):
        at = 1000 + seq * 100
        mark = Watermark("s/s", at, at, {0: seq, 1: seq}, seq)
        append_watermarks(root, [mark], previous_upper_time_max=previous)
        previous = at


FORKS = """
import os, sys
from tidemark.controller.delta.tables import read_table, read_watermarks
root, count = sys.argv[1], int(sys.argv[2])
import pyarrow.parquet, deltalake  # once: each child only reads and exits
running, died = set(), 0
for _ in range(count):
    if len(running) >= 4:
        pid, status = os.wait()
        running.discard(pid)
        died += status != 0
    pid = os.fork()
    if pid == 0:  # what `tidemark watermarks` reads, then the interpreter's exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        assert len(read_watermarks(root, "s/s", since=0)) == 3
        assert len(read_table(root, "marks", "s/s")) == 3
        sys.exit(0)
    running.add(pid)
for pid in running:
    died += os.waitpid(pid, 0)[1] != 0
print("died", died)
"""


@pytest.mark.slow
def test_processes_that_read_the_tables_exit_cleanly(tmp_path: Path) -> None:
    """Fresh exits after the ``watermarks`` verb's reads (forked after the imports, so
    each costs only its reads and its exit): before the reads ran on the calling thread,
    an exit aborted now and then; this catches a return of that sometimes, the source
    check above every time."""
    _lake(tmp_path)
    assert [w.seq for w in read_watermarks(tmp_path, "s/s", since=1100)] == [1, 2]
    assert sorted(r["seq"] for r in read_table(tmp_path, MARKS, "s/s")) == [0, 1, 2]
    done = subprocess.run(
        [sys.executable, "-c", FORKS, str(tmp_path), "20"],
        env=dict(os.environ, PYTHONPATH=os.getcwd()),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["died", "0"]
