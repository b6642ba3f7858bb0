"""The object store over HTTPS only (s3proxy's secure endpoint, a certificate of a CA
made for the run): the controller's Delta tables are written and read through it by
delta-rs trusting that CA; without the CA, or in clear, nothing is read."""

from __future__ import annotations

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
