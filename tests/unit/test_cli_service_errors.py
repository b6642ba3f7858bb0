"""A service that does not answer is one line on stderr naming the service, its address
and what to check (exit 1, no traceback) -- here a stopped ZooKeeper: a port nothing
listens on."""

from __future__ import annotations

import os

import pytest

import tidemark.cli.control_plane as control_plane_module
from tidemark.cli.main import main
from tidemark.cli.service_errors import EXIT_UNAVAILABLE
from tidemark.infra.ports import free_port

pytestmark = pytest.mark.unit


def test_a_stopped_zookeeper_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", address)
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")
    monkeypatch.setattr(control_plane_module, "ZK_START_TIMEOUT_S", 1.0)
    assert main(["scope", "list"]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"ZooKeeper is unavailable: {address} gave no session" in err
    assert "TIDEMARK_ZK_CONNECT" in err


def test_topic_offsets_name_partitions_not_segment_ids() -> None:
    """A successor segment (epoch 1, number 0) is partition 0 of the stream's topic."""
    from tidemark.controller.model import segment_id
    from tidemark.service.app import topic_offsets

    cut = {segment_id(1, 1): 7, segment_id(1, 0): 5}
    assert topic_offsets("t", cut) == {"t": {"0": 5, "1": 7}}


def test_the_zk_flag_wins_over_the_environment_for_one_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    flagged = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", "127.0.0.1:1")
    monkeypatch.setattr(control_plane_module, "ZK_START_TIMEOUT_S", 1.0)
    argv = ["--zk", flagged, "--bootstrap", "127.0.0.1:2", "scope", "list"]
    assert main(argv) == EXIT_UNAVAILABLE
    assert f"ZooKeeper is unavailable: {flagged} gave no session" in capsys.readouterr().err
    assert os.environ["TIDEMARK_ZK_CONNECT"] == "127.0.0.1:1"  # restored after the command


@pytest.mark.parametrize(
    ("flag", "said"),
    [
        ("enable.idempotence=false", "-X: enable.idempotence is set by tidemark"),
        ("security.protocol", "give KEY=VALUE"),
    ],
)
def test_a_bad_client_property_is_refused_by_name(
    flag: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["-X", flag, "scope", "list"]) == 1
    assert said in capsys.readouterr().err


def test_a_client_property_reaches_the_environment_while_the_verb_runs() -> None:
    import argparse

    from tidemark.cli.connection import connection_environment

    args = argparse.Namespace(
        client_properties=["sasl.username=alice"], connect_bootstrap=None, connect_zk=None
    )
    before = os.environ.get("TIDEMARK_KAFKA_SASL_USERNAME")
    with connection_environment(args):
        assert os.environ["TIDEMARK_KAFKA_SASL_USERNAME"] == "alice"
    assert os.environ.get("TIDEMARK_KAFKA_SASL_USERNAME") == before


def test_a_stopped_postgresql_is_one_line_without_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    monkeypatch.setenv("TIDEMARK_POSTGRES_DSN", f"postgresql://alice:s3cret@127.0.0.1:{port}/db")
    assert main(["timeline", "count", "reminders"]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "s3cret" not in err
    assert f"PostgreSQL is unavailable: 127.0.0.1:{port}/db refused or did not answer" in err
    assert "TIDEMARK_POSTGRES_DSN" in err


def test_the_time_service_not_answering_is_named_with_its_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import argparse

    from tidemark.cli.service_errors import named
    from tidemark.pipelines.reading.time_service import ServiceUnavailableError

    monkeypatch.setenv("TIDEMARK_TIME_SERVICE", "http://127.0.0.1:9")
    try:
        raise RuntimeError("lookup failed") from ServiceUnavailableError("refused")
    except RuntimeError as exc:
        error = named(exc, argparse.Namespace())
    assert error is not None
    assert str(error).startswith("the time service is unavailable: http://127.0.0.1:9 gave no")
    assert named(ValueError("not a service"), argparse.Namespace()) is None


def test_an_error_of_several_lines_is_printed_as_one(capsys: pytest.CaptureFixture[str]) -> None:
    from tidemark.cli.main import _say
    from tidemark.errors import TidemarkError

    _say(TidemarkError("first\n\tsecond"))
    assert capsys.readouterr().err == "tidemark: error: first second\n"


def test_a_bad_service_timeout_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TIDEMARK_SERVICE_TIMEOUT_MS", "soon")
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", f"127.0.0.1:{free_port()}")
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")
    assert main(["scope", "list"]) == 1
    assert "TIDEMARK_SERVICE_TIMEOUT_MS='soon'" in capsys.readouterr().err


def test_the_bootstrap_flag_reaches_a_verb_with_a_bootstrap_option_of_its_own() -> None:
    """``tidemark --bootstrap B timeline relay ...``: the relay's own ``--bootstrap``
    (not given) must not drop the global one."""
    from tidemark.cli.connection import connection_settings
    from tidemark.cli.main import build_parser

    argv = ["--bootstrap", "k1:9092", "--zk", "z1:2181", "timeline", "relay", "tl"]
    args = build_parser().parse_args([*argv, "--topic", "t", "--consumer", "c"])
    settings = connection_settings(args)
    assert settings["TIDEMARK_KAFKA_BOOTSTRAP"] == "k1:9092"
    assert settings["TIDEMARK_ZK_CONNECT"] == "z1:2181"


def test_a_kafka_admin_request_timing_out_names_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bare TimeoutError from an admin request's future (``stream describe`` or
    ``stream delete`` with the broker stopped) is Kafka not answering."""
    import argparse

    from tidemark.cli.service_errors import named
    from tidemark.controller.kafka.admin import StreamTopics

    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", address)
    with pytest.raises(TimeoutError) as raised:
        StreamTopics(address, timeout_s=0.5).delete("orders")
    error = named(raised.value, argparse.Namespace())
    assert error is not None
    assert str(error).startswith(f"Kafka is unavailable: {address} gave no answer in time")
    assert named(TimeoutError(), argparse.Namespace()) is None  # not from a Kafka client


def test_records_timing_out_in_the_producer_name_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from tidemark.cli.service_errors import named
    from tidemark.pipelines.writing.exceptions import DeliveryError, FailedRecord

    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    timed_out = 'KafkaError{code=_MSG_TIMED_OUT,val=-192,str="Local: Message timed out"}'
    error = named(DeliveryError([FailedRecord("t", 0, None, timed_out)]), argparse.Namespace())
    assert error is not None and str(error).startswith("Kafka is unavailable: 127.0.0.1:9 ")
    refused = 'KafkaError{code=MSG_SIZE_TOO_LARGE,val=10,str="Broker: Message size too large"}'
    too_large = DeliveryError([FailedRecord("t", 0, None, refused)])
    assert named(too_large, argparse.Namespace()) is None  # Kafka answered: it refused


def test_an_object_store_not_answering_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """delta-rs against a port nothing listens on: its nested error becomes one line."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["laggards", "a/b", "--delta-root", "s3://lake/t"]) == EXIT_UNAVAILABLE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "\x1b" not in err, err
    assert f"the object store is unavailable: {endpoint} gave no answer (" in err, err
    assert "TIDEMARK_DELTA_ROOT or --delta-root" in err


def test_an_object_store_error_that_is_no_outage_is_left_alone() -> None:
    import argparse

    from tidemark.cli.service_errors import named

    missing = OSError("Generic LocalFileSystem error: file:///x/_delta_log not found")
    assert named(missing, argparse.Namespace()) is None
