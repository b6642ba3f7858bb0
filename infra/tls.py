"""A private certificate authority for local services, made with ``openssl``.

    ca = PrivateCA.create(tmp_path / "tls")
    server = ca.issue("kafka")          # a certificate for 127.0.0.1 and localhost
    client = ca.issue_client("writer")  # a client certificate: CN=writer
    Producer({..., "ssl.ca.location": str(ca.cert),
              "ssl.certificate.location": str(client.cert),
              "ssl.key.location": str(client.key)})

Everything is PEM, unencrypted, under one directory (a test run's own): the CA's key
and certificate, and per server or client name a key, a certificate signed by the CA and
a file holding both (what Kafka's PEM keystore reads). The servers' certificates name
``127.0.0.1`` and ``localhost``, where the local services listen, so clients verify
host names as they would anywhere. A client certificate's subject is ``CN=<name>``: the
principal a server that asks for client certificates sees (Kafka's ``User:CN=<name>``).
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
class Certificate:
    """A server's or a client's PEM key and certificate, and ``keystore``: both in one
    file."""

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


def _export_pkcs12(issued: Certificate, alias: str, path: Path, password: str) -> Path:
    """``issued`` as a PKCS#12 keystore at ``path`` under ``password`` (made once); the
    password reaches openssl by its environment, not its command line."""
    if not path.exists():
        _openssl(
            "pkcs12", "-export", "-in", str(issued.cert), "-inkey", str(issued.key),
            "-name", alias, "-out", str(path), "-passout", "env:TIDEMARK_KEYSTORE_PASSWORD",
            env={"TIDEMARK_KEYSTORE_PASSWORD": password},
        )  # fmt: skip
    return path


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

    def issue(self, name: str) -> Certificate:
        """A server certificate for ``name`` on ``127.0.0.1`` and ``localhost``."""
        return self._sign(
            name,
            name,
            f"subjectAltName=IP:{HOST},DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )

    def issue_client(self, name: str) -> Certificate:
        """A client certificate whose subject is ``CN=<name>`` (the principal's name)."""
        return self._sign(f"client-{name}", name, "extendedKeyUsage=clientAuth\n")

    def _sign(self, stem: str, common_name: str, extensions: str) -> Certificate:
        """A new key and a certificate for ``common_name`` signed by the CA with
        ``extensions``, in files named by ``stem`` (kept when made already)."""
        issued = Certificate(
            key=self.directory / f"{stem}-key.pem",
            cert=self.directory / f"{stem}.pem",
            keystore=self.directory / f"{stem}-keystore.pem",
        )
        if issued.keystore.exists():
            return issued
        request = self.directory / f"{stem}.csr"
        extfile = self.directory / f"{stem}.ext"
        extfile.write_text(extensions + "keyUsage=critical,digitalSignature,keyEncipherment\n")
        _openssl(
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={common_name}",
            "-keyout", str(issued.key), "-out", str(request),
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(request), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-days", DAYS, "-extfile", str(extfile),
            "-out", str(issued.cert),
        )  # fmt: skip
        issued.keystore.write_text(issued.key.read_text() + issued.cert.read_text())
        return issued

    def pkcs12(self, name: str, password: str) -> Path:
        """Server ``name``'s key and certificate as a PKCS#12 keystore under ``password``
        (for a Java server that reads no PEM)."""
        return _export_pkcs12(self.issue(name), name, self.directory / f"{name}.p12", password)

    def client_pkcs12(self, name: str, password: str) -> Path:
        """Client ``name``'s key and certificate as a PKCS#12 keystore under ``password``
        (``ssl.keystore.location``: librdkafka and Java's Kafka client both read it)."""
        path = self.directory / f"client-{name}.p12"
        return _export_pkcs12(self.issue_client(name), name, path, password)

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


__all__ = ["TRUSTSTORE_PASSWORD", "Certificate", "PrivateCA"]
