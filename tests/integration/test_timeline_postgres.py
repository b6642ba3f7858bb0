"""The local PostgreSQL of infra/: it starts, answers, stops, and dies with its owner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from tidemark.infra.process import pid_alive

OWNER = """
import os, sys
from pathlib import Path
from tidemark.infra.postgres import PostgresServer
server = PostgresServer(Path(sys.argv[1]), durable=False).start()
print(server.process.pid, server.dsn, flush=True)
sys.stdin.readline()
os._exit(0)  # die without stopping anything
"""


@pytest.fixture
def scratch():
    root = Path(tempfile.mkdtemp(prefix="tidemark-pg-test-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_postgres_dies_with_its_owner(scratch):
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(scratch)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert owner.stdout is not None and owner.stdin is not None
    pid_text, dsn = owner.stdout.readline().split()
    pid = int(pid_text)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        if os.geteuid() == 0:  # PostgreSQL refuses root: it runs as another user
            assert conn.execute("SELECT current_setting('data_directory')").fetchone()
    assert pid_alive(pid)
    owner.stdin.write("\n")
    owner.stdin.flush()
    owner.wait(10)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid), "the postmaster outlived its owner"
    assert "database system is ready" in (scratch / "postgres.log").read_text()


def test_postgres_restarts_on_its_data(scratch):
    from tidemark.infra.postgres import PostgresServer

    with (
        PostgresServer(scratch, durable=False) as first,
        psycopg.connect(first.dsn, autocommit=True) as conn,
    ):
        conn.execute("CREATE TABLE kept (x INT)")
        conn.execute("INSERT INTO kept VALUES (7)")
    assert not first.process.alive()
    with (
        PostgresServer(scratch, durable=False) as second,
        psycopg.connect(second.dsn) as conn,
    ):
        assert conn.execute("SELECT x FROM kept").fetchone() == (7,)
