"""schemas/README.md (the mark protocol) agrees with the code: reasons, headers, example.

A producer in another language follows only that page, so every rejection
reason the controller can write must be in its table (and nothing else),
and the header bytes and the worked example must be the codec's own.
"""

from __future__ import annotations

import re
from pathlib import Path

from tidemark.controller import admission
from tidemark.controller.watermarks import Verdict
from tidemark.schemas.codec import default_registry
from tidemark.schemas.records import WriterMarkRecord
from tidemark.schemas.tables import Reason

DOC = (Path(__file__).resolve().parents[2] / "schemas" / "README.md").read_text("utf-8")


def _section(number: int) -> str:
    start = DOC.index(f"\n## {number}. ")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end]


def _hex(text: str) -> bytes:
    return bytes.fromhex(re.sub(r"[^0-9a-fA-F]", "", text))


def _leading_bytes(line: str) -> bytes:
    """The hex bytes a line of the example starts with (the comment follows them)."""
    tokens = []
    for token in line.split():
        if not re.fullmatch(r"[0-9a-f]{2}", token):
            break
        tokens.append(token)
    return bytes.fromhex("".join(tokens))


def test_every_reason_the_controller_emits_is_documented_and_no_other() -> None:
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", _section(7), re.MULTILINE))
    emitted = set(Reason.ALL)
    # the reasons produced outside tidemark.schemas.tables are spelled the same
    assert {v.value for v in Verdict if v is not Verdict.ACCEPTED} <= emitted
    assert {
        admission.NEGATIVE_TIME,
        admission.FUTURE_TIME,
        admission.IMPERSONATED,
        admission.SUPERSEDED,
        admission.UNREGISTERED,
    } <= emitted
    assert documented == emitted


def test_documented_headers_are_the_codecs() -> None:
    table = dict(
        re.findall(
            r"^\s*\| `(writer_mark\.v\d+)` \| `0x[0-9A-F]{16}` \| `([0-9A-F ]+)` \|", DOC, re.M
        )
    )
    fingerprints = dict(re.findall(r"`(writer_mark\.v\d+)` \| `(0x[0-9A-F]{16})`", DOC))
    kept = {v.label: v for v in default_registry().versions() if v.name == "writer_mark"}
    assert set(table) == set(kept)
    for label, version in kept.items():
        assert _hex(table[label]) == version.header, label
        assert int(fingerprints[label], 16) == version.fingerprint, label


def test_worked_example_is_what_the_codec_writes() -> None:
    block = _section(3).split("Example (v2)")[1].split("```")[1]
    data = b"".join(_leading_bytes(line) for line in block.strip().splitlines())
    mark = WriterMarkRecord(
        "shop/orders", "w1", 1000, {0: 5, 4294967297: 3}, True, None, "9f2c", 1200
    )
    assert data == mark.encode()
    assert WriterMarkRecord.decode(data) == mark
