"""Where the time service may listen, and what it asks of a request (pure parts)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.errors import ConfigurationError
from tidemark.service.access import ServeAccess, check_listen, is_loopback, read_token

pytestmark = pytest.mark.unit


@pytest.fixture
def tls(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("cert")
    key.write_text("key")
    return cert, key


@pytest.mark.parametrize("host", ["127.0.0.1", "127.5.0.1", "::1", "localhost"])
def test_loopback_needs_nothing(host: str) -> None:
    check_listen(host, ServeAccess())


@pytest.mark.parametrize(
    ("token", "with_tls", "missing"),
    [(None, False, "TLS and a token"), ("t" * 16, False, "TLS"), (None, True, "a token")],
)
def test_beyond_loopback_tls_and_a_token_are_asked_by_name(tls, token, with_tls, missing) -> None:
    cert, key = tls if with_tls else (None, None)
    with pytest.raises(ConfigurationError, match=f"on 0.0.0.0 without {missing}:"):
        check_listen("0.0.0.0", ServeAccess(token, cert, key))


def test_beyond_loopback_with_both_or_insecure_it_listens(tls) -> None:
    check_listen("10.1.2.3", ServeAccess("t" * 16, *tls))
    check_listen("serve.example.com", ServeAccess(insecure=True))


@given(st.ip_addresses())
def test_only_loopback_addresses_count_as_loopback(address) -> None:
    assert is_loopback(str(address)) == address.is_loopback


def test_a_token_stays_out_of_reprs_and_is_read_from_its_files_first_line(tmp_path) -> None:
    secret = "s3cr3t-token-0123456789"
    assert secret not in repr(ServeAccess(secret))
    (tmp_path / "t").write_text(f"  {secret}  \nignored\n")
    assert read_token(tmp_path / "t") == secret
    (tmp_path / "e").write_text("\n")
    with pytest.raises(ConfigurationError, match="is empty"):
        read_token(tmp_path / "e")
    with pytest.raises(ConfigurationError, match="shorter than 16"):
        ServeAccess("short")
    with pytest.raises(ConfigurationError, match="both --tls-cert and --tls-key"):
        ServeAccess(tls_cert=tmp_path / "t")
