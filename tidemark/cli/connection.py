"""Global connection flags: ``tidemark --bootstrap B --zk Z -X key=value VERB ...``.

They stand beside the environment variables (``tidemark.environment`` names them) and
win over them for this one command: each flag sets its variable while the verb runs,
so every verb and every library call below it sees one source of settings. ``-X``
takes any Kafka client property: those with a variable of their own
(:data:`CLIENT_PROPERTIES`: the bootstrap, the security protocol and SASL principal) set
it, any other joins ``TIDEMARK_KAFKA_PROPERTIES`` (``ssl.ca.location``, ``sasl.*``, ...);
the properties tidemark owns are refused by name.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Iterator

from tidemark.controller.kafka.settings import (
    CLIENT_PROPERTY_VARIABLES,
    checked_properties,
    environment_properties,
)
from tidemark.environment import KAFKA_BOOTSTRAP, KAFKA_PROPERTIES, ZK_CONNECT, overridden
from tidemark.errors import ConfigurationError

CLIENT_PROPERTIES = CLIENT_PROPERTY_VARIABLES


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    # dests of their own: a verb's own --bootstrap/--zk (timeline relay, controller run)
    # sets args.bootstrap/args.zk to None when not given, which would drop these
    parser.add_argument(
        "--bootstrap",
        dest="connect_bootstrap",
        metavar="HOST:PORT,...",
        help=f"Kafka (else ${KAFKA_BOOTSTRAP})",
    )
    parser.add_argument(
        "--zk",
        dest="connect_zk",
        metavar="HOST:PORT[/chroot]",
        help=f"ZooKeeper (else ${ZK_CONNECT})",
    )
    parser.add_argument(
        "-X",
        dest="client_properties",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a Kafka client property (ssl.ca.location=..., sasl.username=..., any other "
        "librdkafka property but those tidemark owns)",
    )


def connection_settings(args: argparse.Namespace) -> dict[str, str]:
    """The environment variables the flags set (checked: nothing runs on a bad ``-X``)."""
    settings: dict[str, str] = {}
    further: dict[str, str] = {}
    for item in args.client_properties:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ConfigurationError(
                f"-X {key or item!r}: give KEY=VALUE (e.g. -X ssl.ca.location=/etc/kafka/ca.pem)"
            )
        if key in CLIENT_PROPERTIES:
            settings[CLIENT_PROPERTIES[key]] = value
        else:
            further.update(checked_properties({key: value}, "-X"))
    if further:
        # on top of the environment's own, so -X adds to them for this command
        settings[KAFKA_PROPERTIES] = json.dumps({**environment_properties(), **further})
    if args.connect_bootstrap:
        settings[KAFKA_BOOTSTRAP] = args.connect_bootstrap
    if args.connect_zk:
        settings[ZK_CONNECT] = args.connect_zk
    return settings


@contextlib.contextmanager
def connection_environment(args: argparse.Namespace) -> Iterator[None]:
    """Within the block, the flags' settings are in ``os.environ``; restored after."""
    with overridden(connection_settings(args)):
        yield
