"""`make bench`: start local services once, run every benchmark module, print figures.

Each module ``tests/bench/bench_*.py`` has ``run(services: BenchServices) -> list[str]``
or one of the narrower signatures its docstring names;
``python -m tests.bench bench_controller`` runs one module,
``python -m tests.bench bench_controller:idle,capacity`` some parts of one (a
module whose ``run`` takes ``parts``); it prints its own
baseline, measured in the same process against the same services, and the
ratio. These are measurements, not tests: nothing here fails on a number.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import tests.bench as bench_pkg

LONG = frozenset({"bench_soak"})
"""Modules run only when named (``make soak``: ``python -m tests.bench bench_soak``)."""


@dataclass
class BenchServices:
    work_dir: Path
    bootstrap: str
    zk_connect: str
    postgres_dsn: str | None = None


def _start(stack: ExitStack, work: Path) -> BenchServices:
    from infra.environment import Environment
    from infra.kafka import KafkaCluster
    from infra.zookeeper import ZooKeeperServer

    env = Environment.from_env()
    bootstrap = (
        env.kafka_bootstrap
        or stack.enter_context(
            KafkaCluster(work / "kafka", env=env, heap_mb=1024)
        ).bootstrap_servers
    )
    zk = env.zk_connect or stack.enter_context(ZooKeeperServer(work / "zk", env=env)).connect_string
    dsn = env.postgres_dsn
    if dsn is None:
        try:
            from infra.postgres import PostgresServer

            dsn = stack.enter_context(PostgresServer(work / "postgres", durable=False)).dsn
        except ImportError:
            dsn = None
    return BenchServices(work, bootstrap, zk, dsn)


def _call(run: object, services: BenchServices, parts: list[str] | None = None) -> list[str]:
    assert callable(run)
    params = list(inspect.signature(run).parameters)
    if parts and "parts" not in params:
        raise SystemExit(f"{getattr(run, '__module__', run)} has no parts to select")
    by_name = {
        "parts": parts,
        "services": services,
        "bootstrap": services.bootstrap,
        "zk_connect": services.zk_connect,
        "dsn": services.postgres_dsn,
        "work_dir": services.work_dir,
    }
    result = run(*(by_name[p] for p in params))
    return list(result)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING)
    wanted: dict[str, list[str] | None] = {}
    for arg in argv:
        name, _, parts = arg.partition(":")
        wanted[name] = parts.split(",") if parts else None
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench_pkg.__path__) if m.name.startswith("bench_")
    )
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as tmp, ExitStack() as stack:
        services = _start(stack, Path(tmp))
        for name in names:
            if (wanted and name not in wanted) or (not wanted and name in LONG):
                continue
            module = importlib.import_module(f"tests.bench.{name}")
            print(f"== {name}", flush=True)
            started = time.perf_counter()
            for line in _call(module.run, services, wanted.get(name)):
                print(f"   {line}", flush=True)
            print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
