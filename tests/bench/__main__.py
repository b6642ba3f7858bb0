"""`make bench`: start local services once, run every benchmark module, print figures.

Each module ``tests/bench/bench_*.py`` has ``run(services: BenchServices) -> list[str]``
or one of the narrower signatures its docstring names;
``python -m tests.bench bench_controller`` runs one module,
``python -m tests.bench bench_controller:idle,capacity`` some parts of one (a
module whose ``run`` takes ``parts``). The services start once; each module
runs in a process of its own. A module prints its own
baseline, measured in the same process against the same services, and the
ratio. These are measurements, not tests: nothing here fails on a number.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import pkgutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import tests.bench as bench_pkg
from tidemark.environment import KAFKA_BOOTSTRAP, POSTGRES_DSN, ZK_CONNECT

LONG = frozenset({"bench_soak"})
"""Modules run only when named (``make soak``: ``python -m tests.bench bench_soak``)."""

WORK = "TIDEMARK_BENCH_WORK"
"""Where a module's process puts its data (under the parent's temporary directory)."""


@dataclass
class BenchServices:
    work_dir: Path
    bootstrap: str
    zk_connect: str
    postgres_dsn: str | None = None


MEMORY_DIR = Path("/dev/shm")
"""Where the benchmarks' own broker keeps its log, when the machine has it (tmpfs)."""


def _broker_dir(stack: ExitStack, work: Path) -> Path:
    """The broker's log directory: in memory when possible.

    Measured on the 2-core machine (bench_controller freshness with a probe asking the
    broker every 50 ms): with the broker's log on the disk that Spark's checkpoints, RocksDB
    and the Delta tables write to, the whole broker stalled 1-1.5 s about once in 30 s
    (a produce and a list-offsets of the probe and the query's own Kafka reads, at the same
    moment; no GC pause in either JVM), and that one micro-batch made the p99. A
    production broker has disks of its own; the benchmarks measure tidemark, not the
    shared disk's flushes."""
    if MEMORY_DIR.is_dir() and os.access(MEMORY_DIR, os.W_OK):
        print(f"(the benchmarks' broker keeps its log in memory, under {MEMORY_DIR})", flush=True)
        return Path(
            stack.enter_context(
                tempfile.TemporaryDirectory(prefix="tidemark-bench-kafka-", dir=MEMORY_DIR)
            )
        )
    return work / "kafka"


def _start(stack: ExitStack, work: Path) -> BenchServices:
    from tidemark.environment import Environment
    from tidemark.infra.kafka import KafkaCluster
    from tidemark.infra.zookeeper import ZooKeeperServer

    env = Environment.from_env()
    bootstrap = env.kafka_bootstrap or (
        stack.enter_context(
            KafkaCluster(_broker_dir(stack, work), env=env, heap_mb=1024)
        ).bootstrap_servers
    )
    zk = env.zk_connect or stack.enter_context(ZooKeeperServer(work / "zk", env=env)).connect_string
    dsn = env.postgres_dsn
    if dsn is None:
        try:
            from tidemark.infra.postgres import PostgresServer

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


def _resources() -> str:
    """Open file descriptors and threads of this process, when /proc tells (leak watch).

    Spark's py4j callback server uses ``select()``, which fails once any
    descriptor of the process is >= 1024: a module that leaks clients would
    stall every later ``foreachBatch``.
    """
    try:
        fds = len(os.listdir("/proc/self/fd"))
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        return ""
    return f"; {fds} open fds, {threads} threads"


def main(argv: list[str]) -> int:
    """Start the services once, then run each selected module in a process of its own.

    One process per module: a module's leftovers (threads, clients, garbage,
    JIT state of a Spark session) never weigh on the next one's figures, and
    a module that dies or hangs is reported without losing the others.
    """
    logging.basicConfig(level=logging.WARNING)
    if argv[:1] == ["--child"]:
        return _child(argv[1])
    wanted: dict[str, str] = {arg.partition(":")[0]: arg for arg in argv}
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench_pkg.__path__) if m.name.startswith("bench_")
    )
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise SystemExit(f"no benchmark module {', '.join(unknown)} (have: {', '.join(names)})")
    failed = []
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as tmp, ExitStack() as stack:
        services = _start(stack, Path(tmp))
        env = dict(os.environ)
        env.update(
            {
                KAFKA_BOOTSTRAP: services.bootstrap,
                ZK_CONNECT: services.zk_connect,
                WORK: tmp,
            }
        )
        if services.postgres_dsn is not None:
            env[POSTGRES_DSN] = services.postgres_dsn
        for name in names:
            if (wanted and name not in wanted) or (not wanted and name in LONG):
                continue
            print(f"== {name}", flush=True)
            started = time.perf_counter()
            rc = subprocess.call(
                [sys.executable, "-m", "tests.bench", "--child", wanted.get(name, name)], env=env
            )
            if rc != 0:
                failed.append(name)
                print(f"   {name} failed (exit {rc})", flush=True)
            print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


def _child(arg: str) -> int:
    """One module, against the services the parent started (named in the environment)."""
    name, _, parts = arg.partition(":")
    module = importlib.import_module(f"tests.bench.{name}")
    with (
        tempfile.TemporaryDirectory(prefix=f"{name}-", dir=os.environ.get(WORK)) as tmp,
        ExitStack() as stack,
    ):
        services = _start(stack, Path(tmp))
        for line in _call(module.run, services, parts.split(",") if parts else None):
            print(f"   {line}", flush=True)
    print(f"   ({_resources().lstrip('; ')})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
