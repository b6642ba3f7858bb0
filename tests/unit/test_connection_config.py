"""The one way in (``tidemark.connect``): its typed settings from arguments or the
environment, the refusals naming what is missing, and a front door that stays light."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import tidemark
from tidemark.environment import DELTA_ROOT, KAFKA_BOOTSTRAP, ZK_CONNECT
from tidemark.errors import ConfigurationError

pytestmark = pytest.mark.unit

ENV = {KAFKA_BOOTSTRAP: "k1:9092", ZK_CONNECT: "z1:2181/chroot", DELTA_ROOT: "s3://b/delta"}


def test_the_settings_come_from_the_environment() -> None:
    config = tidemark.ConnectionConfig.from_env(ENV)
    assert config == tidemark.ConnectionConfig(
        "k1:9092", "z1:2181/chroot", delta=tidemark.DeltaLocation("s3://b/delta")
    )


def test_arguments_win_over_the_environment() -> None:
    config = tidemark.ConnectionConfig.from_env(
        ENV,
        kafka_bootstrap="k2:9092",
        zk_root="/other",
        delta_root="/data/delta",
        storage_options={"AWS_REGION": "eu-west-1"},
    )
    assert (config.kafka_bootstrap, config.zk_connect, config.zk_root) == (
        "k2:9092",
        "z1:2181/chroot",
        "/other",
    )
    assert config.delta == tidemark.DeltaLocation("/data/delta", {"AWS_REGION": "eu-west-1"})


def test_the_settings_are_frozen() -> None:
    config = tidemark.ConnectionConfig.from_env(ENV)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.kafka_bootstrap = "elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("missing", "named"), [(KAFKA_BOOTSTRAP, "kafka_bootstrap"), (ZK_CONNECT, "zk_connect")]
)
def test_a_missing_service_is_refused_naming_its_argument_and_variable(
    missing: str, named: str
) -> None:
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(
        ConfigurationError, match=f"no {named}: pass {named}=... or set \\${missing}"
    ):
        tidemark.ConnectionConfig.from_env(env)


def test_without_a_delta_location_lookups_say_how_to_give_one() -> None:
    config = tidemark.ConnectionConfig.from_env({KAFKA_BOOTSTRAP: "k", ZK_CONNECT: "z"})
    assert config.delta is None
    with pytest.raises(ConfigurationError, match=DELTA_ROOT):
        config.delta_location()
    with tidemark.connect(config=config) as tm, pytest.raises(ConfigurationError, match=DELTA_ROOT):
        tm.complete_cut_at("shop/orders", "now")  # refused before any service is asked


def test_an_empty_delta_uri_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="URI"):
        tidemark.DeltaLocation(" ")


def test_the_front_door_loads_no_client_library() -> None:
    code = (
        "import sys, tidemark\n"
        "tidemark.connect, tidemark.ConnectionConfig, tidemark.DeltaLocation\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('kazoo', 'confluent_kafka', 'pyspark', 'deltalake', 'pyarrow', 'psycopg')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
