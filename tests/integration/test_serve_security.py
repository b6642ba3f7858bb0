"""`tidemark serve` beyond loopback: HTTPS with a private CA made for the test, a bearer
token on every route but the probes, refusal without them, and SIGTERM answering the
requests in flight before exiting 0. Real ZooKeeper, Kafka and Delta tables."""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tidemark.infra.ports import free_port

pytestmark = pytest.mark.integration


def _private_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed: (ca, cert, key)."""
    ca_key, ca, key, csr, cert = (
        folder / n for n in ("ca.key", "ca.pem", "s.key", "s.csr", "s.pem")
    )
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out",
            str(ca), "-days", "1", "-subj", "/CN=tidemark test CA")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
            "-subj", "/CN=127.0.0.1")  # fmt: skip
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key


def _get(port: int, path: str, context: ssl.SSLContext, token: str | None = None):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=90)
    try:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        conn.request("GET", path, headers=headers)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        conn.close()


def _serve(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli.main", "serve", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_serve_refuses_to_leave_loopback_without_tls_and_a_token(tmp_path: Path) -> None:
    env = {**os.environ, "TIDEMARK_HOME": str(tmp_path)}
    proc = _serve(env, "--host", "0.0.0.0", "--port", str(free_port()))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (out, err)
    assert "refuses to listen on 0.0.0.0 without TLS and a token" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_serve_over_tls_with_a_token_answers_only_to_it_and_drains_on_sigterm(
    kafka: str, zookeeper: str, unique: str, tmp_path: Path
) -> None:
    ca, cert, key = _private_ca(tmp_path)
    token = secrets.token_hex(16)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    port = free_port()
    env = dict(
        os.environ,
        TIDEMARK_KAFKA_BOOTSTRAP=kafka,
        TIDEMARK_ZK_CONNECT=f"{zookeeper}/tidemark-test-{unique}",
        TIDEMARK_DELTA_ROOT=str(tmp_path / "delta"),
    )
    stream = f"s{unique}/orders"
    for verb in (["scope", "create", f"s{unique}"], ["stream", "create", stream]):
        made = subprocess.run(
            [sys.executable, "-m", "tidemark.cli.main", *verb], env=env, capture_output=True
        )
        assert made.returncode == 0, made.stderr
    proc = _serve(env, "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key),
                  "--token-file", str(token_file))  # fmt: skip
    context = ssl.create_default_context(cafile=str(ca))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = _get(port, "/healthz", context)
                break
            except (OSError, http.client.HTTPException):
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "tidemark serve did not answer in 60 s"
                time.sleep(0.2)
        assert (status, body) == (200, {"status": "alive"})
        assert _get(port, "/readyz", context) == (200, {"status": "ready"})
        # every other route: the token, or 401
        assert _get(port, "/api/streams", context)[0] == 401
        status, body = _get(port, "/api/streams", context, token="x" * 32)
        assert (status, body["error"]) == (401, "unauthorized")
        status, streams = _get(port, "/api/streams", context, token=token)
        assert status == 200 and [s["stream"] for s in streams] == [stream]
        assert _get(port, "/", context)[0] == 401
        # HTTPS only, and only with a certificate the client trusts
        plain = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        with pytest.raises((OSError, http.client.HTTPException)):
            plain.request("GET", "/healthz")
            plain.getresponse().read()
        plain.close()
        with pytest.raises(ssl.SSLError):
            _get(port, "/healthz", ssl.create_default_context())
        # the token is in no argv
        assert token.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()

        # SIGTERM while a long poll is held: it is answered, then the process exits 0
        polled: dict[str, object] = {}

        def poll() -> None:
            path = f"/api/streams/{stream}/wait?t={2**50}&timeout=60s"
            try:
                polled["answer"] = _get(port, path, context, token=token)
            except Exception as exc:  # reported below
                polled["error"] = exc
            polled["at"] = time.monotonic()

        waiter = threading.Thread(target=poll, daemon=True)
        waiter.start()
        time.sleep(0.5)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        waiter.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert "answer" in polled, polled
    assert float(polled["at"]) - signalled < 10  # not held for its 60 s
    assert token not in out + err and "Traceback" not in err
    assert f"dashboard on https://127.0.0.1:{port}/" in out
