"""The client half of :mod:`tidemark.python_zygote`: run ``python -m MODULE ...`` in a fork
of the warm interpreter, or, when none answers, exec this machine's Python as usual.

    zygote_client.py SOCKET PYTHON -m MODULE [ARG ...]

Spark runs it (through the launcher script that :mod:`tidemark.python_zygote` writes) as
its Python executable. It is started with ``python -S -I`` and imports only the
standard library, so that it starts in a few milliseconds. It hands the zygote its
standard streams, arguments, environment and working directory, waits for the
forked child's exit status and exits with it; when it is killed, the zygote kills
the child (it sees the connection close).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

HEADER = struct.Struct("!I")
"""A request's length (then that many bytes of JSON); a reply is one signed int."""
STATUS = struct.Struct("!i")


def request(argv: list[str]) -> bytes:
    body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    return HEADER.pack(len(body)) + body


def read_exactly(conn: socket.socket, size: int, have: bytes = b"") -> bytes:
    """``have`` and what follows it on ``conn``, up to ``size`` bytes; shorter when the
    other end closed first."""
    while len(have) < size:
        chunk = conn.recv(size - len(have))
        if not chunk:
            break
        have += chunk
    return have


def run(sock_path: str, argv: list[str]) -> int | None:
    """The child's exit status, or ``None`` when no zygote took the request."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(sock_path)
        payload = request(argv)
        sent = socket.send_fds(conn, [payload[:65536]], [0, 1, 2])
        conn.sendall(payload[sent:])
    except OSError:
        return None
    reply = read_exactly(conn, STATUS.size)
    if len(reply) < STATUS.size:  # the zygote died: the child's fate is unknown
        return 1
    return int(STATUS.unpack(reply)[0])


def main() -> None:
    sock_path, python, *argv = sys.argv[1:]
    status = run(sock_path, argv)
    if status is None:
        os.execv(python, [python, *argv])
    sys.exit(status)


if __name__ == "__main__":
    main()
