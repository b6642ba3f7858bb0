"""Local services for a user: ``tidemark up`` / ``down`` / ``status``.

    services = LocalServices.from_env()
    services.up()        # ZooKeeper, one Kafka broker, PostgreSQL, in the background
    services.status()    # what runs, on which ports
    services.down()

State (pids, ports, data, logs) lives under ``TIDEMARK_HOME`` (default
``~/.tidemark``). Services started here are not tied to the command that
started them; ``down`` stops them. Long-running tidemark processes (``controller
run``, ``serve``) note themselves there too (:func:`noted_process`), and ``down``
stops them first, naming any that outlive their stop timeout.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tidemark.environment import KAFKA_BOOTSTRAP, POSTGRES_DSN, ZK_CONNECT, Environment
from tidemark.infra.exceptions import ConfigurationError, MissingToolError, ServiceError
from tidemark.infra.ports import HOST
from tidemark.infra.process import pid_alive, stop_pid, wait_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceRecord:
    """One process ``up`` started and left running: its name, pid, the address clients
    connect to and its log file (kept in ``services.json`` for ``status`` and ``down``)."""

    name: str
    pid: int
    address: str
    log_path: str


@dataclass
class ServicesState:
    """What ``services.json`` under ``TIDEMARK_HOME`` holds: the addresses and processes."""

    kafka_bootstrap: str | None = None
    zk_connect: str | None = None
    postgres_dsn: str | None = None
    services: list[ServiceRecord] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ServicesState:
        raw = json.loads(text)
        raw["services"] = [ServiceRecord(**s) for s in raw.get("services", [])]
        return cls(**raw)


PROCESS_STOP_S = 45.0
"""How long ``down`` waits for a noted process after SIGTERM: a controller's default
stop timeout, and some."""


class LocalServices:
    def __init__(self, env: Environment) -> None:
        self.env = env
        self.home = env.home
        self.state_path = self.home / "services.json"

    @classmethod
    def from_env(cls) -> LocalServices:
        return cls(Environment.from_env())

    def read_state(self) -> ServicesState | None:
        if not self.state_path.exists():
            return None
        return ServicesState.from_json(self.state_path.read_text())

    def running(self) -> ServicesState | None:
        """The recorded state when every recorded process is alive, else None."""
        state = self.read_state()
        if state is None or not state.services:
            return None
        if all(pid_alive(s.pid) for s in state.services):
            return state
        return None

    def up(self) -> ServicesState:
        # the service classes: only up() needs them, and tidemark --help imports this module
        from tidemark.infra.kafka import KafkaCluster
        from tidemark.infra.postgres import PostgresServer  # as above
        from tidemark.infra.zookeeper import ZooKeeperServer  # as above

        current = self.running()
        if current is not None:
            return current
        if self.read_state() is not None:
            self._stop_services()  # some died: start clean
        data = self.home / "data"
        data.mkdir(parents=True, exist_ok=True)
        state = ServicesState()
        zk = ZooKeeperServer(data / "zookeeper", env=self.env, tie_to_owner=False)
        kafka = KafkaCluster(data / "kafka", env=self.env, tie_to_owner=False)
        postgres: PostgresServer | None = None
        if not self.env.postgres_dsn:
            try:
                postgres = PostgresServer(data / "postgres", tie_to_owner=False)
            except MissingToolError as exc:
                log.warning("not starting PostgreSQL (the timeline store): %s", exc)
        try:
            zk.start()
            state.zk_connect = zk.connect_string
            state.services.append(
                ServiceRecord(
                    "zookeeper", _pid(zk.process.pid), zk.connect_string, str(zk.process.log_path)
                )
            )
            kafka.start()
            state.kafka_bootstrap = kafka.bootstrap_servers
            for node in kafka.nodes:
                state.services.append(
                    ServiceRecord(
                        node.process.name,
                        _pid(node.process.pid),
                        node.address,
                        str(node.process.log_path),
                    )
                )
            if postgres is None:
                state.postgres_dsn = self.env.postgres_dsn
            else:
                postgres.start()
                state.postgres_dsn = postgres.dsn
                state.services.append(
                    ServiceRecord(
                        "postgres",
                        _pid(postgres.process.pid),
                        f"{HOST}:{postgres.port}",
                        str(postgres.process.log_path),
                    )
                )
        except Exception:
            if postgres is not None:
                postgres.stop()
            kafka.stop()
            zk.stop()
            raise
        self.home.mkdir(parents=True, exist_ok=True)
        self.state_path.write_text(state.to_json())
        return state

    def down(self, processes_timeout_s: float = PROCESS_STOP_S) -> Stopped:
        """Stop the noted tidemark processes (SIGTERM; those still running after
        ``processes_timeout_s`` are named, not killed), then the services."""
        stopped: list[str] = []
        still = stop_noted_processes(self.home, processes_timeout_s, stopped)
        stopped += self._stop_services()
        return Stopped(stopped, still)

    def _stop_services(self) -> list[str]:
        state = self.read_state()
        stopped: list[str] = []
        if state is None:
            return stopped
        for record in reversed(state.services):
            if stop_pid(record.pid):
                stopped.append(record.name)
        self.state_path.unlink(missing_ok=True)
        return stopped

    def status(self) -> list[tuple[ServiceRecord, bool]]:
        state = self.read_state()
        if state is None:
            return []
        return [(s, pid_alive(s.pid)) for s in state.services]


@dataclass(frozen=True)
class Stopped:
    """What ``down`` stopped (names), and the noted processes still running after it."""

    stopped: list[str]
    still_running: list[str]


@dataclass(frozen=True)
class NotedProcess:
    """A long-running tidemark process (``controller run``, ``serve``) under a home."""

    kind: str
    name: str
    pid: int
    tables: str | None = None
    """Where it writes its tables (a controller's delta root), if it does."""

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name} (pid {self.pid})"


def _processes_dir(home: Path) -> Path:
    return home / "processes"


@contextlib.contextmanager
def noted_process(
    kind: str, name: str, env: Environment | None = None, tables: str | None = None
) -> Iterator[None]:
    """Note this process under ``TIDEMARK_HOME`` while the block runs, for ``down`` (and
    ``tables``, where it writes its tables, for a ``wait`` started beside it)."""
    home = (env or Environment.from_env()).home
    record = NotedProcess(kind, name, os.getpid(), tables)
    folder = _processes_dir(home)
    path = folder / f"{kind}-{record.pid}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(record)))
    except OSError as exc:  # a read-only home: `down` will not know of it
        log.warning("not noted under %s for `tidemark down`: %s", folder, exc)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def noted_processes(home: Path) -> list[NotedProcess]:
    """The noted processes still running (records of dead ones are removed)."""
    found = []
    for path in sorted(_processes_dir(home).glob("*.json")):
        try:
            record = NotedProcess(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            path.unlink(missing_ok=True)
            continue
        if _is_tidemark(record.pid):
            found.append(record)
        else:
            path.unlink(missing_ok=True)
    return found


def _is_tidemark(pid: int) -> bool:
    """Alive and a tidemark process (a reused pid is not stopped)."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return b"tidemark" in cmdline.read()
    except OSError:
        return False


def stop_noted_processes(home: Path, timeout_s: float, stopped: list[str]) -> list[str]:
    """SIGTERM every noted process, wait up to ``timeout_s`` for all; the ones that
    stopped go to ``stopped``, the labels of those still running are returned."""
    records = noted_processes(home)
    for record in records:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)
    wait_for(lambda: not any(pid_alive(r.pid) for r in records), timeout_s, 0.1)
    still = [r.label for r in records if pid_alive(r.pid)]
    stopped.extend(f"{r.kind} {r.name}" for r in records if not pid_alive(r.pid))
    return still


def _pid(pid: int | None) -> int:
    if pid is None:
        raise ServiceError("a service reported no pid after starting")
    return pid


def data_root(env: Environment) -> str:
    """Where Delta tables live by default: TIDEMARK_DELTA_ROOT or ~/.tidemark/delta.
    A string, not a ``Path``: the root may be a URI (``s3a://lake/tidemark``), which a
    ``Path`` would mangle (``s3a:/lake/tidemark``)."""
    return env.delta_root if env.delta_root else str(env.home / "delta")


KAFKA = "kafka"
ZOOKEEPER = "zookeeper"
POSTGRES = "postgresql"
_HOW = {
    KAFKA: ("--bootstrap", KAFKA_BOOTSTRAP),
    ZOOKEEPER: ("--zk", ZK_CONNECT),
    POSTGRES: ("--dsn", POSTGRES_DSN),
}


def resolve_services(
    *needed: str,
    kafka: str | None = None,
    zk: str | None = None,
    postgres: str | None = None,
    env: Environment | None = None,
) -> ServicesState:
    """The services to talk to, each from its option, else the environment
    (``tidemark.environment``), else the services ``tidemark up`` started.

    ``needed`` (of :data:`KAFKA`, :data:`ZOOKEEPER`, :data:`POSTGRES`): those that
    must be found; :class:`ConfigurationError` names the ones that are not and
    how to give them. The others are filled in where known.
    """
    unknown = [n for n in needed if n not in _HOW]
    if unknown:
        raise ValueError(f"unknown services {unknown}; valid: {', '.join(_HOW)}")
    env = env or Environment.from_env()
    found = {
        KAFKA: kafka or env.kafka_bootstrap,
        ZOOKEEPER: zk or env.zk_connect,
        POSTGRES: postgres or env.postgres_dsn,
    }
    if any(not found[n] for n in needed):
        running = LocalServices(env).running()
        if running is not None:
            found[KAFKA] = found[KAFKA] or running.kafka_bootstrap
            found[ZOOKEEPER] = found[ZOOKEEPER] or running.zk_connect
            found[POSTGRES] = found[POSTGRES] or running.postgres_dsn
    missing = [n for n in needed if not found[n]]
    if missing:
        raise ConfigurationError(
            f"no {' / '.join(missing)} to talk to: pass "
            + " and ".join(_HOW[n][0] for n in missing)
            + ", set "
            + " and ".join(_HOW[n][1] for n in missing)
            + ", or start local services with `tidemark up`"
        )
    return ServicesState(
        kafka_bootstrap=found[KAFKA], zk_connect=found[ZOOKEEPER], postgres_dsn=found[POSTGRES]
    )


@contextlib.contextmanager
def connected_services(
    env: Environment | None = None, work_dir: Path | None = None
) -> Iterator[ServicesState]:
    """Services to talk to: the environment's, else `tidemark up`'s, else temporary ones.

    Temporary services run under ``work_dir`` (kept, with their logs), else a
    temporary directory, and stop when the block ends, pass or fail.
    """
    env = env or Environment.from_env()
    try:
        found = resolve_services(KAFKA, ZOOKEEPER, env=env)
    except ConfigurationError:
        pass
    else:
        yield found
        return
    # the service classes: as in LocalServices.up
    from tidemark.infra.kafka import KafkaCluster
    from tidemark.infra.zookeeper import ZooKeeperServer  # as above

    with contextlib.ExitStack() as stack:
        if work_dir is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tidemark-")))
        else:
            root = work_dir
            root.mkdir(parents=True, exist_ok=True)
        log.warning("no services running (`tidemark up`); starting temporary ones in %s", root)
        with (
            ZooKeeperServer(root / "zk", env=env) as zk,
            KafkaCluster(root / "kafka", env=env) as kafka,
        ):
            yield ServicesState(
                kafka_bootstrap=kafka.bootstrap_servers, zk_connect=zk.connect_string
            )
