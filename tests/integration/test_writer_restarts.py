"""Writers restarted after a crash are heard at once, through their registration.

A writer in a process of its own (``tests.writer_process``) is killed with ``kill -9``
(no shutdown mark) and started again under the same writer id. The controller's writer
timeout is ten minutes, so without the registration the new instance would be refused
as ``impersonated`` for that long: here the stream's next watermark comes within
seconds, the dead instance's late mark is refused as ``superseded`` and a forged one
(a token nobody registered) as ``impersonated``. An idle transactional writer keeps its
stream's watermark moving by its heartbeats.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.controller_env import Env
from tests.faults.figures import report
from tests.integration.test_controller_job import produce, wait_for
from tidemark.controller.naming import bucket_of
from tidemark.jobs.controller_job import ControllerJob
from tidemark.jobs.tables import REJECTED_MARKS, Reason, read_table, read_watermarks
from tidemark.pipelines.writing.config import WriterConfig
from tidemark.pipelines.writing.exceptions import AutomaticTimeError
from tidemark.pipelines.writing.transactions import TransactionalWriter
from tidemark.pipelines.writing.writer import EventWriter
from tidemark.schemas.records import WriterMarkRecord

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

TIMEOUT_MS = 600_000
"""The writer timeout: a restart heard only after it would fail every wait below."""
ROOT = Path(__file__).resolve().parents[2]


Process = subprocess.Popen[str]


@dataclass(frozen=True)
class WriterProcess:
    """A writer in a process of its own: the process, its instance token, and the file
    its stderr goes to (:meth:`state` shows its end when a wait fails)."""

    proc: Process
    instance: str
    stderr: Path

    def state(self) -> str:
        running = self.proc.poll() is None
        tail = self.stderr.read_text()[-1500:] if self.stderr.exists() else ""
        return f"pid {self.proc.pid} {'running' if running else self.proc.returncode}: {tail!r}"


def start_writer(env: Env, stream: str, writer: str, kind: str) -> WriterProcess:
    """The writer process, once it has registered."""
    argv = [sys.executable, "-m", "tests.writer_process", env.kafka, env.zk_connect]
    argv += [env.cluster.marks_topic, str(env.cluster.bucket_count), stream, writer, kind]
    err = env.work / f"writer-{writer}-{time.monotonic_ns()}.stderr"
    with err.open("w") as sink:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=sink, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the writer process exited ({proc.wait()}): {err.read_text()[-2000:]}"
    return WriterProcess(proc, str(json.loads(line)["instance"]), err)


def writers_state(writers: list[WriterProcess]) -> str:
    return "; ".join(w.state() for w in writers)


def kill_9(writer: WriterProcess) -> None:
    if writer.proc.poll() is None:
        os.kill(writer.proc.pid, signal.SIGKILL)
    writer.proc.wait()


def produce_mark(env: Env, stream: str, record: WriterMarkRecord) -> bytes:
    raw = record.encode()
    produce(env, stream, raw, bucket_of(stream, env.cluster.bucket_count))
    return raw


@pytest.mark.parametrize("kind", ["event", "transactional"])
def test_a_writer_killed_and_restarted_under_its_id_is_heard_at_once(
    spark: Any, controller_env: Env, unique: str, kind: str
) -> None:
    env = controller_env
    stream = f"k{unique}/s"
    env.create(stream, 2)
    settings = env.settings(writer_timeout_ms=TIMEOUT_MS)
    job = ControllerJob(spark, settings, f"c-{unique}").start()
    procs: list[WriterProcess] = []
    try:
        job.wait_leading()
        first = start_writer(env, stream, "w1", kind)
        procs.append(first)
        wait_for(lambda: len(read_watermarks(settings.delta_root, stream)) >= 3, job)
        kill_9(first)
        job.process_all_available()
        before = read_watermarks(settings.delta_root, stream)

        restarted_at = time.monotonic()
        second = start_writer(env, stream, "w1", kind)
        procs.append(second)
        wait_for(lambda: len(read_watermarks(settings.delta_root, stream)) > len(before), job)
        heard_s = time.monotonic() - restarted_at
        report(
            f"{kind}-writer-restart",
            f"kill -9, restart -> next watermark {heard_s:.1f} s (writer timeout "
            f"{TIMEOUT_MS // 1000} s)",
        )
        assert heard_s < 60, heard_s  # ten times less than the writer timeout

        # after the new registration: the dead instance's late mark, and a forged one
        latest = read_watermarks(settings.delta_root, stream)[-1]
        late = WriterMarkRecord(stream, "w1", latest.time + 1, {}, True, instance=first.instance)
        forged = WriterMarkRecord(
            stream, "w1", latest.time + 1, {}, True, instance=secrets.token_hex(16)
        )
        refused = [produce_mark(env, stream, late), produce_mark(env, stream, forged)]
        wait_for(
            lambda: len(read_table(settings.delta_root, REJECTED_MARKS)) >= 2,
            job,
            state=lambda: (
                f"rejected {read_table(settings.delta_root, REJECTED_MARKS)}; "
                f"{len(read_watermarks(settings.delta_root, stream))} watermarks; "
                f"writers {writers_state(procs)}"
            ),
        )
        seen = len(read_watermarks(settings.delta_root, stream))
        wait_for(
            lambda: len(read_watermarks(settings.delta_root, stream)) > seen + 2,
            job,
            state=lambda: f"writers {writers_state(procs)}",
        )
    finally:
        for proc in procs:
            kill_9(proc)
        job.stop()
    rejected = sorted(
        read_table(settings.delta_root, REJECTED_MARKS), key=lambda r: r["kafka_offset"]
    )
    assert [(r["writer"], r["reason"], bytes(r["raw"])) for r in rejected] == [
        ("w1", Reason.SUPERSEDED, refused[0]),
        ("w1", Reason.IMPERSONATED, refused[1]),
    ]
    assert first.instance != second.instance
    got = read_watermarks(settings.delta_root, stream)
    assert [w.time for w in got] == sorted(w.time for w in got)


def test_an_idle_transactional_writer_keeps_its_streams_watermark_moving(
    spark: Any, controller_env: Env, unique: str
) -> None:
    """It commits once, then nothing: its heartbeats (mark-only transactions) note the
    clock, so the watermark follows the busy writer beside it rather than wait ten minutes
    at the idle writer's commit."""
    env = controller_env
    stream = f"t{unique}/s"
    env.create(stream, 2)
    settings = env.settings(writer_timeout_ms=TIMEOUT_MS)
    config = WriterConfig(
        cluster=env.cluster, linger_ms=1, automatically_note_time=True, note_time_interval_ms=200
    )
    idle = TransactionalWriter(
        "idle", stream, store=env.store, bootstrap_servers=env.kafka, config=config
    )
    busy = EventWriter("busy", stream, store=env.store, bootstrap_servers=env.kafka, config=config)
    job = ControllerJob(spark, settings, f"c-{unique}").start()
    try:
        job.wait_leading()
        txn = idle.begin()
        txn.write(b"once", routing_key="k")
        with pytest.raises(AutomaticTimeError, match="commit\\(\\) without a timestamp"):
            txn.commit(timestamp=1)  # its time is the clock's; the transaction stays open
        txn.commit()
        committed_at = int(time.time() * 1000)  # at or after the commit's noted time
        for n in range(30):
            busy.write(f"event-{n}".encode(), routing_key=f"k{n}")
            time.sleep(0.1)
        busy.flush()
        wait_for(
            lambda: any(
                w.time > committed_at + 5_000 for w in read_watermarks(settings.delta_root, stream)
            ),
            job,
        )
    finally:
        idle.close()
        busy.close()
        job.stop()
    assert read_table(settings.delta_root, REJECTED_MARKS) == []
