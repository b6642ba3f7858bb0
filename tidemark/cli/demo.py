"""``tidemark demo``: the pipeline end to end on local services."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tidemark.cli.output import add_format_option, emit


def register(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="writers -> Spark controller -> Delta watermarks -> readers, end to end"
    )
    add_format_option(demo)
    demo.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from infra.services import connected_services
    from infra.spark import SparkSettings, spark_session, stop_spark
    from tidemark.demo import describe, run_demo

    with (
        connected_services() as services,
        tempfile.TemporaryDirectory(prefix="tidemark-demo-") as tmp,
    ):
        assert services.kafka_bootstrap is not None and services.zk_connect is not None
        spark = spark_session(SparkSettings(work_dir=Path(tmp) / "spark", app_name="tidemark-demo"))
        try:
            report = run_demo(services.kafka_bootstrap, services.zk_connect, Path(tmp), spark)
        finally:
            stop_spark(spark)
        emit(args, asdict(report), describe(report))
    ok = bool(report.watermarks) and report.missed_at_or_after_seek == 0
    return 0 if ok else 1
