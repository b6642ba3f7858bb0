"""The layout's rules that a reader relies on, checked over the source with ``ast``:

- a ``KazooClient`` is created only in ``controller/zookeeper/`` (the session factory);
- Kafka client settings (``bootstrap.servers``, ``security.protocol``, ``sasl.*``, and
  Spark's ``kafka.bootstrap.servers`` / ``kafka.security.*`` / ``kafka.sasl.*``) are
  assembled only by the builder, ``controller/kafka/settings.py``;
- ``deltalake`` is imported, and ``write_deltalake`` / ``DeltaTable`` named, only in the
  Delta adapter, ``controller/delta/``.

"Assembled" means written as a key: a dict literal's key, the target of a subscript
assignment, or the name given to ``.option(...)``. Reading a setting
(``config["bootstrap.servers"]``, ``settings.get(...)``) or listing names (a set of
reserved keys) is not assembling one. ``tests/`` is exempt (fixtures may keep their own
clients), and so is ``infra/kafka.py``: it starts the brokers, whose server settings
share the ``sasl.`` prefix, connects as the test principals it creates, and may not
import ``controller`` (infra depends on nothing of the project).
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
SETTINGS_EXEMPT = frozenset({SETTINGS_HOME, "infra/kafka.py"})
DELTA_HOME = "controller/delta/"
DELTA_NAMES = frozenset({"write_deltalake", "DeltaTable"})

KAFKA_SETTING = re.compile(
    r"^(kafka\.)?(bootstrap\.servers|security\.protocol)$|^(kafka\.)?sasl\.|^kafka\.security\."
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
        "kafka.security.protocol",
        "kafka.sasl.jaas.config",
    }


def test_delta_is_reached_only_through_its_adapter():
    offenders = {
        path: uses
        for path, text in project_sources()
        if not path.startswith(DELTA_HOME) and (uses := delta_uses(text))
    }
    assert offenders == {}, "use tidemark.controller.delta (its tables, appends, maintenance)"
    homes = {path for path, text in project_sources() if delta_uses(text)}
    assert {"controller/delta/tables.py", "controller/delta/appends.py"} <= homes


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
        "from tidemark.controller.delta.tables import read_table\n",
        "class DeltaTables: ...\n",  # another name
        '"""reads the DeltaTable with write_deltalake"""\n',  # prose
    ],
)
def test_other_mentions_of_delta_are_not_found(source):
    assert delta_uses(source) == []
