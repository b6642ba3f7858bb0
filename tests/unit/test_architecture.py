"""The layout's rules that a reader relies on, checked over the source with ``ast``:

- a ``KazooClient`` is created only in ``controller/zookeeper/`` (the session factory);
- Kafka client settings (``bootstrap.servers``, ``security.protocol``, ``sasl.*``,
  ``ssl.*``, and Spark's ``kafka.``-prefixed ones) are
  assembled only by the builder, ``controller/kafka/settings.py``;
- a Kafka client (``Producer(``, ``Consumer(``, ``AdminClient(``, by name or as an
  attribute) is constructed only by the role builders, ``controller/kafka/roles.py``;
- no hand-written retry loop outside the retry policy, ``tidemark/retries.py``: a
  *retry loop* is a ``for`` or ``while`` loop whose body both pauses and handles an
  exception (a ``try`` with an ``except``). Pausing is calling ``sleep`` (``time.sleep``, or
  an injected ``sleep`` / ``_sleep``) or a timed ``.wait(timeout)`` (an ``Event``'s or a
  ``Condition``'s: one argument). Loops that pause without catching (pacing, polling a
  condition up to a deadline) are not retries; a loop that catches to keep going at a
  fixed pace is listed by name in :data:`PACING_LOOPS` with its reason.
- ``deltalake`` is imported, and ``write_deltalake`` / ``DeltaTable`` named, only in the
  Delta adapter, ``controller/delta/``;
- no signature outside the Delta adapter threads where the tables are: no parameter (of
  a function, or a keyword of a ``TypedDict`` that a ``**keywords`` parameter unpacks)
  is named ``storage_options`` or ``delta_root``, but in the boundary modules of
  :data:`DELTA_ROOT_BOUNDARY` / :data:`STORAGE_OPTIONS_BOUNDARY` -- where a user names a
  root, each with its reason. Everything below takes one location (a ``TableLocation``).

"Assembled" means written as a key: a dict literal's key, the target of a subscript
assignment, or the name given to ``.option(...)``. Reading a setting
(``config["bootstrap.servers"]``, ``settings.get(...)``) or listing names (a set of
reserved keys) is not assembling one. ``tests/`` is exempt (fixtures may keep their own
clients), and so is ``infra/kafka.py``: it starts the brokers, whose server settings
share the ``sasl.`` prefix, connects as the test principals it creates, and may not
import ``controller`` (infra depends on nothing of the project); ``infra/connect.py`` too:
it writes a Connect worker's own configuration file for the tests.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("controller", "pipelines", "schemas", "jobs", "infra", "tidemark")

SESSION_HOME = "controller/zookeeper/"
SETTINGS_HOME = "controller/kafka/settings.py"
SETTINGS_EXEMPT = frozenset({SETTINGS_HOME, "infra/kafka.py", "infra/connect.py"})
ROLES_HOME = "controller/kafka/roles.py"
ROLES_EXEMPT = frozenset({ROLES_HOME, "infra/kafka.py"})
KAFKA_CLIENTS = frozenset({"Producer", "Consumer", "AdminClient"})
RETRY_HOME = "tidemark/retries.py"
SLEEPS = frozenset({"sleep", "_sleep"})
PACING_LOOPS: dict[tuple[str, str], str] = {
    ("controller/periodic.py", "run"): "a step at a fixed interval; a failed one is logged",
    ("controller/policy_loop.py", "_run"): (
        "supervises the policy loop for the process's life: a session that ended or failed "
        "is contended for again after a fixed pause (kazoo retries within a session)"
    ),
    ("jobs/config_changes.py", "_run"): (
        "lists the streams again at a fixed pace for new ones' watches and waits for a "
        "watch to fire; a failed listing is tried at the next round, nothing is retried"
    ),
    ("jobs/controller_job.py", "_run_query"): (
        "paces the running query's progress checks; a query that failed gives the "
        "leadership up (returns), it is not started again here"
    ),
    (
        "controller/delta/maintenance.py",
        "_loop",
    ): "a maintenance pass at a fixed interval; a failed one is logged",
    ("pipelines/writing/observer.py", "run"): (
        "looks at the brokers at a fixed interval; a failed look is logged, the next "
        "interval looks again"
    ),
    ("tidemark/service/state.py", "_tail_loop"): (
        "tails the waited-on streams at a fixed pace; a failed read is logged, the "
        "next one reads again"
    ),
}
"""(path, function) -> why its loop pauses and catches yet is no retry of a service."""
DELTA_HOME = "controller/delta/"
DELTA_NAMES = frozenset({"write_deltalake", "DeltaTable"})
DELTA_ROOT_BOUNDARY: dict[str, str] = {
    "pipelines/connection.py": (
        "tidemark.connect() and ConnectionConfig.from_env: where an application names the "
        "root (the documented keyword); the connection passes one TableLocation on"
    ),
    "pipelines/reading/seek.py": (
        "stream_cut_at / complete_cut_at: the public lookups' delta_root keyword; the "
        "location is built once, from it and storage_options"
    ),
    "pipelines/reading/stream_time.py": (
        "wait_for_time: the public wait's delta_root keyword; the location is built once"
    ),
    "pipelines/reading/table_time.py": (
        "complete_through / version_complete_at / read_complete / wait_for_table: the "
        "public lookups' delta_root keyword; the location is built once"
    ),
    "pipelines/reading/group.py": (
        "ReaderGroup(...), create, ephemeral_group: the public delta_root keyword (a root "
        "or a TableLocation), resolved on first use: a group that never asks about time "
        "needs no root"
    ),
    "pipelines/reading/streams_group.py": (
        "StreamsReaderGroup.create: ReaderGroup.create(streams=[...]) hands it the user's "
        "delta_root keyword as given"
    ),
    "pipelines/reading/merge.py": "merged_reader: the public delta_root keyword",
    "pipelines/reading/spark_source.py": "kafka_source_options: the public delta_root keyword",
    "jobs/complete_window.py": (
        "the complete-window job's public functions: the root Spark writes the aggregates "
        "under (a delta-spark path, with the job's own --delta-root)"
    ),
}
"""Modules whose signatures may take a ``delta_root``: where a user names the root."""
STORAGE_OPTIONS_BOUNDARY: dict[str, str] = {
    "pipelines/connection.py": (
        "tidemark.connect() and ConnectionConfig.from_env take the root's storage options "
        "beside it (the documented keywords)"
    ),
    "pipelines/reading/seek.py": (
        "stream_cut_at / complete_cut_at keep the storage_options keyword of their "
        "public lookups, beside delta_root"
    ),
    "pipelines/reading/stream_time.py": (
        "wait_for_time keeps the storage_options keyword of the public wait, beside delta_root"
    ),
    "pipelines/reading/table_time.py": (
        "the tracked tables' public lookups keep storage_options beside delta_root"
    ),
}
"""Modules whose signatures may take ``storage_options``: the public keywords of a root."""
LOCATION_PARAMETERS = {
    "delta_root": DELTA_ROOT_BOUNDARY,
    "storage_options": STORAGE_OPTIONS_BOUNDARY,
}

KAFKA_SETTING = re.compile(
    r"^(kafka\.)?(bootstrap\.servers|security\.protocol)$|^(kafka\.)?(sasl|ssl)\.|^kafka\.security\."
)


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def kazoo_clients_created(source: str) -> list[int]:
    """Lines that call ``KazooClient(...)`` (by name or as an attribute)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "KazooClient":
                lines.append(node.lineno)
    return lines


def kafka_clients_constructed(source: str) -> list[tuple[int, str]]:
    """(line, class) of every call of ``Producer``/``Consumer``/``AdminClient`` (by name
    or as an attribute, ``confluent_kafka.Producer(...)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in KAFKA_CLIENTS:
                found.append((node.lineno, str(name)))
    return found


def _is_pause(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "wait":
        return len(node.args) + len(node.keywords) == 1  # a timed wait
    return (isinstance(func, ast.Name) and func.id in SLEEPS) or (
        isinstance(func, ast.Attribute) and func.attr in SLEEPS
    )


def retry_loops(source: str) -> list[tuple[int, str]]:
    """(line, enclosing function) of every loop that pauses and handles an exception in
    its body (see the module doc); a function's name is ``""`` at module level."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
                continue
            if isinstance(child, ast.For | ast.AsyncFor | ast.While):
                inner = [n for stmt in child.body for n in ast.walk(stmt)]
                catches = any(isinstance(n, ast.Try) and n.handlers for n in inner)
                if catches and any(_is_pause(n) for n in inner):
                    found.append((child.lineno, function))
            visit(child, function)

    visit(ast.parse(source), "")
    return found


def kafka_settings_assembled(source: str) -> list[tuple[int, str]]:
    """(line, key) of every Kafka client setting written as a key (see the module doc)."""
    found: list[tuple[int, str]] = []

    def check(node: ast.AST | None, line: int) -> None:
        key = _string(node)
        if key is not None and KAFKA_SETTING.search(key):
            found.append((line, key))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            for key_node in node.keys:
                check(key_node, node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            check(node.slice, node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "option"
            and node.args
        ):
            check(node.args[0], node.lineno)
    return found


def delta_uses(source: str) -> list[tuple[int, str]]:
    """(line, what) of every ``deltalake`` import and every name ``write_deltalake`` or
    ``DeltaTable`` (called, imported under another name, or read as an attribute)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _is_deltalake(a.name)]
        elif isinstance(node, ast.ImportFrom) and _is_deltalake(node.module or ""):
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Name) and node.id in DELTA_NAMES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in DELTA_NAMES:
            found.append((node.lineno, node.attr))
    return found


def location_parameters(source: str) -> list[tuple[int, str]]:
    """(line, name) of every parameter named ``delta_root`` or ``storage_options``: a
    function's (or a lambda's), or a field of a ``TypedDict`` (keywords for ``**where``)."""
    found: list[tuple[int, str]] = []
    typed_dicts: set[str] = {"TypedDict"}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            a = node.args
            every = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            found += [
                (node.lineno, p.arg)
                for p in every
                if p is not None and p.arg in LOCATION_PARAMETERS
            ]
    for node in ast.walk(tree):  # classes in order of appearance: a TypedDict's subclasses too
        if isinstance(node, ast.ClassDef) and any(
            (b.id if isinstance(b, ast.Name) else getattr(b, "attr", None)) in typed_dicts
            for b in node.bases
        ):
            typed_dicts.add(node.name)
            found += [
                (field.lineno, field.target.id)
                for field in node.body
                if isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and field.target.id in LOCATION_PARAMETERS
            ]
    return sorted(found)


def _is_deltalake(module: str) -> bool:
    return module.split(".")[0] == "deltalake"


def project_sources() -> list[tuple[str, str]]:
    """(path relative to the root, text) of every project module; tests and benchmarks out."""
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/bench/" not in f"/{relative}":
                out.append((relative, path.read_text(encoding="utf-8")))
    return out


def test_the_project_sources_are_found():
    paths = {path for path, _ in project_sources()}
    assert {"controller/zookeeper/session.py", SETTINGS_HOME, "jobs/due.py"} <= paths


def test_kazoo_clients_are_created_only_by_the_session_factory():
    offenders = {
        path: lines
        for path, text in project_sources()
        if not path.startswith(SESSION_HOME) and (lines := kazoo_clients_created(text))
    }
    assert offenders == {}, (
        "use tidemark.controller.zookeeper.session (open_session / zookeeper_session)"
    )
    homes = [path for path, text in project_sources() if kazoo_clients_created(text)]
    assert homes == ["controller/zookeeper/session.py"]


def test_kafka_client_settings_are_assembled_only_by_the_builder():
    offenders = {
        path: keys
        for path, text in project_sources()
        if path not in SETTINGS_EXEMPT and (keys := kafka_settings_assembled(text))
    }
    assert offenders == {}, (
        "use tidemark.controller.kafka.settings (client_config, spark_source_options)"
    )
    builder = dict(project_sources())[SETTINGS_HOME]
    assert {key for _, key in kafka_settings_assembled(builder)} >= {
        "bootstrap.servers",
        "security.protocol",
        "sasl.username",
        "kafka.bootstrap.servers",
        "sasl.jaas.config",  # the Java side's, prefixed with kafka. for Spark
        "ssl.truststore.location",
    }


def test_kafka_clients_are_constructed_only_by_the_role_builders():
    offenders = {
        path: calls
        for path, text in project_sources()
        if path not in ROLES_EXEMPT and (calls := kafka_clients_constructed(text))
    }
    assert offenders == {}, "build the client from a role: tidemark.controller.kafka.roles"
    from tidemark.controller.kafka import roles

    made = {value.kind.__name__ for value in vars(roles).values() if isinstance(value, roles.Role)}
    assert made == KAFKA_CLIENTS  # every kind of client has its roles there


def test_services_are_waited_on_only_through_the_retry_policy():
    offenders = {
        path: loops
        for path, text in project_sources()
        if path != RETRY_HOME
        and (loops := [(n, f) for n, f in retry_loops(text) if (path, f) not in PACING_LOOPS])
    }
    assert offenders == {}, "retry through tidemark.retries.RetryPolicy (back-off, jitter, budget)"
    listed = {(path, f) for path, text in project_sources() for _, f in retry_loops(text)}
    assert set(PACING_LOOPS) <= listed, "a pacing loop listed that no longer exists"
    assert retry_loops(dict(project_sources())[RETRY_HOME])  # the one loop is there


def test_delta_is_reached_only_through_its_adapter():
    offenders = {
        path: uses
        for path, text in project_sources()
        if not path.startswith(DELTA_HOME) and (uses := delta_uses(text))
    }
    assert offenders == {}, "use tidemark.controller.delta (its tables, appends, maintenance)"
    homes = {path for path, text in project_sources() if delta_uses(text)}
    assert {"controller/delta/tables.py", "controller/delta/appends.py"} <= homes


def test_only_the_boundary_modules_take_a_delta_root_or_storage_options():
    offenders = {
        path: found
        for path, text in project_sources()
        if not path.startswith(DELTA_HOME)
        and (
            found := [
                (line, name)
                for line, name in location_parameters(text)
                if path not in LOCATION_PARAMETERS[name]
            ]
        )
    }
    assert offenders == {}, (
        "take one location (tidemark.controller.delta.location.TableLocation), built where "
        "the user names the root, instead of delta_root / storage_options"
    )
    sources = dict(project_sources())
    for name, boundary in LOCATION_PARAMETERS.items():
        stale = [p for p in boundary if name not in {n for _, n in location_parameters(sources[p])}]
        assert stale == [], f"a boundary listed for {name} that no longer takes it"


# --- the checks can fail ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "from kazoo.client import KazooClient\nc = KazooClient(hosts=zk)\n",
        "import kazoo.client\nc = kazoo.client.KazooClient(hosts=zk, timeout=3)\n",
    ],
)
def test_a_kazoo_client_made_elsewhere_is_found(source):
    assert kazoo_clients_created(source) == [2]


def test_naming_the_kazoo_client_type_is_not_creating_one():
    source = "from kazoo.client import KazooClient\ndef f(c: KazooClient) -> None: ...\n"
    assert kazoo_clients_created(source) == []


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ('Producer({"bootstrap.servers": b, "acks": "all"})', "bootstrap.servers"),
        ('config = {"security.protocol": "SASL_SSL"}', "security.protocol"),
        ('config["sasl.username"] = user', "sasl.username"),
        (
            'spark.read.format("kafka").option("kafka.bootstrap.servers", b)',
            "kafka.bootstrap.servers",
        ),
        ('reader.option("kafka.security.protocol", "SSL")', "kafka.security.protocol"),
        ('reader.options(**{"kafka.sasl.jaas.config": jaas})', "kafka.sasl.jaas.config"),
    ],
)
def test_kafka_settings_assembled_elsewhere_are_found(source, key):
    assert kafka_settings_assembled(source) == [(1, key)]


@pytest.mark.parametrize(
    "source",
    [
        'bootstrap = config["bootstrap.servers"]',  # reading a setting
        'bootstrap = settings.get("bootstrap.servers")',
        'RESERVED = frozenset({"bootstrap.servers", "transactional.id"})',  # naming keys
        'Producer({**client_config(b), "acks": "all"})',  # through the builder
        'reader.option("kafka.isolation.level", "read_committed")',  # not a connection key
        'config = {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"}',  # a broker's
    ],
)
def test_other_uses_of_kafka_keys_are_not_found(source):
    assert kafka_settings_assembled(source) == []


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ('from confluent_kafka import Producer\np = Producer({"acks": "all"})\n', "Producer"),
        ("import confluent_kafka\nc = confluent_kafka.Consumer(settings)\n", "Consumer"),
        ("from confluent_kafka import admin\na = admin.AdminClient(config)\n", "AdminClient"),
    ],
)
def test_a_kafka_client_constructed_elsewhere_is_found(source, name):
    assert kafka_clients_constructed(source) == [(2, name)]


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("import deltalake\n", "deltalake"),
        ("from deltalake.exceptions import TableNotFoundError\n", "deltalake.exceptions"),
        ("def f(w):\n    write_deltalake(w)\n", "write_deltalake"),
        ("def f(m, u):\n    m.DeltaTable(u)\n", "DeltaTable"),
    ],
)
def test_delta_reached_elsewhere_is_found(source, what):
    assert [w for _, w in delta_uses(source)] == [what]


@pytest.mark.parametrize(
    "source",
    [
        "from confluent_kafka import Producer\ndef f(p: Producer) -> None: ...\n",  # a type
        "p = roles.client(roles.RELAY_PRODUCER, bootstrap)\n",  # through a role
        "w = TidemarkProducer(conf, stream=s, writer_id=w, store=store)\n",  # tidemark's own
    ],
)
def test_naming_a_client_type_or_using_a_role_is_not_constructing_one(source):
    assert kafka_clients_constructed(source) == []


@pytest.mark.parametrize(
    "source",
    [
        # the shape of every hand-written retry: catch, sleep, try again
        "def f():\n    while True:\n        try:\n            return call()\n"
        "        except OSError:\n            time.sleep(delay)\n",
        "def f():\n    for attempt in range(3):\n        try:\n            return call()\n"
        "        except ValueError:\n            pass\n        self._sleep(0.1)\n",
        "def f():\n    while not stop.is_set():\n        try:\n            step()\n"
        "        except Exception:\n            log.exception('x')\n        stop.wait(1.0)\n",
    ],
)
def test_a_hand_written_retry_loop_is_found(source):
    assert retry_loops(source) == [(2, "f")]


@pytest.mark.parametrize(
    "source",
    [
        # polling a condition up to a deadline: no exception caught
        "def f():\n    while not ready():\n        time.sleep(0.05)\n",
        # catching without pausing (a compare-and-set race re-read at once)
        "def f():\n    for _ in range(3):\n        try:\n            return swap()\n"
        "        except ConflictError:\n            continue\n",
        # sleeping after the loop, not in it
        "def f():\n    for x in xs:\n        try:\n            g(x)\n"
        "        except KeyError:\n            pass\n    time.sleep(1)\n",
    ],
)
def test_pacing_and_re_reading_are_not_retry_loops(source):
    assert retry_loops(source) == []


@pytest.mark.parametrize(
    "source",
    [
        "from tidemark.controller.delta.tables import read_table\n",
        "class DeltaTables: ...\n",  # another name
        '"""reads the DeltaTable with write_deltalake"""\n',  # prose
    ],
)
def test_other_mentions_of_delta_are_not_found(source):
    assert delta_uses(source) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("def f(delta_root, stream): ...\n", [(1, "delta_root")]),
        ("def f(s, *, storage_options=None): ...\n", [(1, "storage_options")]),
        ("async def f(delta_root=None, /): ...\n", [(1, "delta_root")]),
        ("g = lambda storage_options: storage_options\n", [(1, "storage_options")]),
        (
            "class Where(TypedDict, total=False):\n    delta_root: str\n"
            "class More(Where):\n    storage_options: dict\n",
            [(2, "delta_root"), (4, "storage_options")],
        ),
    ],
)
def test_a_signature_threading_the_root_is_found(source, found):
    assert location_parameters(source) == found


@pytest.mark.parametrize(
    "source",
    [
        "def f(lake: TableLocation, stream: str): ...\n",  # one location
        "x = settings.delta_root\nf(delta_root=x, storage_options=o)\n",  # reading, passing
        "@dataclass\nclass Settings:\n    delta_root: str\n",  # a record, not a TypedDict
    ],
)
def test_a_location_or_a_call_is_not_a_threaded_root(source):
    assert location_parameters(source) == []
