"""An S3-protocol object store as a local process: s3proxy on its file-system backend.

    with S3Proxy(tmp_path / "s3", buckets=("lake",)) as s3:
        DeltaTable("s3://lake/tidemark/marks", storage_options=s3.storage_options())
        spark_conf(...) | s3.hadoop_conf()            # s3a:// for Spark

s3proxy (``org.gaul:s3proxy``, Maven Central) is a real S3 server: requests are
signed (AWS signature v2 or v4) and answered over HTTP, and jclouds'
``filesystem`` provider keeps each bucket as a directory under the data
directory. It stands in for S3 or MinIO: the clients (Hadoop's ``s3a``,
delta-rs) are configured exactly as for those, with an endpoint, path-style
addressing and plain HTTP, or HTTPS with a certificate of a private CA (``tls``).
:meth:`S3Proxy.stop` and :meth:`S3Proxy.start` again over the same directory is an
outage the clients must ride out.
"""

from __future__ import annotations

from pathlib import Path

from tidemark.environment import Environment
from tidemark.infra import jars
from tidemark.infra.java import jvm_argv, keytool_executable
from tidemark.infra.ports import HOST, ensure_free, free_port, wait_listening
from tidemark.infra.process import ManagedProcess, Service
from tidemark.infra.tls import PrivateCA

MAIN_CLASS = "org.gaul.s3proxy.Main"
LOGBACK_CONF = Path(__file__).resolve().parent / "conf" / "s3proxy-logback.xml"
REGION = "us-east-1"

READER_ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_REGION",
    "AWS_ALLOW_HTTP",
    "AWS_S3_ALLOW_UNSAFE_RENAME",
)
"""The AWS variables delta-rs (``deltalake``) reads when a table's options name none:
how a process that only reads or writes Delta (the controller's sink, ``tidemark read``,
``serve``) reaches the store. They are AWS's names, not tidemark's."""


class S3Proxy(Service):
    """One s3proxy server on 127.0.0.1 with a fixed access key; ``buckets`` made at start."""

    def __init__(
        self,
        data_dir: Path,
        buckets: tuple[str, ...] = ("lake",),
        port: int | None = None,
        access_key: str = "tidemark",
        secret_key: str = "tidemark-secret",
        env: Environment | None = None,
        tls: PrivateCA | None = None,
    ) -> None:
        """``tls``: HTTPS only, with a certificate of that CA (clients must trust it:
        delta-rs through ``SSL_CERT_FILE``, see :meth:`reader_environment`; Spark's JVMs
        through :meth:`spark_trust`)."""
        self.env = env or Environment.from_env()
        self.tls = tls
        self.data_dir = data_dir
        self.buckets = buckets
        self.port = port or free_port()
        self.access_key = access_key
        self.secret_key = secret_key
        self.process = self._process()

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://{HOST}:{self.port}"

    def _endpoint_lines(self) -> list[str]:
        if self.tls is None:
            return [f"s3proxy.endpoint={self.endpoint}"]
        password = self.secret_key  # the keystore's, in this file beside the credential
        return [
            f"s3proxy.secure-endpoint={self.endpoint}",
            f"s3proxy.keystore-path={self.tls.pkcs12('s3proxy', password)}",
            f"s3proxy.keystore-password={password}",
        ]

    def _process(self) -> ManagedProcess:
        return ManagedProcess("s3proxy", self._argv(), self.data_dir / "s3proxy.log")

    def _argv(self) -> list[str]:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "s3proxy.properties"
        conf.write_text(
            "\n".join(
                [
                    *self._endpoint_lines(),
                    "s3proxy.authorization=aws-v2-or-v4",
                    f"s3proxy.identity={self.access_key}",
                    f"s3proxy.credential={self.secret_key}",
                    "s3proxy.ignore-unknown-headers=true",
                    "jclouds.provider=filesystem",
                    f"jclouds.filesystem.basedir={self.data_dir / 'buckets'}",
                    "",
                ]
            )
        )
        return jvm_argv(
            self.env,
            jars.classpath("s3proxy", self.env),
            MAIN_CLASS,
            "--properties",
            str(conf),
            heap_mb=256,
            jvm_options=(
                f"-Dlogback.configurationFile={LOGBACK_CONF}",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
            ),
        )

    def start(self, timeout_s: float = 60.0) -> S3Proxy:
        """Start (or start again after :meth:`stop`) over the same data directory."""
        ensure_free(self.port, "s3proxy")
        for bucket in self.buckets:
            (self.data_dir / "buckets" / bucket).mkdir(parents=True, exist_ok=True)
        if self.process.pid is not None:
            self.process = self._process()
        self.process.start()
        wait_listening(self.port, timeout_s, "s3proxy")
        self.process.check_alive()
        return self

    def stop(self) -> None:
        self.process.stop()

    def storage_options(self) -> dict[str, str]:
        """delta-rs (object_store) options for the tables on this store."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "false" if self.tls else "true",
            # One writer at a time (the leading driver), so no lock service is needed.
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        }

    def reader_environment(self) -> dict[str, str]:
        """:meth:`storage_options` as environment variables (:data:`READER_ENVIRONMENT`),
        and with ``tls`` the CA to trust as ``SSL_CERT_FILE`` (delta-rs takes no CA among
        its options)."""
        options = self.storage_options()
        trust = {} if self.tls is None else {"SSL_CERT_FILE": str(self.tls.cert)}
        return {**{name: options[name] for name in READER_ENVIRONMENT}, **trust}

    def java_trust_options(self) -> tuple[str, ...]:
        """The JVM options that make a JVM trust the store's CA (none in clear)."""
        if self.tls is None:
            return ()
        return self.tls.java_trust_options(keytool_executable(self.env))

    def spark_trust(self) -> dict[str, str]:
        """Spark settings that make the driver's and the executors' JVMs trust the store's
        CA (S3A reads the JVM's truststore; none in clear). They replace the JVMs' other
        ``extraJavaOptions``: add those to :meth:`java_trust_options` instead."""
        options = " ".join(self.java_trust_options())
        if not options:
            return {}
        return {
            "spark.driver.extraJavaOptions": options,
            "spark.executor.extraJavaOptions": options,
        }

    def hadoop_conf(self) -> dict[str, str]:
        """Spark settings for ``s3a://`` on this store (Hadoop's S3A connector)."""
        prefix = "spark.hadoop.fs.s3a."
        return {
            prefix + "endpoint": self.endpoint,
            prefix + "endpoint.region": REGION,
            prefix + "path.style.access": "true",
            prefix + "connection.ssl.enabled": "true" if self.tls else "false",
            prefix + "access.key": self.access_key,
            prefix + "secret.key": self.secret_key,
            prefix + "aws.credentials.provider": (
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
            ),
            # Retry long enough to ride out a short outage of the store.
            prefix + "attempts.maximum": "10",
            prefix + "retry.limit": "10",
            prefix + "retry.interval": "1s",
            prefix + "connection.establish.timeout": "5s",
            prefix + "connection.timeout": "10s",
        }


def bucket_path(bucket: str, key: str = "", scheme: str = "s3a") -> str:
    """``s3a://bucket/key``: the URI of ``key`` in ``bucket``."""
    return f"{scheme}://{bucket}/{key.lstrip('/')}" if key else f"{scheme}://{bucket}"


__all__ = ["READER_ENVIRONMENT", "S3Proxy", "bucket_path"]
