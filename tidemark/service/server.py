"""Running the time service on uvicorn: in the foreground, or in a thread (tests, demo).

with RunningService(service, port=0) as running:   # port 0: a free one
    print(running.url)                              # http://127.0.0.1:PORT
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from types import FrameType, TracebackType

import uvicorn

from tidemark.errors import TidemarkError
from tidemark.service.access import ServeAccess, check_listen
from tidemark.service.app import build_app
from tidemark.service.state import TimeService

log = logging.getLogger(__name__)


class ServiceStartError(TidemarkError):
    """The HTTP server did not start (port taken, or it failed); see its log."""


class _Server(uvicorn.Server):
    """uvicorn's server that, as it shuts down, first answers the waits it holds
    (``GET .../wait``: long polls) instead of waiting for their timeouts."""

    def __init__(
        self, service: TimeService, sock: socket.socket, access: ServeAccess | None = None
    ) -> None:
        super().__init__(_config(service, sock, access or ServeAccess()))
        self._waits = service.waits
        self.stopped_by: int | None = None
        """The signal that stopped the server (uvicorn's handler), if one did."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.stopped_by = sig
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:
            # uvicorn raises a captured signal again once it has shut down, and SIGTERM's
            # default action would end the process as killed: a drained stop exits 0
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list) and sig in captured:
                captured.remove(sig)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._waits.close()
        await super().shutdown(sockets)


def _config(service: TimeService, sock: socket.socket, access: ServeAccess) -> uvicorn.Config:
    return uvicorn.Config(
        build_app(service, access.token),
        ssl_certfile=None if access.tls_cert is None else str(access.tls_cert),
        ssl_keyfile=None if access.tls_key is None else str(access.tls_key),
        log_config=None,  # our logging setup, not uvicorn's
        access_log=False,
        lifespan="off",
        # httptools' parser and uvloop (both pinned in the serve extra) when installed, else
        # h11 and asyncio: uvicorn's "auto". The C parser takes ~0.1 ms off every request.
        http="auto",
        loop="auto",
        timeout_keep_alive=60,
        timeout_graceful_shutdown=5,
        fd=None,
        host=sock.getsockname()[0],
        port=sock.getsockname()[1],
    )


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: uvicorn writes a response's head and body
    # separately, and with Nagle's algorithm the body waits for the client's delayed
    # ACK of the head -- 40 ms per request on a kept-alive connection.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServiceStartError(f"cannot listen on {host}:{port}: {exc}") from exc
    return sock


def serve_forever(
    service: TimeService, host: str, port: int, access: ServeAccess | None = None
) -> None:
    """Serve until interrupted (uvicorn handles SIGINT/SIGTERM: the requests in flight
    are answered, long polls at once, then it returns). Ctrl-C ends in
    ``KeyboardInterrupt`` (the CLI's exit status 130) every time: uvicorn re-raises the
    signal inside asyncio's runner, whose own SIGINT handler only cancels a task that may
    already be finishing, so the process sometimes ended as if nothing had happened."""
    access = access or ServeAccess()
    check_listen(host, access)
    sock = _bind(host, port)
    server = _Server(service, sock, access)
    server.run(sockets=[sock])
    if server.stopped_by == signal.SIGINT:
        raise KeyboardInterrupt


class RunningService:
    """The service started on a background thread; stops (and closes ``service``) on exit."""

    def __init__(
        self,
        service: TimeService,
        host: str = "127.0.0.1",
        port: int = 0,
        access: ServeAccess | None = None,
    ) -> None:
        self.service = service
        access = access or ServeAccess()
        check_listen(host, access)
        self._sock = _bind(host, port)
        host, port = self._sock.getsockname()[:2]
        self.url = f"{'https' if access.tls else 'http'}://{host}:{port}"
        self._server = _Server(service, self._sock, access)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> RunningService:
        self.service.start()
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise ServiceStartError(f"the time service on {self.url} did not start")
            time.sleep(0.02)
        log.info("time service at %s", self.url)
        return self

    def close(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._sock.close()
        self.service.close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["RunningService", "ServiceStartError", "serve_forever"]
