"""``tidemark serve``: the time service (JSON API, /metrics, dashboard) on uvicorn.

    tidemark serve --port 8790
    export TIDEMARK_TIME_SERVICE=http://127.0.0.1:8790   # read/seek/ReaderGroup ask it first

Services come from ``TIDEMARK_KAFKA_BOOTSTRAP`` / ``TIDEMARK_ZK_CONNECT`` /
``TIDEMARK_DELTA_ROOT`` / ``TIDEMARK_POSTGRES_DSN`` (timeline counts),
else from ``tidemark up``. ``tidemark/service/app.py`` lists the routes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any

from tidemark.cli.control_plane import control_plane
from tidemark.cli.output import add_verb
from tidemark.cli.read import lake
from tidemark.cli.times import add_duration_flag
from tidemark.controller.naming import ClusterSettings
from tidemark.environment import SERVE_TOKEN
from tidemark.infra.services import KAFKA, ZOOKEEPER, noted_process, resolve_services
from tidemark.service.access import ServeAccess, check_listen, read_token

DEFAULT_PORT = 8790


def register(sub: Any) -> None:
    serve = add_verb(
        sub,
        "serve",
        cmd_serve,
        "the time service: JSON API, /metrics and a dashboard",
        formatted=False,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    add_duration_flag(serve, "--refresh", "how often indexes are brought up to date", default=500)
    serve.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="serve HTTPS with this certificate (PEM)"
    )
    serve.add_argument("--tls-key", type=Path, metavar="FILE", help="the certificate's key (PEM)")
    serve.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help=f"require this bearer token on every route but /healthz and /readyz "
        f"(or {SERVE_TOKEN}; never on the command line)",
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="listen beyond loopback without TLS or a token (refused otherwise)",
    )
    serve.add_argument(
        "--bucket-count",
        type=int,
        default=None,
        help="the controller's bucket count (for the dashboard's bucket owners)",
    )


def serve_access(args: argparse.Namespace) -> ServeAccess:
    """The TLS files and token the options and ``TIDEMARK_SERVE_TOKEN`` give."""
    token = os.environ.get(SERVE_TOKEN, "").strip() or None
    if args.token_file is not None:
        token = read_token(args.token_file)
    return ServeAccess(token, args.tls_cert, args.tls_key, args.insecure)


def cmd_serve(args: argparse.Namespace) -> int:
    # starlette and uvicorn (the serve extra): only this verb loads them
    from tidemark.service.server import serve_forever
    from tidemark.service.state import TimeService  # kazoo, confluent_kafka: as above

    access = serve_access(args)
    check_listen(args.host, access)  # before any service is asked
    settings = ClusterSettings()
    if args.bucket_count:
        settings = dataclasses.replace(settings, bucket_count=args.bucket_count)
    found = resolve_services(KAFKA, ZOOKEEPER)  # PostgreSQL too where known (timeline counts)
    assert found.kafka_bootstrap is not None
    with noted_process("server", f"{args.host}:{args.port}"), control_plane(settings) as cp:
        service = TimeService(
            cp.store,
            cp.client,
            lake(),
            bootstrap_servers=found.kafka_bootstrap,
            cluster=settings,
            postgres_dsn=found.postgres_dsn,
            refresh_ms=args.refresh_ms,
        )
        scheme = "https" if access.tls else "http"
        print(f"tidemark serve: dashboard on {scheme}://{args.host}:{args.port}/", flush=True)
        service.start()
        try:
            serve_forever(service, args.host, args.port, access)
        finally:
            service.close()
    return 0
