"""The timeline on a PostgreSQL that takes TLS connections only, with a certificate of a
CA made for the run: the DSN asks ``sslmode=verify-full`` (the CA, and the server's name),
and a connection in clear or without the CA is refused."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import psycopg
import pytest

from tidemark.cli import timeline as cli
from tidemark.environment import POSTGRES_DSN
from tidemark.infra.postgres import PostgresServer
from tidemark.infra.tls import PrivateCA


def timeline(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    parser = argparse.ArgumentParser(prog="tidemark")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["timeline", *argv, "--format", "json"])
    assert args.func(args) == 0
    answer: dict[str, object] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return answer


def test_the_timeline_over_verified_tls_and_nothing_in_clear(
    tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ca = PrivateCA.create(tmp_path / "tls")
    # not under pytest's directory: as root, the server runs as a user that must reach it
    with (
        tempfile.TemporaryDirectory(prefix="tidemark-postgres-") as root,
        PostgresServer(Path(root), durable=False, tls=ca) as server,
    ):
        assert "sslmode=verify-full" in server.dsn
        with psycopg.connect(server.dsn) as conn:
            used = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            assert used.fetchone() == (True,)
        clear = server.dsn.replace("sslmode=verify-full", "sslmode=disable")
        with pytest.raises(psycopg.OperationalError, match="no encryption"):
            psycopg.connect(clear, connect_timeout=5)
        untrusting = server.dsn.split("?")[0] + "?sslmode=verify-full&sslrootcert=system"
        with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
            psycopg.connect(untrusting, connect_timeout=5)

        monkeypatch.setenv(POSTGRES_DSN, server.dsn)
        name = f"tls-{unique}"
        assert timeline(capsys, "create", name, "--buckets", "1")["buckets"] == 1
        put = timeline(capsys, "put", name, "--group", "g", "--body", "hi", "--in-ms", "0")
        assert put["new"]
        assert timeline(capsys, "count", name)["available"] == 1
