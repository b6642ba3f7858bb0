"""What ``tidemark`` verbs say on each outcome, against real Kafka, ZooKeeper and Delta:
a misspelt name fails at once naming it, ``--format json`` is one object per outcome
(lists: one per line), text shows no Python reprs, ``read --until`` stops at its bound,
options stand anywhere in a verb."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.integration import test_reader_group as rg
from tests.integration.test_reader_cli import cli_env, run, write_three_rounds
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.writing.writer import EventWriter

BASE = rg.BASE
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig
__all__ = ["cli_env"]  # the fixture, shared with the reader CLI's tests

REPR = re.compile(r"\{\d+: |\{'|\['|\bNone\b|\bTrue\b|\bFalse\b|KeyRange\(|<\w+ object")
"""What a Python repr looks like in text output."""


@pytest.fixture
def written(cli_env, manager, store, kafka, wconfig, unique):
    """A two-segment stream holding three rounds of events and watermarks
    (``write_three_rounds``) under cli_env; the stream and its watermark maker."""
    name = rg.make_stream(manager, unique, segments=2)
    return name, write_three_rounds(name, store, cli_env, kafka, wconfig)


@pytest.fixture
def stream(written):
    return written[0]


def test_a_misspelt_name_fails_at_once_naming_it(
    cli_env, capsys, stream, store, kafka, unique, tmp_path, monkeypatch
):
    """Every verb that names a stream, scope, reader group or delta root that does not
    exist: exit 1 well before any timeout, one line naming it on stderr, and with
    ``--format json`` one JSON object on stdout saying the same."""
    missing, nowhere = f"nope{unique}/missing", str(tmp_path / "elsewhere")
    group = f"nogroup{unique}"
    cases = [
        (["wait", missing, "--time", "now", "--timeout", "60s"], missing),
        (["wait", stream, missing, "--time", "now", "--timeout", "60s"], missing),
        (["wait", stream, "--time", "now", "--timeout", "60s", "--delta-root", nowhere], nowhere),
        (["laggards", missing], missing),
        (["laggards", stream, "--delta-root", nowhere], nowhere),
        (["watermarks", missing], missing),
        (["read", missing], missing),
        (["read", stream, missing], missing),
        (["write", missing, "x"], missing),
        (["stream", "describe", missing], missing),
        (["stream", "update", missing, "--segments", "3"], missing),
        (["stream", "scale", missing, "--seal", "0", "--ranges", "0:0.5,0.5:1"], missing),
        (["stream", "truncate", missing, "--cut", "0=0"], missing),
        (["stream", "seal", missing], missing),
        (["stream", "delete", missing], missing),
        (["stream", "release", missing], missing),
        (["stream", "observe", missing, "--lateness", "1s"], missing),
        (["stream", "list", f"nope{unique}"], f"nope{unique}"),
        (["scope", "delete", f"nope{unique}"], f"nope{unique}"),
        (["window", group], group),
        (["seek", group, "--ago", "1m"], group),
        (["group", "describe", group], group),
        (["group", "checkpoints", group], group),
        (["group", "checkpoint", group, "c1"], group),
        (["group", "reset", group, "--cut", "0=0"], group),
        (["controller", "status", "--delta-root", nowhere], nowhere),
    ]
    wrong = []
    for argv, named in cases:
        started = time.monotonic()
        code, out, err = run(capsys, *argv, "--format", "json")
        took = time.monotonic() - started
        try:
            outcome = json.loads(out)
        except ValueError:
            outcome = None
        fine = (
            code == 1
            and took < 20
            and named in err
            and err.count("\n") == 1
            and "Traceback" not in err
            and isinstance(outcome, dict)
            and outcome.get("exit_code") == 1
            and named in outcome.get("error", "")
        )
        if not fine:
            wrong.append(f"{' '.join(argv)}: exit {code} after {took:.1f} s, {err!r} {out!r}")
    assert wrong == []

    # A wrong delta root in the environment: the verbs that read by time or windows.
    group = f"g{unique}"
    ReaderGroup.create(group, stream, **rg.group_kw(store, kafka, cli_env)).close()
    monkeypatch.setenv("TIDEMARK_DELTA_ROOT", nowhere)
    for argv in (
        ["read", stream, "--ago", "1d"],
        ["read", stream, "--until", "now"],
        ["window", group],
        ["seek", group, "--ago", "1m"],
        ["wait", stream, "--time", "now", "--timeout", "60s"],
    ):
        code, _, err = run(capsys, *argv)
        assert code == 1 and f"no watermark tables under {nowhere}" in err, (argv, err)


def test_wait_answers_in_json_on_every_outcome(cli_env, capsys, stream, manager, unique):
    """Reached: one object with ``reached`` true; timed out (exit 75): one object with
    ``reached`` false, the latest watermark and the writers holding it back; several
    streams: one such object per line."""
    root = cli_env
    code, out, _ = run(capsys, "wait", stream, "--time", str(BASE + 150), "--format", "json")
    assert code == 0
    reached = json.loads(out)
    assert (reached["stream"], reached["seq"], reached["time"]) == (stream, 1, BASE + 150)
    assert reached["reached"] is True and reached["upper_time"] >= BASE + 150

    late = str(BASE + 10_000)
    code, out, err = run(
        capsys, "wait", stream, "--time", late, "--timeout", "300", "--format", "json"
    )
    assert code == 75 and "has not reached" in err
    outcome = json.loads(out)
    assert outcome["reached"] is False and outcome["seq"] == 2 and outcome["holding"] == []

    other = f"o{unique}/s"
    manager.create_scope(f"o{unique}")
    from tidemark.controller.config import ScalingPolicy, StreamConfiguration

    manager.create(other, StreamConfiguration(ScalingPolicy.fixed(1)))
    code, out, _ = run(
        capsys, "wait", stream, other, "--time", str(BASE), "--timeout", "300", "--format", "json",
        "--delta-root", root,
    )  # fmt: skip
    assert code == 75
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["stream"], r["reached"], r["seq"]) for r in rows] == [(other, False, None)]


def test_text_output_shows_no_python_reprs(cli_env, capsys, stream, store, kafka, wconfig, unique):
    group = f"g{unique}"
    ReaderGroup.create(group, stream, **rg.group_kw(store, kafka, cli_env)).close()
    with EventWriter("h", stream, store=store, bootstrap_servers=kafka, config=wconfig) as writer:
        writer.write(
            b"with headers", "k", timestamp=BASE + 500, headers=[("a", b"1"), ("b", b"\xff")]
        )
    verbs = [
        ["stream", "describe", stream],
        ["stream", "truncate", stream, "--cut", "0=0,1=0"],
        ["watermarks", stream],
        ["read", stream, "--count", "13"],
        ["window", group],
        ["seek", group, "--timestamp", str(BASE + 160)],
        ["window", group],
        ["group", "checkpoint", group, "c1"],
        ["group", "checkpoints", group],
        ["group", "describe", group],
        ["laggards", stream],
        ["wait", stream, "--time", str(BASE + 150)],
        ["stream", "list", stream.split("/")[0]],
    ]
    shown = []
    for argv in verbs:
        code, out, err = run(capsys, *argv)
        assert code == 0, (argv, err)
        shown += [f"{' '.join(argv)}: {line}" for line in out.splitlines() if REPR.search(line)]
    assert shown == []


def test_read_until_stops_at_the_bound(cli_env, written, store, kafka, wconfig):
    """``read --until T --follow`` ends by itself once the watermarks show every event
    before T read -- at once when one is there, else when it comes -- printing exactly
    the events before T."""

    stream, marks = written

    def follow(until: int) -> subprocess.Popen[str]:
        argv = ["read", stream, "--until", str(until), "--follow", "--format", "json"]
        return subprocess.Popen(
            [sys.executable, "-m", "tidemark.cli.main", *argv],
            env=dict(os.environ, PYTHONPATH=os.getcwd()),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def outcome(proc: subprocess.Popen[str]) -> tuple[int, list[int]]:
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err[-2000:]
        return proc.returncode, sorted(json.loads(line)["timestamp"] for line in out.splitlines())

    # complete through BASE + 150 already (the second watermark): it stops there
    rounds = [BASE + r * 100 + j for r in range(3) for j in range(4)]
    assert outcome(follow(BASE + 150)) == (0, rounds[:8])
    # BASE + 302 is not complete yet: it reads on until a watermark passes it
    proc = follow(BASE + 302)
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for j in range(4):
            w.write(f"e3{j}".encode(), routing_key=f"k{j}", timestamp=BASE + 300 + j)
        marks.note(w, BASE + 350)
        assert marks.cycle().time == BASE + 350
    assert outcome(proc) == (0, [*rounds, BASE + 300, BASE + 301])


def test_write_takes_options_between_its_arguments(cli_env, capsys, manager, unique):
    stream = rg.make_stream(manager, unique, segments=1)
    code, out, err = run(capsys, "write", stream, "--key", "k", "x", "y", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["events"] == 2
    code, out, _ = run(capsys, "read", stream, "--format", "json")
    assert [(r["key"], r["body"]) for r in map(json.loads, out.splitlines())] == [
        ("k", "x"),
        ("k", "y"),
    ]
