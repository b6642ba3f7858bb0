"""``tidemark demo``: the pipeline end to end on local services."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tidemark.cli.output import add_format_option, emit


def register(sub: Any) -> None:
    demo = sub.add_parser("demo", help="run the pipeline end to end and show the result")
    demo.add_argument("--events", type=int, default=300, help="how many events to produce")
    add_format_option(demo)
    demo.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from infra.services import connected_services
    from infra.spark import SparkSettings, spark_session, stop_spark
    from jobs.demo import run_demo

    with (
        connected_services() as services,
        tempfile.TemporaryDirectory(prefix="tidemark-demo-") as tmp,
    ):
        assert services.kafka_bootstrap is not None
        spark = spark_session(SparkSettings(work_dir=Path(tmp) / "spark", app_name="tidemark-demo"))
        try:
            summary = run_demo(services.kafka_bootstrap, Path(tmp), spark, count=args.events)
        finally:
            stop_spark(spark)
    emit(
        args,
        asdict(summary),
        [
            f"topic {summary.topic}: produced {summary.events_produced} events",
            f"Spark read them from Kafka and wrote the Delta table {summary.table}",
            f"deltalake read back {summary.rows_in_delta} rows; per partition "
            + ", ".join(f"{p}: {n}" for p, n in summary.rows_per_partition.items()),
            f"event timestamps {summary.first_timestamp_ms} .. {summary.last_timestamp_ms}",
        ],
    )
    return 0 if summary.rows_in_delta == summary.events_produced else 1
