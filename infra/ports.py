"""Free TCP ports on 127.0.0.1."""

from __future__ import annotations

import socket

from tidemark.infra.exceptions import ServiceError
from tidemark.infra.process import wait_for

HOST = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (the kernel picks it, so two runs differ)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports, held together while picked so they never repeat."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((HOST, 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def is_listening(port: int, host: str = HOST) -> bool:
    """Whether something accepts connections on ``port``. A probe of a free port in the
    ephemeral range can connect to itself (TCP simultaneous open: the kernel gave the
    probe that very port as its source); that is nobody listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        if sock.connect_ex((host, port)) != 0:
            return False
        return bool(sock.getsockname() != sock.getpeername())


def ensure_free(port: int, service: str) -> None:
    """Raise a clear error when ``port`` is already taken by something else."""
    if is_listening(port):
        raise ServiceError(
            f"{service}: port {port} on {HOST} is already in use; stop what listens there "
            "or let tidemark pick a free port"
        )


def wait_listening(port: int, timeout_s: float, service: str) -> None:
    if not wait_for(lambda: is_listening(port), timeout_s, 0.1):
        raise ServiceError(f"{service}: nothing listens on {HOST}:{port} after {timeout_s:.0f} s")
