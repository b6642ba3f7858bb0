"""The object store over HTTPS only (s3proxy's secure endpoint, a certificate of a CA
made for the run): the controller's Delta tables are written and read through it by
delta-rs trusting that CA; without the CA, or in clear, nothing is read. Spark's S3A
writes a Delta table there from JVMs trusting the CA through a truststore."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tidemark.environment import overridden
from tidemark.infra.s3proxy import S3Proxy
from tidemark.infra.tls import PrivateCA


def test_delta_tables_over_https_with_the_run_s_ca(tmp_path: Path) -> None:
    ca = PrivateCA.create(tmp_path / "tls")
    with S3Proxy(tmp_path / "s3", buckets=("lake",), tls=ca) as s3:
        assert s3.endpoint.startswith("https://")
        uri, options = "s3://lake/tidemark/marks", s3.storage_options()
        with overridden(s3.reader_environment()):
            write_deltalake(uri, pa.table({"time": [1, 2, 3]}), storage_options=options)
            assert DeltaTable(uri, storage_options=options).to_pyarrow_table().num_rows == 3
        clear = {**options, "AWS_ENDPOINT_URL": s3.endpoint.replace("https", "http", 1)}
        # in clear the store answers TLS, not HTTP
        with (
            overridden({"SSL_CERT_FILE": str(ca.cert)}),
            pytest.raises(OSError, match="invalid HTTP version"),
        ):
            DeltaTable(uri, storage_options={**clear, "AWS_ALLOW_HTTP": "true"})
        other = PrivateCA.create(tmp_path / "other")
        with (
            overridden({"SSL_CERT_FILE": str(other.cert)}),
            pytest.raises(OSError, match="invalid peer certificate"),
        ):
            DeltaTable(uri, storage_options=options)


SPARK_OVER_S3A = """
import json, sys
from pathlib import Path
from tidemark.infra import jars
from tidemark.infra.spark import LOCAL_JVM_OPTIONS, SparkSettings, spark_session
conf, trust, work, uri = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
conf["spark.jars"] = ",".join(jars.spark_extra_jars(groups=("spark", "s3a")))
conf["spark.executor.extraJavaOptions"] = " ".join(trust)
settings = SparkSettings(
    Path(work), app_name="s3a-over-https", jvm_options=(*LOCAL_JVM_OPTIONS, *trust), extra=conf
)
spark = spark_session(settings)
spark.range(5).write.format("delta").save(uri)
print("rows", spark.read.format("delta").load(uri).count())
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_spark_s3a_writes_delta_over_https_trusting_the_run_s_ca(tmp_path: Path) -> None:
    """Spark's S3A connector, as the deployed controller and writer jobs reach the store:
    an ``https://`` endpoint, the CA in a PKCS#12 truststore given to the driver's and
    executors' JVMs; the table it writes is read back by Spark and by delta-rs."""
    ca = PrivateCA.create(tmp_path / "tls")
    with S3Proxy(tmp_path / "s3", buckets=("lake",), tls=ca) as s3:
        conf = s3.hadoop_conf()
        assert conf["spark.hadoop.fs.s3a.endpoint"].startswith("https://")
        trust = list(s3.java_trust_options())
        argv = [sys.executable, "-c", SPARK_OVER_S3A, json.dumps(conf), json.dumps(trust)]
        argv += [str(tmp_path / "spark"), "s3a://lake/tables/spark"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "rows 5" in done.stdout.splitlines()
        uri, options = "s3://lake/tables/spark", s3.storage_options()
        with overridden(s3.reader_environment()):
            assert DeltaTable(uri, storage_options=options).to_pyarrow_table().num_rows == 5
