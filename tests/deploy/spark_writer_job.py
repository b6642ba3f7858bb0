"""A Spark batch job that writes rows to a stream with ``tidemark.jobs.stream_writer``, as a team
would submit one (the deploy tests run it with ``spark-submit`` on the standalone cluster,
as its own principal).

    spark-submit ... tests/deploy/spark_writer_job.py deploy/orders --bootstrap B --zk Z \\
        --job-id nightly --rows 200 --partitions 2

Its rows' keys start with ``<job-id>-``; their event times are null (none given: each
task stamps the arrival time, after the job registered its writers, so no watermark
emitted before can pass them). The tasks' reports are printed as one JSON line, the
last on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from pyspark.sql import SparkSession

from tidemark.jobs.stream_writer import StreamTarget, write_to_stream


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("stream")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--zk", required=True)
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args(argv)
    spark = SparkSession.builder.appName(f"spark-writer-{args.job_id}").getOrCreate()
    try:
        rows = [(f"{args.job_id}-{i}", f"event-{i}", None) for i in range(args.rows)]
        df = spark.createDataFrame(rows, "key string, value string, event_time long")
        target = StreamTarget(args.stream, args.bootstrap, args.zk)
        reports = write_to_stream(
            df.repartition(args.partitions), target, job_id=args.job_id, batch_id=1
        )
        print(json.dumps([dataclasses.asdict(r) for r in reports]), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
