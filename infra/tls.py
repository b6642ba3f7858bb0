"""A private certificate authority for local services, made with ``openssl``.

    ca = PrivateCA.create(tmp_path / "tls")
    server = ca.issue("kafka")          # a certificate for 127.0.0.1 and localhost
    Producer({..., "ssl.ca.location": str(ca.cert)})

Everything is PEM, unencrypted, under one directory (a test run's own): the CA's key
and certificate, and per server name a key, a certificate signed by the CA and a file
holding both (what Kafka's PEM keystore reads). The servers' certificates name
``127.0.0.1`` and ``localhost``, where the local services listen, so clients verify
host names as they would anywhere.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tidemark.infra.exceptions import ServiceError
from tidemark.infra.ports import HOST

DAYS = "2"
"""How long the certificates are valid: a test run's length, with room."""

TRUSTSTORE_PASSWORD = "changeit"
"""The JDK's customary truststore password: a truststore holds only the CA's public
certificate, so its password guards the file's integrity, not a secret."""


@dataclass(frozen=True)
class ServerCertificate:
    """A server's PEM key and certificate, and ``keystore``: both in one file."""

    key: Path
    cert: Path
    keystore: Path


def _openssl(*args: str, env: dict[str, str] | None = None) -> None:
    environ = None if env is None else {**os.environ, **env}
    done = subprocess.run(
        ["openssl", *args], capture_output=True, text=True, check=False, env=environ
    )
    if done.returncode != 0:
        raise ServiceError(f"openssl {args[0]} failed: {done.stderr.strip()[-400:]}")


@dataclass(frozen=True)
class PrivateCA:
    """A certificate authority under ``directory`` (``cert``: what clients trust)."""

    directory: Path

    @property
    def cert(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def key(self) -> Path:
        return self.directory / "ca-key.pem"

    @classmethod
    def create(cls, directory: Path) -> PrivateCA:
        """A new CA under ``directory`` (kept when it is there already: one per run)."""
        ca = cls(directory)
        if not ca.cert.exists():
            directory.mkdir(parents=True, exist_ok=True)
            _openssl(
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", DAYS,
                "-subj", "/CN=tidemark test CA", "-keyout", str(ca.key), "-out", str(ca.cert),
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            )  # fmt: skip
        return ca

    def issue(self, name: str) -> ServerCertificate:
        """A server certificate for ``name`` on ``127.0.0.1`` and ``localhost``."""
        issued = ServerCertificate(
            key=self.directory / f"{name}-key.pem",
            cert=self.directory / f"{name}.pem",
            keystore=self.directory / f"{name}-keystore.pem",
        )
        if issued.keystore.exists():
            return issued
        request = self.directory / f"{name}.csr"
        extensions = self.directory / f"{name}.ext"
        extensions.write_text(
            f"subjectAltName=IP:{HOST},DNS:localhost\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
        )
        _openssl(
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", str(issued.key), "-out", str(request),
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-days", DAYS, "-extfile", str(extensions),
            "-out", str(issued.cert),
        )  # fmt: skip
        issued.keystore.write_text(issued.key.read_text() + issued.cert.read_text())
        return issued

    def pkcs12(self, name: str, password: str) -> Path:
        """``name``'s key and certificate as a PKCS#12 keystore under ``password`` (for a
        Java server that reads no PEM); the password reaches openssl by its environment,
        not its command line."""
        issued = self.issue(name)
        path = self.directory / f"{name}.p12"
        if not path.exists():
            _openssl(
                "pkcs12", "-export", "-in", str(issued.cert), "-inkey", str(issued.key),
                "-name", name, "-out", str(path), "-passout", "env:TIDEMARK_KEYSTORE_PASSWORD",
                env={"TIDEMARK_KEYSTORE_PASSWORD": password},
            )  # fmt: skip
        return path

    def java_truststore(self, keytool: str) -> Path:
        """The CA's certificate as a PKCS#12 truststore (:data:`TRUSTSTORE_PASSWORD`), for
        a JVM client that reads no PEM (``-Djavax.net.ssl.trustStore``: Hadoop's S3A)."""
        path = self.directory / "ca-truststore.p12"
        if not path.exists():
            argv = [
                keytool, "-importcert", "-noprompt", "-alias", "tidemark-ca",
                "-file", str(self.cert), "-keystore", str(path), "-storetype", "PKCS12",
                "-storepass", TRUSTSTORE_PASSWORD,
            ]  # fmt: skip
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise ServiceError(f"keytool -importcert failed: {done.stderr.strip()[-400:]}")
        return path

    def java_trust_options(self, keytool: str) -> tuple[str, ...]:
        """The JVM options that make a JVM trust this CA (and only it)."""
        return (
            f"-Djavax.net.ssl.trustStore={self.java_truststore(keytool)}",
            "-Djavax.net.ssl.trustStoreType=PKCS12",
            f"-Djavax.net.ssl.trustStorePassword={TRUSTSTORE_PASSWORD}",
        )


__all__ = ["TRUSTSTORE_PASSWORD", "PrivateCA", "ServerCertificate"]
