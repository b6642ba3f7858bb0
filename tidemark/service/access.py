"""Who may reach the time service: where it listens, TLS, and a bearer token.

    access = ServeAccess(token=token, tls_cert=cert, tls_key=key)
    check_listen("10.0.0.5", access)          # refused without TLS and a token
    app = BearerToken(app, access.token)      # 401 without the token (but /healthz, /readyz)

On a loopback address the service may run as it always did (no TLS, no
token). Anywhere else it answers only over TLS and only to a bearer token,
unless ``insecure`` says the operator knows better. The token never comes
from the command line (an argv is readable by every local user): it is read
from a file or from ``TIDEMARK_SERVE_TOKEN``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.errors import ConfigurationError

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Answered without a token: a load balancer's and an orchestrator's probes."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class ServeAccess:
    """The service's TLS files and bearer token (``None``: none), and ``insecure``: the
    operator's word that a non-loopback address may go without them."""

    token: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigurationError("TLS needs both --tls-cert and --tls-key")
        for path in (self.tls_cert, self.tls_key):
            if path is not None and not path.is_file():
                raise ConfigurationError(f"TLS file {path} does not exist")
        if self.token is not None and len(self.token) < 16:
            raise ConfigurationError("the serve token is shorter than 16 characters")

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def __repr__(self) -> str:  # never the token itself
        token = "set" if self.token else None
        return f"ServeAccess(token={token}, tls={self.tls}, insecure={self.insecure})"


def read_token(path: Path) -> str:
    """The token in ``path`` (its first line, stripped); a clear error otherwise."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"cannot read the token file {path}: {exc.strerror}") from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ConfigurationError(f"the token file {path} is empty")
    return token


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost`` counts)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


def check_listen(host: str, access: ServeAccess) -> None:
    """Refuse to listen on ``host`` beyond loopback without TLS and a token (unless
    ``insecure``), naming what is missing."""
    if is_loopback(host) or access.insecure:
        return
    missing = [what for what, ok in (("TLS", access.tls), ("a token", access.token)) if not ok]
    if missing:
        raise ConfigurationError(
            f"serve refuses to listen on {host} without {' and '.join(missing)}: give "
            "--tls-cert/--tls-key and --token-file (or TIDEMARK_SERVE_TOKEN), listen on "
            "127.0.0.1, or pass --insecure"
        )


class BearerToken:
    """ASGI middleware: every HTTP request but :data:`OPEN_PATHS` needs
    ``Authorization: Bearer <token>``; else 401 with a JSON error."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        reason = "no bearer token" if not given else "a wrong bearer token"
        body = json.dumps({"error": "unauthorized", "detail": f"{reason}"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="tidemark"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


__all__ = ["OPEN_PATHS", "BearerToken", "ServeAccess", "check_listen", "is_loopback", "read_token"]
