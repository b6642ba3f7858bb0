"""Pure helpers of infra: environment, jar names, ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.environment import Environment
from tidemark.infra.jars import artifact_name
from tidemark.infra.ports import (
    LOWEST_PORT,
    ephemeral_floor,
    free_port,
    free_ports,
    is_listening,
)


def test_environment_reads_overrides_and_ignores_blanks() -> None:
    env = Environment.from_env(
        {
            "TIDEMARK_KAFKA_BOOTSTRAP": "k1:9092,k2:9092",
            "TIDEMARK_ZK_CONNECT": "  ",
            "TIDEMARK_HOME": "/srv/tm",
        }
    )
    assert env.kafka_bootstrap == "k1:9092,k2:9092"
    assert env.zk_connect is None
    assert env.home == Path("/srv/tm")


@pytest.mark.parametrize(
    ("jar", "name"),
    [
        ("/m2/org/apache/kafka/kafka-clients/3.9.1/kafka-clients-3.9.1.jar", "kafka-clients"),
        ("delta-spark_4.1_2.13-4.4.0.jar", "delta-spark_4.1_2.13"),
        ("netty-tcnative-boringssl-static-2.0.70.Final-linux-x86_64.jar",
         "netty-tcnative-boringssl-static"),
        ("scala-library-2.13.17.jar", "scala-library"),
    ],
)  # fmt: skip
def test_artifact_name_strips_the_version(jar: str, name: str) -> None:
    assert artifact_name(jar) == name


def test_free_ports_are_distinct_and_unused() -> None:
    ports = free_ports(6)
    assert len(set(ports)) == 6
    assert not any(is_listening(p) for p in ports)
    assert 1024 < free_port() < 65536


def test_picked_ports_lie_below_the_ephemeral_range_and_never_repeat() -> None:
    """No outgoing connection's source port can take a picked port before its service
    binds it, and one process never hands a port out twice."""
    picked = [p for _ in range(50) for p in free_ports(4)]
    assert len(set(picked)) == len(picked)
    assert all(LOWEST_PORT <= p < ephemeral_floor() for p in picked)


def test_kafka_cluster_ids_never_start_with_a_dash() -> None:
    from tidemark.infra.kafka import new_cluster_id

    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_pipelines_exports_the_contract_names() -> None:
    from tidemark import pipelines

    for name in pipelines.__all__:
        assert getattr(pipelines, name).__name__ == name
    with pytest.raises(AttributeError):
        _ = pipelines.NoSuchThing


def test_resolve_services_option_then_environment_then_error(tmp_path) -> None:
    import pytest as _pytest

    from tidemark.environment import Environment
    from tidemark.errors import ConfigurationError
    from tidemark.infra.services import KAFKA, POSTGRES, ZOOKEEPER, resolve_services

    env = Environment(kafka_bootstrap="env:9092", zk_connect="env:2181", home=tmp_path)
    assert resolve_services(KAFKA, env=env).kafka_bootstrap == "env:9092"
    found = resolve_services(KAFKA, ZOOKEEPER, kafka="opt:9092", env=env)
    assert (found.kafka_bootstrap, found.zk_connect) == ("opt:9092", "env:2181")
    with _pytest.raises(ConfigurationError, match=r"postgresql.*TIDEMARK_POSTGRES_DSN"):
        resolve_services(POSTGRES, env=env)


def test_local_drivers_get_the_jvm_options_and_cluster_drivers_keep_the_defaults(
    tmp_path: Path,
) -> None:
    from tidemark.infra.spark import LOCAL_JVM_OPTIONS, SparkSettings, driver_java_options

    settings = SparkSettings(work_dir=tmp_path, driver_memory="3g")
    local = driver_java_options(settings, "local[2]").split()
    assert local[0] == f"-Dderby.system.home={tmp_path / 'derby'}"
    assert local[1:] == [*LOCAL_JVM_OPTIONS, "-Xms3g"]
    assert driver_java_options(settings, "spark://10.0.0.1:7077").split() == local[:1]
    plain = SparkSettings(work_dir=tmp_path, jvm_options=())
    assert driver_java_options(plain, "local[*]").split() == local[:1]


def test_data_root_keeps_an_object_store_uri_intact() -> None:
    from tidemark.infra.services import data_root

    env = Environment.from_env({"TIDEMARK_DELTA_ROOT": "s3a://lake/tidemark"})
    assert data_root(env) == "s3a://lake/tidemark"
    assert data_root(Environment.from_env({"TIDEMARK_HOME": "/srv/tm"})) == "/srv/tm/delta"


def test_an_ensemble_member_names_every_peer_and_its_own_id(tmp_path: Path) -> None:
    from tidemark.infra.zookeeper import QuorumPeer, ZooKeeperEnsemble

    with pytest.raises(ValueError, match="odd size"):
        ZooKeeperEnsemble(tmp_path / "even", size=2)
    peer = QuorumPeer(2, 2181, 2888, 3888)
    assert peer.line() == "server.2=127.0.0.1:2888:3888;127.0.0.1:2181"


def test_the_s3a_settings_name_the_store_path_style_over_http(tmp_path: Path) -> None:
    from tidemark.infra.s3proxy import READER_ENVIRONMENT, S3Proxy, bucket_path

    s3 = S3Proxy.__new__(S3Proxy)
    s3.port, s3.access_key, s3.secret_key, s3.tls = 9000, "k", "s", None
    conf = s3.hadoop_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert set(s3.reader_environment()) == set(READER_ENVIRONMENT)
    assert bucket_path("lake", "/tidemark") == "s3a://lake/tidemark"


@pytest.mark.unit
def test_an_argfile_keeps_the_arguments_off_the_process_list(tmp_path: Path) -> None:
    """``java @file``: the arguments (a SCRAM password among them) in a file only its owner
    reads, each quoted, as the JVM's launcher reads them back; a quote or a backslash,
    which the file's syntax would change, is refused."""
    import os
    import stat
    import subprocess

    from tidemark.infra.java import argfile_argv, java_executable

    java = java_executable(Environment.from_env())
    secret = "SCRAM-SHA-256=[name=admin,password=admin-pw]"
    path = tmp_path / "format.args"
    argv = argfile_argv([java, "-Dtidemark.probe=" + secret, "-version"], path)
    assert argv == [java, f"@{path}"] and not any("admin-pw" in a for a in argv)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text().splitlines() == [f'"-Dtidemark.probe={secret}"', '"-version"']
    assert subprocess.run(argv, capture_output=True, check=False).returncode == 0
    with pytest.raises(ValueError, match="quote or a backslash"):
        argfile_argv([java, 'a"b'], tmp_path / "refused.args")


LEADER_EXITS_FIRST = """
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(1.5,)).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_process_whose_first_thread_ended_is_alive_until_the_rest_have() -> None:
    """Its first thread shows as a zombie while another runs on: not gone yet (its
    parent cannot reap it), then gone once the last thread ends."""
    import subprocess
    import sys
    import time

    from tidemark.infra.process import pid_alive

    proc = subprocess.Popen([sys.executable, "-c", LEADER_EXITS_FIRST])
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            with open(f"/proc/{proc.pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        else:
            pytest.fail("the first thread did not end")
        assert pid_alive(proc.pid)
        assert proc.poll() is None
        assert proc.wait(10) == 0
        assert not pid_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_a_jvm_started_again_takes_the_archive_its_first_run_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service's argv built again (a restarted broker or Connect worker builds it anew)
    chooses its archive options anew: a fresh pending file while there is no archive, the
    archive once it is in place; nothing else in the argv moves."""
    from tidemark.infra.java import ARCHIVE_AT_EXIT, SHARED_ARCHIVE, jvm_argv

    monkeypatch.setenv("TIDEMARK_CACHE", str(tmp_path))
    env = Environment.from_env()

    def build() -> list[str]:
        return jvm_argv(env, ["a.jar", "b.jar"], "org.example.Main", "x", jvm_options=("-Dk=v",))

    def ours(argv: list[str]) -> list[str]:
        return [a for a in argv if a.startswith((ARCHIVE_AT_EXIT, SHARED_ARCHIVE))]

    def rest(argv: list[str]) -> list[str]:
        return [a for a in argv if a not in ours(argv)]

    first = build()
    (pending,) = ours(first)
    again = build()
    (fresh,) = ours(again)
    assert fresh.startswith(ARCHIVE_AT_EXIT) and fresh != pending
    assert rest(again) == rest(first)
    archive = Path(pending[len(ARCHIVE_AT_EXIT) :].rsplit(".", 2)[0])
    archive.write_bytes(b"archive")
    settled = build()
    assert ours(settled) == [f"{SHARED_ARCHIVE}{archive}"]
    assert rest(settled) == rest(first)
    assert settled[-4:] == ["-cp", "a.jar:b.jar", "org.example.Main", "x"]
