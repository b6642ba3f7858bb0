"""``tidemark up`` / ``down`` / ``status``: local services in the background."""

from __future__ import annotations

import argparse
from typing import Any

from tidemark.cli.output import add_verb, emit, emit_list
from tidemark.infra.services import LocalServices


def register(sub: Any) -> None:
    add_verb(sub, "up", cmd_up, "start ZooKeeper and Kafka locally in the background")
    add_verb(
        sub,
        "down",
        cmd_down,
        "stop the controllers and servers running here, then the services `tidemark up` started",
        formatted=False,
    )
    add_verb(sub, "status", cmd_status, "show the local services")


def cmd_up(args: argparse.Namespace) -> int:
    state = LocalServices.from_env().up()
    emit(
        args,
        {
            "kafka_bootstrap": state.kafka_bootstrap,
            "zk_connect": state.zk_connect,
            "postgres_dsn": state.postgres_dsn,
        },
        [
            f"kafka      {state.kafka_bootstrap}",
            f"zookeeper  {state.zk_connect}",
            f"postgresql {state.postgres_dsn or '(not started)'}",
            "export TIDEMARK_KAFKA_BOOTSTRAP=" + str(state.kafka_bootstrap),
            "export TIDEMARK_ZK_CONNECT=" + str(state.zk_connect),
            *(["export TIDEMARK_POSTGRES_DSN=" + state.postgres_dsn] if state.postgres_dsn else []),
        ],
    )
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    done = LocalServices.from_env().down()
    print("stopped: " + (", ".join(done.stopped) if done.stopped else "nothing was running"))
    if done.still_running:
        print("still running: " + ", ".join(done.still_running))
        return 1
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    rows = LocalServices.from_env().status()
    emit_list(
        args,
        [{"name": r.name, "pid": r.pid, "address": r.address, "running": ok} for r, ok in rows],
        lambda r: (
            f"{r['name']:<10} {r['address']:<22} pid {r['pid']:<8} "
            + ("running" if r["running"] else "STOPPED")
        ),
        "no local services (start them with `tidemark up`)",
    )
    return 0 if all(ok for _, ok in rows) else 1
