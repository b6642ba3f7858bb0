"""Free TCP ports on 127.0.0.1."""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

from tidemark.infra.exceptions import ServiceError
from tidemark.infra.process import wait_for

HOST = "127.0.0.1"


LOWEST_PORT = 20000
"""Where picked ports start: above the ports services commonly listen on."""

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_lock = threading.Lock()
_random = random.SystemRandom()


def ephemeral_floor() -> int:
    """The lowest port the kernel gives an outgoing connection as its source port."""
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default where the setting cannot be read


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nothing listens on right now; see :func:`free_ports`."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports, none handed out before by this process.

    They are picked at random below the kernel's ephemeral range: a port the kernel
    picked (bind to port 0) comes from the range outgoing connections take their source
    ports from, so between the pick and the service's own bind, or while a stopped
    service restarts on its ports, any client's connection could take it."""
    floor = ephemeral_floor()
    if floor - LOWEST_PORT < 1024:  # no room below the ephemeral range
        return _kernel_ports(count)
    with _lock:
        if len(_handed_out) > (floor - LOWEST_PORT) // 2:
            _handed_out.clear()  # a long-lived process: the oldest picks are long gone
        picked: list[int] = []
        for _ in range(64 * count):
            port = _random.randrange(LOWEST_PORT, floor)
            if port in _handed_out or port in picked or not _bindable(port):
                continue
            picked.append(port)
            if len(picked) == count:
                _handed_out.update(picked)
                return picked
    raise ServiceError(
        f"found {len(picked)} of {count} free ports on {HOST} between {LOWEST_PORT} "
        f"and {floor}; stop what listens there"
    )


def unused_address() -> str:
    """``host:port`` where nothing listens: a service out of reach, for its error."""
    return f"{HOST}:{free_port()}"


def _kernel_ports(count: int) -> list[int]:
    """``count`` distinct ports the kernel picks, held together while picked."""
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
