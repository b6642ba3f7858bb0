"""``tidemark read | watermarks | window | seek`` against real services."""

from __future__ import annotations

import json

import pytest

from tests.integration import test_reader_group as rg
from tidemark.cli.main import main
from tidemark.infra.ports import unused_address
from tidemark.pipelines.reading.group import ReaderGroup
from tidemark.pipelines.writing.writer import EventWriter

BASE = rg.BASE
FAST = rg.FAST
Marks = rg.Marks
make_stream = rg.make_stream
# the shared fixtures
manager, settings, store, wconfig = rg.manager, rg.settings, rg.store, rg.wconfig


@pytest.fixture
def cli_env(monkeypatch, kafka, zookeeper, unique, zk_client, tmp_path):
    monkeypatch.setenv("TIDEMARK_KAFKA_BOOTSTRAP", kafka)
    monkeypatch.setenv("TIDEMARK_ZK_CONNECT", f"{zookeeper}/tidemark-test-{unique}")
    monkeypatch.setenv("TIDEMARK_DELTA_ROOT", str(tmp_path))
    return str(tmp_path)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


PROBE = """
import sys
import tidemark.cli.main as m
try:
    code = m.main(sys.argv[1:])
finally:
    print("LOADED", sorted(k for k in ("pandas", "numpy") if k in sys.modules), file=sys.stderr)
sys.exit(code)
"""


def run_fresh(*argv):
    """A verb in a fresh process, as a user runs it: (exit code, stdout, heavy modules
    it loaded). Light verbs block pandas and numpy; a path that needs them fails here."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.getcwd())
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=120
    )
    loaded = next(ln for ln in done.stderr.splitlines() if ln.startswith("LOADED"))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.returncode, done.stdout, loaded.removeprefix("LOADED ")


def write_three_rounds(stream, store, root, kafka, wconfig):
    """12 events e00..e23 at BASE + round * 100 + j, a watermark at BASE + round * 100 + 50
    after each round of four; the watermark maker (to go on)."""
    marks = Marks(stream, store, root)
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for rnd in range(3):
            for j in range(4):
                w.write(f"e{rnd}{j}".encode(), routing_key=f"k{j}", timestamp=BASE + rnd * 100 + j)
            marks.note(w, BASE + rnd * 100 + 50)
            marks.cycle()
    return marks


def test_read_watermarks_window_seek(cli_env, capsys, manager, store, kafka, wconfig, unique):
    root = cli_env
    stream = make_stream(manager, unique, segments=2)
    write_three_rounds(stream, store, root, kafka, wconfig)

    code, out, _ = run(capsys, "read", stream, "--format", "json", "--wait-ms", "1500")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 12
    assert set(rows[0]) >= {"segment", "offset", "timestamp", "body"}

    code, out, _ = run(capsys, "read", stream, "--timestamp", str(BASE + 150), "--format", "json")
    assert sorted(json.loads(line)["timestamp"] for line in out.splitlines()) == [
        BASE + 200 + j for j in range(4)
    ]
    code, out, _ = run(capsys, "read", stream, "--ago", "30d", "--count", "2", "--format", "json")
    assert len(out.splitlines()) == 2

    code, out, _ = run(capsys, "watermarks", stream, "--since", str(BASE + 100), "--format", "json")
    assert [json.loads(line)["seq"] for line in out.splitlines()] == [1, 2]

    group = ReaderGroup.create(
        f"g{unique}", stream, store=store, bootstrap_servers=kafka, delta_root=root, config=FAST
    )
    group.close()
    code, out, _ = run(capsys, "seek", f"g{unique}", "--timestamp", str(BASE + 160))
    assert code == 0
    code, out, _ = run(capsys, "window", f"g{unique}", "--format", "json")
    payload = json.loads(out)
    # Exactly at the second watermark's cut: passed (Pravega's rule, time advances).
    assert (payload["lower"], payload["upper"]) == (BASE + 150, BASE + 250)
    seeked = payload["stream_cut"]

    # checkpoints: take one (no reader online: at once), list, reset elsewhere and back
    group_name = f"g{unique}"
    code, out, _ = run(capsys, "group", "checkpoint", group_name, "c1", "--format", "json")
    assert code == 0
    taken = json.loads(out)
    assert (taken["stream_cut"], taken["lower"], taken["upper"]) == (seeked, BASE + 150, BASE + 250)
    assert taken["watermark_seq"] == 1
    code, out, _ = run(capsys, "group", "checkpoints", group_name, "--format", "json")
    assert [json.loads(line)["name"] for line in out.splitlines()] == ["c1"]
    head = json.dumps({s: 0 for s in seeked})
    code, out, _ = run(capsys, "group", "reset", group_name, "--cut", head, "--format", "json")
    assert code == 0 and json.loads(out)["stream_cut"] == {s: 0 for s in seeked}
    code, out, _ = run(capsys, "window", group_name, "--format", "json")
    assert json.loads(out)["lower"] is None
    code, out, _ = run(
        capsys, "group", "reset", group_name, "--checkpoint", "c1", "--format", "json"
    )
    assert code == 0 and json.loads(out)["stream_cut"] == seeked
    code, out, _ = run(capsys, "window", group_name, "--format", "json")
    assert (json.loads(out)["lower"], json.loads(out)["stream_cut"]) == (BASE + 150, seeked)
    code, _, err = run(capsys, "group", "reset", group_name, "--checkpoint", "nope")
    assert code == 1 and "no checkpoint 'nope'" in err
    code, _, err = run(capsys, "group", "checkpoint", group_name, "c1")
    assert code == 1 and "has a checkpoint 'c1' already" in err
    code, _, err = run(capsys, "group", "reset", group_name, "--cut", "[1, 2]")
    assert code == 1 and "expected segment=offset pairs" in err

    # The same verbs in fresh processes: no pandas, no numpy, same answers.
    _, out, loaded = run_fresh("read", stream, "--timestamp", str(BASE + 150), "--format", "json")
    assert len(out.splitlines()) == 4 and loaded == "[]"
    _, out, loaded = run_fresh("watermarks", stream, "--format", "json")
    assert len(out.splitlines()) == 3 and loaded == "[]"
    _, out, loaded = run_fresh("seek", group_name, "--timestamp", str(BASE + 160))
    assert loaded == "[]"
    _, out, loaded = run_fresh("window", group_name, "--format", "json")
    assert json.loads(out)["stream_cut"] == seeked and loaded == "[]"


@pytest.mark.parametrize(
    ("argv", "message", "exit_code"),
    [
        # a bad number is a usage error: exit 2, one line
        (["read", "{stream}", "--timestamp", "-5"], "timestamp", 2),
        (["read", "{stream}", "--timestamp", "12.5"], "timestamp", 2),
        (["read", "{stream}", "--timestamp", "9" * 5000], "outside 0 … 2**63-1", 2),
        (["read", "{stream}", "--ago", "yesterday"], "duration", 2),
        (["wait", "{stream}", "--time", "9" * 5000, "--timeout-ms", "1000"], "outside", 2),
        (["read", "nope/missing"], "unknown stream", 1),
        (["window", "no-such-group"], "unknown reader group", 1),
        (["seek", "no-such-group", "--timestamp", "5"], "unknown reader group", 1),
    ],
)
def test_bad_input_is_a_clear_error(cli_env, capsys, manager, unique, argv, message, exit_code):
    stream = make_stream(manager, unique, segments=1)
    code, _, err = run(capsys, *[a.format(stream=stream) for a in argv])
    assert code == exit_code
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_failed_seek_leaves_the_group_where_it_was(
    cli_env, capsys, manager, store, kafka, wconfig, unique
):
    stream = make_stream(manager, unique, segments=1)
    marks = Marks(stream, store, cli_env)  # (seek by time needs the tables)
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for j in range(4):
            w.write(b"x", routing_key="k", timestamp=BASE + j)
        marks.note(w, BASE + 10)
        marks.cycle()
    group = ReaderGroup.create(
        f"g{unique}", stream, store=store, bootstrap_servers=kafka, delta_root=cli_env, config=FAST
    )
    with group.reader("r") as reader:
        reader.read_next(timeout_ms=5000)
        reader.read_next(timeout_ms=5000)
        reader.commit()
        code, _, err = run(capsys, "seek", f"g{unique}", "--timestamp", str(BASE))
        assert code == 1 and "online readers" in err
    code, _, err = run(capsys, "seek", f"g{unique}", "--timestamp", "-1")
    assert code == 2  # a bad number is a usage error
    assert group.stream_cut() == {0: 2}
    group.close()


def test_read_stops_at_the_end_of_committed_data(
    cli_env, capsys, manager, store, kafka, wconfig, unique
):
    """Transactions (commit markers take offsets), an aborted one, a scale: ``read``
    returns every committed record and stops there, not after its safety timeout."""
    import time

    from tidemark.controller.model import KeyRange
    from tidemark.pipelines.writing.transactions import TransactionalWriter

    stream = make_stream(manager, unique, segments=2)
    with TransactionalWriter(
        "t1", stream, store=store, bootstrap_servers=kafka, config=wconfig
    ) as writer:
        txn = writer.begin()
        for j in range(6):
            txn.write(f"a{j}".encode(), routing_key=f"k{j}", timestamp=BASE + j)
        txn.commit(BASE + 10)
        txn = writer.begin()
        txn.write(b"aborted", routing_key="k0", timestamp=BASE + 11)
        txn.abort()
    manager.scale(stream, [0], [KeyRange(0.0, 0.25), KeyRange(0.25, 0.5)])
    with EventWriter("w", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
        for j in range(6):
            w.write(f"b{j}".encode(), routing_key=f"k{j}", timestamp=BASE + 20 + j)

    started = time.monotonic()
    code, out, _ = run(capsys, "read", stream, "--format", "json", "--wait-ms", "60000")
    elapsed = time.monotonic() - started
    assert code == 0
    bodies = sorted(json.loads(line)["body"] for line in out.splitlines())
    assert bodies == sorted([f"a{j}" for j in range(6)] + [f"b{j}" for j in range(6)])
    assert elapsed < 30, f"read waited {elapsed:.1f} s: it did not see the end of the data"


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def test_read_until_and_follow(cli_env, capsys, manager, store, kafka, wconfig, unique):
    """``--from``/``--until`` in ISO-8601 select [from, until); ``--follow`` prints what
    arrives after the end and stops on SIGINT with exit 0, every row written printed."""
    import os
    import signal
    import subprocess
    import sys

    stream = make_stream(manager, unique, segments=2)
    write_three_rounds(stream, store, cli_env, kafka, wconfig)

    code, out, _ = run(
        capsys, "read", stream, "--from", _iso(BASE + 150), "--until", _iso(BASE + 202),
        "--format", "json",
    )  # fmt: skip
    assert code == 0
    assert sorted(json.loads(r)["timestamp"] for r in out.splitlines()) == [BASE + 200, BASE + 201]

    follower = subprocess.Popen(
        [sys.executable, "-m", "tidemark.cli.main", "read", stream, "--follow", "--format", "json"],
        # faulthandler: a follower that does not stop dumps its threads on SIGABRT
        env=dict(os.environ, PYTHONPATH=os.getcwd(), PYTHONFAULTHANDLER="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        rows = [json.loads(follower.stdout.readline()) for _ in range(12)]  # the data so far
        with EventWriter("w2", stream, store=store, bootstrap_servers=kafka, config=wconfig) as w:
            for j in range(4):
                w.write(f"late{j}".encode(), routing_key=f"k{j}", timestamp=BASE + 400 + j)
        rows += [json.loads(follower.stdout.readline()) for _ in range(4)]  # after the end
        follower.send_signal(signal.SIGINT)
        try:
            out, err = follower.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            follower.send_signal(signal.SIGABRT)
            _, err = follower.communicate(timeout=30)
            raise AssertionError(f"the follower did not stop on SIGINT:\n{err[-6000:]}") from None
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err[-2000:]
    assert out == "" and "Traceback" not in err
    bodies = sorted(r["body"] for r in rows)
    assert bodies == sorted(
        [f"e{r}{j}" for r in range(3) for j in range(4)] + [f"late{j}" for j in range(4)]
    )


def test_a_stopped_broker_is_one_line(cli_env, capsys, manager, unique, monkeypatch):
    """The stream is in ZooKeeper, but Kafka at the given address does not answer (a
    port nothing listens on): one line naming Kafka, the address and what to check."""

    import tidemark.cli.control_plane as control_plane_module

    stream = make_stream(manager, unique, segments=1)
    stopped = unused_address()
    monkeypatch.setattr(control_plane_module, "KAFKA_TIMEOUT_S", 1.0)
    code, out, err = run(capsys, "--bootstrap", stopped, "read", stream)
    assert code == 69 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"Kafka is unavailable: {stopped} gave no answer" in err and "--bootstrap" in err
