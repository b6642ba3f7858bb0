"""Schemas and the single-object codec, offline: exact bytes, bad inputs, evolution."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from hypothesis import given
from hypothesis import strategies as st

from tidemark.errors import TidemarkError
from tidemark.schemas import codec
from tidemark.schemas.codec import (
    SchemaRegistry,
    decode,
    default_registry,
    encode,
    rabin_fingerprint,
)
from tidemark.schemas.exceptions import (
    DecodeError,
    EncodeError,
    SchemaError,
    SchemaFileError,
    SchemaMismatchError,
    UnknownFingerprintError,
    UnknownSchemaError,
)
from tidemark.schemas.records import (
    ScheduledMessageRecord,
    WatermarkRecord,
    WriterMarkRecord,
    cut_from_avro,
    decode_record,
)

SCHEDULED = {"id": "m1", "timestamp": 5, "body": b"x", "producer_group": "g", "timeline": "t"}
MARK = WriterMarkRecord("a/b", "w", 5, {0: 3, (1 << 32) | 2: 10}, True, "t")
WATERMARK = WatermarkRecord("a/b", 0, 10, 20, {0: 3}, ("w2", "w1"), 99)


def test_rabin_fingerprint_matches_the_avro_specification() -> None:
    # The Avro specification's test vector: fingerprint64 of the schema "null".
    assert rabin_fingerprint(b'"null"') == 7195948357588979594


def test_every_kept_version_has_fastavros_fingerprint_in_its_header() -> None:
    for version in default_registry().versions():
        expected = fastavro_fingerprint(version.canonical_form, "CRC-64-AVRO")
        assert version.header[2:].hex() == expected


def test_shipped_schemas() -> None:
    assert default_registry().names() == ["scheduled_message", "watermark", "writer_mark"]


def test_scheduled_message_exact_bytes() -> None:
    data = encode("scheduled_message", SCHEDULED)
    header = bytes.fromhex("c3019562da7c8d05645a")  # pins the schema: edit it, break this
    body = bytes.fromhex("046d310a027802670274")
    assert data == header + body
    assert decode(data) == ("scheduled_message", SCHEDULED)


V1_MARK = {k: v for k, v in MARK.to_dict().items() if k not in ("instance", "max_event_time")}


def test_writer_mark_exact_bytes() -> None:
    data = encode("writer_mark.v1", V1_MARK)  # what writers before v2 send
    v1_body = data[10:]
    assert data == bytes.fromhex(
        "c301"
        "63358494c87d236e"  # header (writer_mark.v1)
        "06612f62"
        "0277"
        "0a"  # stream "a/b", writer "w", time 5
        "04"
        "0006"
        "848080802014"
        "00"  # position: 2 items {0: 3}, {2**32 + 2: 10}, end
        "01"
        "020274"  # alive, transaction_id "t"
    )
    assert WriterMarkRecord.decode(data) == MARK  # a v1 mark decodes, instance None
    v2 = WriterMarkRecord(**{**V1_MARK, "position": MARK.position}, instance="i7")
    assert v2.encode() == bytes.fromhex("c301066b40372471b44f") + v1_body + bytes.fromhex(
        "02046937"  # instance "i7"
        "00"  # max_event_time null
    )
    assert WriterMarkRecord.decode(v2.encode()) == v2


def test_writer_mark_v2_carries_max_event_time_and_v1_marks_still_decode() -> None:
    ahead = WriterMarkRecord("a/b", "w", 5, {0: 3}, True, None, max_event_time=55)
    assert WriterMarkRecord.decode(ahead.encode()) == ahead
    assert ahead.encode().endswith(bytes.fromhex("026e"))  # union branch 1, zigzag 55
    reg = default_registry()
    old = reg.encode("writer_mark.v1", V1_MARK)
    assert old[:10].hex() == "c30163358494c87d236e"  # a v1 writer's bytes
    decoded = WriterMarkRecord.decode(old)
    assert decoded == MARK and decoded.max_event_time is None
    # and an old reader (v1) reads a v2 mark, without the new field
    name, view = reg.decode(ahead.encode(), reader="writer_mark.v1")
    assert name == "writer_mark" and "max_event_time" not in view and view["time"] == 5


@pytest.mark.parametrize("record", [MARK, WATERMARK, ScheduledMessageRecord(**SCHEDULED)])
def test_typed_records_round_trip(record: object) -> None:
    assert decode_record(record.encode()) == record  # type: ignore[attr-defined]


def test_watermark_writers_are_sorted_and_cut_is_an_array() -> None:
    d = WATERMARK.to_dict()
    assert d["writers"] == ["w1", "w2"]
    assert d["stream_cut"] == [{"segment": 0, "offset": 3}]


def test_shutdown_mark_defaults() -> None:
    rec = WriterMarkRecord("a/b", "w", 5, alive=False)
    back = WriterMarkRecord.decode(rec.encode())
    assert (back.alive, back.position, back.transaction_id) == (False, {}, None)


def _header(name: str) -> bytes:
    return default_registry().get(name).header


GOOD = encode("scheduled_message", SCHEDULED)

BAD_BYTES = [
    pytest.param(b"", DecodeError, "truncated", id="empty"),
    pytest.param(b"\xc3\x01\x95\x62", DecodeError, "truncated", id="short-header"),
    pytest.param(b"\x00\x01" + GOOD[2:], DecodeError, "not Avro single-object", id="bad-magic"),
    pytest.param(
        b"\xc3\x01" + b"\x00" * 8 + GOOD[10:], UnknownFingerprintError, "unknown", id="unknown-fp"
    ),
    pytest.param(GOOD[:-2], DecodeError, "corrupt or truncated", id="truncated-body"),
    pytest.param(GOOD + b"\x00", DecodeError, "left after", id="trailing"),
    pytest.param(_header("writer_mark") + b"\x07", DecodeError, "corrupt", id="wrong-type-body"),
    pytest.param("text", DecodeError, "expected bytes", id="not-bytes"),
]


@pytest.mark.parametrize(("data", "error", "text"), BAD_BYTES)
def test_bad_bytes_raise_the_projects_error(data: bytes, error: type, text: str) -> None:
    with pytest.raises(error, match=text) as info:
        decode(data)
    assert isinstance(info.value, TidemarkError)
    assert isinstance(info.value, SchemaError)


def test_decode_error_keeps_the_bytes() -> None:
    with pytest.raises(DecodeError) as info:
        decode(GOOD[:-2])
    assert info.value.data == GOOD[:-2]


def test_reading_a_record_as_another_schema_is_refused() -> None:
    with pytest.raises(SchemaMismatchError, match=r"written as watermark\.v1"):
        decode(WATERMARK.encode(), "writer_mark")


BAD_RECORDS = [
    pytest.param("writer_mark", {**MARK.to_dict(), "time": "5"}, EncodeError, id="wrong-type"),
    pytest.param("writer_mark", {**MARK.to_dict(), "time": 2**63}, EncodeError, id="long-overflow"),
    pytest.param(
        "writer_mark",
        {k: v for k, v in MARK.to_dict().items() if k != "stream"},
        EncodeError,
        id="missing-field",
    ),
    pytest.param("writer_mark", {**MARK.to_dict(), "extra": 1}, EncodeError, id="extra-field"),
    pytest.param("scheduled_message", {**SCHEDULED, "body": "str"}, EncodeError, id="str-body"),
    pytest.param("scheduled_message", [1, 2], EncodeError, id="not-a-mapping"),
    pytest.param("no_such_schema", SCHEDULED, UnknownSchemaError, id="unknown-name"),
    pytest.param("writer_mark.v9", MARK.to_dict(), UnknownSchemaError, id="unknown-version"),
]


@pytest.mark.parametrize(("name", "record", "error"), BAD_RECORDS)
def test_bad_records_raise_the_projects_error(name: str, record: object, error: type) -> None:
    with pytest.raises(error) as info:
        encode(name, record)  # type: ignore[arg-type]
    assert isinstance(info.value, SchemaError)


@pytest.mark.parametrize(
    "position",
    [{1: 2**63}, {-(2**63) - 1: 0}, {1: True}],
    ids=["offset-overflow", "segment-overflow", "bool-offset"],
)
def test_a_marks_position_is_still_refused_when_bad(position: dict[int, int]) -> None:
    """A mark's position is checked by the record, not validated item by item by the
    codec (``checked``): a bad entry is still refused."""
    with pytest.raises(EncodeError):
        WriterMarkRecord("a/b", "w", 1, position).encode()


def test_checked_fields_are_validated_as_empty_arrays_and_written_whole() -> None:
    mark = WriterMarkRecord("a/b", "w", 1, {p: p + 1 for p in range(1_000)}, instance="i")
    assert WriterMarkRecord.decode(mark.encode()) == mark
    bad = {**mark.to_dict(), "position": [{"segment": 1, "offset": "x"}]}
    with pytest.raises(EncodeError):
        encode("writer_mark", bad, checked=("position",))  # the strict writer refuses it


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownSchemaError, match="scheduled_message, watermark, writer_mark"):
        encode("nope", {})


def test_typed_record_checks_position_types() -> None:
    with pytest.raises(EncodeError, match="int segment ids"):
        WriterMarkRecord("a/b", "w", 1, {"0": 3})  # type: ignore[dict-item]


def test_a_segment_twice_in_a_position_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="twice"):
        cut_from_avro([{"segment": 1, "offset": 2}, {"segment": 1, "offset": 3}])


# --- evolution ------------------------------------------------------------------------------


CURRENT = default_registry().get("writer_mark")
"""The newest writer mark version, which this build writes for observed marks (noted ones
stay v2); the evolution tests add one after it."""
OBSERVED = WriterMarkRecord("a/b", "w", 5, {0: 3}, True, None, "i", 9, 30_000, 2)
OLD, NEW = f"writer_mark.v{CURRENT.version}", f"writer_mark.v{CURRENT.version + 1}"


def _kept_versions(tmp_path: Path) -> dict[str, object]:
    for version in default_registry().versions():
        if version.name == "writer_mark":
            shutil.copy(version.path, tmp_path / version.path.name)
    raw: dict[str, object] = json.loads(CURRENT.path.read_text())
    return raw


def _evolved_registry(tmp_path: Path) -> SchemaRegistry:
    nxt = _kept_versions(tmp_path)
    nxt["fields"].append({"name": "host", "type": ["null", "string"], "default": None})  # type: ignore[attr-defined]
    (tmp_path / f"{NEW}.avsc").write_text(json.dumps(nxt))
    return SchemaRegistry(tmp_path)


def test_new_optional_field_read_by_an_old_reader(tmp_path: Path) -> None:
    reg = _evolved_registry(tmp_path)
    assert reg.get("writer_mark").version == CURRENT.version + 1
    data = reg.encode("writer_mark", {**OBSERVED.to_dict(), "host": "h1"})
    name, old_view = reg.decode(data, reader=OLD)
    assert name == "writer_mark"
    assert "host" not in old_view
    assert WriterMarkRecord.from_dict(old_view) == OBSERVED


def test_old_record_read_by_a_new_reader_gets_the_default(tmp_path: Path) -> None:
    reg = _evolved_registry(tmp_path)
    old = reg.encode(OLD, OBSERVED.to_dict())
    assert old == OBSERVED.encode()  # the current version is what this build writes today
    _, new_view = reg.decode(old)
    assert new_view["host"] is None
    assert reg.decode(old, reader=NEW)[1] == {**OBSERVED.to_dict(), "host": None}


def test_incompatible_evolution_is_a_mismatch(tmp_path: Path) -> None:
    nxt = _kept_versions(tmp_path)
    nxt["fields"].append({"name": "required_new", "type": "string"})  # type: ignore[attr-defined]
    (tmp_path / f"{NEW}.avsc").write_text(json.dumps(nxt))
    reg = SchemaRegistry(tmp_path)
    with pytest.raises(SchemaMismatchError):
        reg.decode(reg.encode(OLD, OBSERVED.to_dict()))


@pytest.mark.parametrize(
    ("file_name", "content", "text"),
    [
        ("writer_mark.avsc", "{}", "named <name>.v<N>.avsc"),
        ("writer_mark.v1.avsc", "{not json", "not a valid Avro schema"),
        ("writer_mark.v1.avsc", '{"type": "recordz", "name": "X"}', "not a valid Avro schema"),
    ],
)
def test_bad_schema_files(tmp_path: Path, file_name: str, content: str, text: str) -> None:
    (tmp_path / file_name).write_text(content)
    with pytest.raises(SchemaFileError, match=text):
        SchemaRegistry(tmp_path)


def test_two_versions_with_the_same_canonical_form_are_refused(tmp_path: Path) -> None:
    for v in (1, 2):
        shutil.copy(codec.VERSIONS_DIR / "watermark.v1.avsc", tmp_path / f"watermark.v{v}.avsc")
    with pytest.raises(SchemaFileError, match="same canonical form"):
        SchemaRegistry(tmp_path)


# --- properties -----------------------------------------------------------------------------

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
text = st.text(max_size=20)


@given(
    stream=text,
    writer=text,
    time=longs,
    position=st.dictionaries(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), max_size=8),
    alive=st.booleans(),
    txn=st.none() | text,
)
def test_writer_mark_round_trip(
    stream: str, writer: str, time: int, position: dict[int, int], alive: bool, txn: str | None
) -> None:
    rec = WriterMarkRecord(stream, writer, time, position, alive, txn)
    assert WriterMarkRecord.decode(rec.encode()) == rec


@given(data=st.binary(max_size=40))
def test_arbitrary_bytes_never_crash_the_decoder(data: bytes) -> None:
    with contextlib.suppress(SchemaError):
        decode(data)


@given(cut=st.integers(0, len(GOOD) - 1))
def test_every_truncation_is_a_decode_error(cut: int) -> None:
    with pytest.raises(DecodeError):
        decode(GOOD[:cut])


def test_watermark_rows_round_trip() -> None:
    from tidemark.controller.model import Watermark
    from tidemark.schemas.arrow import MARKS_ARROW
    from tidemark.schemas.tables import index_row, marks_row, watermark_from_row

    wm = Watermark("s/t", 100, 180, {1 << 32: 7, 0: 5}, 3)
    row = marks_row(wm, writers=["w1"], emitted_at=42)
    assert row["stream_cut"] == [{"segment": 0, "offset": 5}, {"segment": 1 << 32, "offset": 7}]
    assert list(row) == MARKS_ARROW.names
    assert watermark_from_row(row, Watermark) == wm
    assert index_row(wm, 200) == {
        "stream": "s/t",
        "seq": 3,
        "time": 100,
        "upper_time_max": 200,
        "stream_cut": row["stream_cut"],  # the same cell as marks': a cold lookup reads one
    }
