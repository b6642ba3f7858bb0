"""Session-scoped real services and per-test unique names.

Services start once per test session as local processes under a temporary
directory, on free ports, and stop at the end, pass or fail. Set
``TIDEMARK_KAFKA_BOOTSTRAP``, ``TIDEMARK_ZK_CONNECT`` or
``TIDEMARK_SPARK_MASTER`` to run the suite against existing services instead.
When a test fails, the tail of each service's log is attached to its report.
"""

from __future__ import annotations

import contextlib
import fcntl
import uuid
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from tidemark.environment import Environment
from tidemark.infra.process import started_processes

if TYPE_CHECKING:
    from tests.controller_env import Env as ControllerEnv

# Property tests check invariants, not speed: on a loaded 2-core machine (CI runs Spark
# beside them) one example can take far longer than hypothesis's 200 ms default deadline.
settings.register_profile("tidemark", deadline=None)
settings.load_profile("tidemark")


@pytest.fixture(scope="session")
def environment() -> Environment:
    return Environment.from_env()


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("services")


@pytest.fixture(scope="session", autouse=True)
def _no_service_survives() -> Iterator[None]:
    """Set up first, torn down last: every process the suite started must be gone."""
    yield
    from tidemark.infra.spark import stop_spark

    stop_spark()
    survivors = [p for p in started_processes() if p.alive()]
    for proc in survivors:
        proc.kill()
    assert not survivors, f"service processes outlived the suite: {[p.name for p in survivors]}"


@pytest.fixture(scope="session")
def zookeeper(environment: Environment, services_dir: Path) -> Iterator[str]:
    """A ZooKeeper connect string (a local server unless TIDEMARK_ZK_CONNECT is set)."""
    if environment.zk_connect:
        yield environment.zk_connect
        return
    from tidemark.infra.zookeeper import ZooKeeperServer

    with ZooKeeperServer(services_dir / "zookeeper", env=environment) as server:
        yield server.connect_string


@pytest.fixture(scope="session")
def kafka(environment: Environment, services_dir: Path) -> Iterator[str]:
    """Kafka bootstrap servers (one local KRaft broker unless TIDEMARK_KAFKA_BOOTSTRAP is set)."""
    if environment.kafka_bootstrap:
        yield environment.kafka_bootstrap
        return
    from tidemark.infra.kafka import KafkaCluster

    with KafkaCluster(services_dir / "kafka", brokers=1, env=environment) as cluster:
        yield cluster.bootstrap_servers


@pytest.fixture(scope="session")
def spark(environment: Environment, services_dir: Path) -> Iterator[Any]:
    """One Spark session for the suite (local[2] unless TIDEMARK_SPARK_MASTER is set)."""
    from tidemark.infra.spark import SparkSettings, spark_session, stop_spark

    session = spark_session(SparkSettings(work_dir=services_dir / "spark"), environment)
    yield session
    stop_spark(session)


@pytest.fixture(autouse=True)
def _no_query_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A streaming query a test leaves running on the suite's Spark session would run
    its micro-batches until the session ends, on the cores the other tests need: it is
    stopped, with a warning naming the test."""
    yield
    if "spark" not in request.fixturenames:
        return
    left = list(request.getfixturevalue("spark").streams.active)
    for query in left:
        with contextlib.suppress(Exception):
            query.stop()
    if left:
        warnings.warn(
            f"{request.node.nodeid} left {len(left)} streaming queries running; stopped",
            stacklevel=1,
        )


@pytest.fixture
def unique() -> str:
    """A short suffix that makes topic, group, chroot and table names unique per test."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def zk_client(zookeeper: str, unique: str) -> Iterator[Any]:
    """A started kazoo client confined to a fresh chroot, removed afterwards."""
    from kazoo.client import KazooClient

    root = KazooClient(hosts=zookeeper)
    root.start(timeout=15)
    root.ensure_path(f"/tidemark-test-{unique}")
    root.stop()
    client = KazooClient(hosts=f"{zookeeper}/tidemark-test-{unique}")
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()
    root = KazooClient(hosts=zookeeper)
    root.start(timeout=15)
    root.delete(f"/tidemark-test-{unique}", recursive=True)
    root.stop()
    root.close()


@pytest.fixture
def controller_env(
    kafka: str, zookeeper: str, zk_client: Any, unique: str, tmp_path: Path
) -> ControllerEnv:
    """A one-bucket controller's settings, store and stream manager, in ``tmp_path``."""
    # the controller's settings and writers load confluent_kafka: not for unit runs
    from tests.controller_env import make_env

    return make_env(kafka, zookeeper, zk_client, unique, tmp_path, buckets=1)


LOG_TAIL_LINES = 40
_started_before = pytest.StashKey[int]()  # how many processes had started before the test
_figures_before = pytest.StashKey[int]()  # how many fault figures had been reported
# The fault figures of the run, gathered from the reports (pytest-xdist's workers send
# theirs to the controller with each test's report).
_REPORTED_FIGURES: list[str] = []
_FIGURE = "fault figure"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "alone: asserts a wall-time figure; under pytest-xdist no other worker runs a test "
        "meanwhile",
    )


@contextlib.contextmanager
def _worker_turn(item: pytest.Item) -> Iterator[None]:
    """Under pytest-xdist, an ``alone`` test waits for the test the other workers are
    running and holds them back until it ends (its setup and teardown included): a
    figure it asserts is measured on an unshared machine, the rest run side by side.

    Two file locks shared by the run's workers: every test takes the gate for a moment
    and then the run lock shared; an ``alone`` test keeps the gate while it takes the run
    lock exclusively, so a stream of short tests cannot starve it."""
    if getattr(item.config, "workerinput", None) is None:
        yield
        return
    base = Path(item.config.option.basetemp).parent / "worker-turns"  # the run's, shared
    alone = item.get_closest_marker("alone") is not None
    with open(f"{base}.gate", "a") as gate, open(f"{base}.run", "a") as run:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(run, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        yield  # the files close at the end: both locks go with them


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    from tests.faults.figures import FIGURES

    item.stash[_started_before] = len(started_processes())
    item.stash[_figures_before] = len(FIGURES)
    with _worker_turn(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed setup, test or teardown carries the tail of each service's log: the
    processes running now and those the test started (one that died is among them),
    so one CI log is enough to see what the services said."""
    report = yield
    if report.failed:
        started = started_processes()
        before = item.stash.get(_started_before, len(started))
        for index, proc in enumerate(started):
            if proc.alive() or index >= before:
                state = "running" if proc.alive() else "exited"
                report.sections.append(
                    (
                        f"{proc.name} log, last {LOG_TAIL_LINES} lines ({state}, {proc.log_path})",
                        proc.log_tail(LOG_TAIL_LINES),
                    )
                )
    if call.when == "teardown":
        from tests.faults.figures import FIGURES

        new = FIGURES[item.stash.get(_figures_before, len(FIGURES)) :]
        report.user_properties.extend((_FIGURE, line) for line in new)
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _REPORTED_FIGURES.extend(value for name, value in report.user_properties if name == _FIGURE)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fault suite's figures (tests/faults/figures.py), one line per fault."""
    if _REPORTED_FIGURES:
        terminalreporter.section("fault suite figures")
        for line in _REPORTED_FIGURES:
            terminalreporter.write_line(line)


SPARK_GROUPS = 2
"""How many worker groups share the tests that use the suite's Spark session."""

# Modules that build the project's wheel: the build works in the repository's build/
# directory, so two at once would trample each other.
_BUILDS_THE_WHEEL = ("tests/unit/test_packaging.py", "tests/integration/test_install_extras.py")


def _worker_group(item: pytest.Item) -> str | None:
    """Which tests one pytest-xdist worker runs together (``--dist loadgroup``).

    The tests that use the suite's Spark session, in two groups by module (a stable
    hash of its path): each worker that runs one holds a session, and one group alone
    was the run's longest worker. The tests that start Spark drivers of their own
    (``spark``-marked, as users run ``tidemark controller run``), in a third group: one
    of them at a time beside the sessions. A module of service-bound tests stays on one
    worker (its module-scoped services start once); the wheel builds, on one worker one
    after the other; unit tests spread one by one.
    """
    module = item.path.relative_to(item.config.rootpath).as_posix()
    if "spark" in getattr(item, "fixturenames", ()):
        return f"spark-{zlib.crc32(module.encode()) % SPARK_GROUPS}"
    if item.get_closest_marker("spark"):
        return "spark-drivers"
    if module in _BUILDS_THE_WHEEL:
        return "wheel"
    if item.get_closest_marker("unit"):
        return None
    return module


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under tests/unit are `unit`; under tests/integration, `integration`; with
    pytest-xdist, each is given its worker group (:func:`_worker_group`)."""
    grouping = config.pluginmanager.hasplugin("xdist")
    for item in items:
        path = str(item.path)
        if "/tests/unit/" in path and not item.get_closest_marker("unit"):
            item.add_marker(pytest.mark.unit)
        elif "/tests/integration/" in path and not item.get_closest_marker("integration"):
            item.add_marker(pytest.mark.integration)
        if grouping and (group := _worker_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if getattr(config, "workerinput", None) is not None:
        items.sort(key=_dealt_first)


FIRST_DEALT = (*(f"spark-{n}" for n in range(SPARK_GROUPS)), "spark-drivers")
"""The longest groups, first in the collection: with ``--no-loadscope-reorder`` (the
Makefile's) pytest-xdist deals groups out in collection order, so each goes to a worker
of its own and the short ones fill in around them. Dealt by their test counts instead,
two of them could land on one worker, which then ran longest by minutes."""


def _dealt_first(item: pytest.Item) -> int:
    marker = item.get_closest_marker("xdist_group")
    group = marker.args[0] if marker is not None and marker.args else None
    return FIRST_DEALT.index(group) if group in FIRST_DEALT else len(FIRST_DEALT)


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Under ``--dist loadgroup`` every service-bound test carries its worker group in
    its node id (xdist's ``@group`` suffix): a pytest that keeps node ids where xdist no
    longer writes them would deal the groups out test by test, silently."""
    if node.config.getoption("dist", None) != "loadgroup":
        return
    bound = ("tests/integration/", "tests/faults/")
    lost = [i for i in ids if i.startswith(bound) and "@" not in i]
    if lost:
        pytest.exit(
            f"pytest-xdist's groups were not applied to {len(lost)} tests (first: {lost[0]}): "
            "this pytest and pytest-xdist do not work together; install constraints.txt's pins",
            returncode=4,
        )


@pytest.fixture(scope="session")
def postgres(environment: Environment) -> Iterator[str]:
    """A PostgreSQL DSN (a local server unless TIDEMARK_POSTGRES_DSN is set).

    The local server runs without fsync (test data only). Its directory is
    made under the system's temporary directory, not pytest's: when we are
    root, PostgreSQL runs as an unprivileged user that must traverse to its
    data, and every pytest run resets its base directory to mode 0700.
    """
    if environment.postgres_dsn:
        yield environment.postgres_dsn
        return
    import shutil
    import tempfile

    from tidemark.infra.postgres import PostgresServer

    root = Path(tempfile.mkdtemp(prefix="tidemark-postgres-"))
    try:
        with PostgresServer(root, durable=False) as server:
            yield server.dsn
    finally:
        shutil.rmtree(root, ignore_errors=True)
