"""The nemesis's clients: writers of each kind and a reader group, each recording its
history (tests/deploy/nemesis/history.py) from its own thread while faults happen.

A writer's event body is ``writer:number``; an event counts as acknowledged once the
call that sends it (``flush``, ``commit``) returned, a time as noted once its mark was
flushed. A call that fails during a fault is retried with the next number: what it
sent may or may not be in Kafka, and the checker only holds acknowledged events.
"""

from __future__ import annotations

import logging
import threading
import time

from tests.deploy.deployment import Deployment
from tests.deploy.nemesis.history import History, Noted, Read, Written
from tests.deploy.writers import open_writer
from tidemark.controller.naming import topic_for
from tidemark.pipelines.reading.group import ReaderGroup

log = logging.getLogger(__name__)
PAUSE_S = 0.2


def body(writer: str, number: int) -> bytes:
    return f"{writer}:{number}".encode()


def parse(value: bytes) -> tuple[str, int]:
    writer, number = value.decode().rsplit(":", 1)
    return writer, int(number)


class Client:
    """A thread doing ``step`` until stopped; errors during faults are counted, not fatal."""

    def __init__(self, name: str, history: History) -> None:
        self.name = name
        self.history = history
        self.halt = threading.Event()
        self.failures = 0
        self.errors: list[str] = []  # the last few, for a failure's report
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def step(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _run(self) -> None:
        while not self.halt.is_set():
            try:
                self.step()
            except Exception as exc:  # a fault is on: the next step tries again
                self.failures += 1
                self.errors = [*self.errors[-4:], f"{type(exc).__name__}: {exc}"]
                log.info("%s: %s", self.name, exc)
                self.halt.wait(1.0)
            self.halt.wait(PAUSE_S)

    def stop(self) -> None:
        self.halt.set()
        self.thread.join(120)
        self.close()


class Writer(Client):
    """An ``EventWriter``, or the drop-in ``TidemarkProducer``: write one event, flush,
    note its time, flush."""

    def __init__(
        self,
        d: Deployment,
        stream: str,
        name: str,
        history: History,
        drop_in: bool = False,
    ) -> None:
        super().__init__(name, history)
        self.stream = stream
        self.number = 0
        self.writer = open_writer(d, stream, name, drop_in=drop_in)
        self.drop_in = drop_in

    def step(self) -> None:
        number, self.number = self.number, self.number + 1
        now = time.time_ns() // 1_000_000
        if self.drop_in:
            # Producer's way: flush returns what is still in flight, errors go to the callback
            errors: list[object] = []
            self.writer.produce(
                topic_for(self.stream),
                body(self.name, number),
                f"k{number}".encode(),
                timestamp=now,
                on_delivery=lambda err, msg: errors.append(err),
            )
            if self.writer.flush(30) or errors != [None]:
                raise RuntimeError(f"event {number} not acknowledged: {errors}")
        else:
            self.writer.write(body(self.name, number), routing_key=f"k{number}", timestamp=now)
            self.writer.flush()
        self.history.written.append(Written(self.name, number, now, self.history.tick()))
        self.writer.note_time(now)
        in_flight = self.writer.flush(30) if self.drop_in else self.writer.flush()
        if in_flight:  # the drop-in's count; EventWriter.flush raises instead
            raise RuntimeError(f"the note of {now} still in flight")
        self.history.noted.append(Noted(self.name, now, self.history.tick()))

    def close(self) -> None:
        self.writer.close()


class TransactionWriter(Client):
    """A ``TransactionalWriter``: two events a transaction, its time noted by the commit;
    every fourth transaction aborted on purpose (its events must never be seen)."""

    def __init__(self, d: Deployment, stream: str, name: str, history: History) -> None:
        super().__init__(name, history)
        self.number = 0
        self.transactions = 0
        self.writer = open_writer(d, stream, name, transactional=True)

    def step(self) -> None:
        now = time.time_ns() // 1_000_000
        numbers = [self.number, self.number + 1]
        self.number += 2
        self.transactions += 1
        txn = self.writer.begin()
        for n in numbers:
            txn.write(body(self.name, n), routing_key=f"k{n}", timestamp=now)
        if self.transactions % 4 == 0:
            txn.abort()
            for n in numbers:
                self.history.written.append(
                    Written(self.name, n, now, self.history.tick(), committed=False)
                )
            return
        txn.commit(timestamp=now)
        at = self.history.tick()
        for n in numbers:
            self.history.written.append(Written(self.name, n, now, at))
        self.history.noted.append(Noted(self.name, now, self.history.tick()))

    def close(self) -> None:
        self.writer.close()


class GroupReader(Client):
    """One reader of a reader group, reading from the stream's start; the group takes a
    checkpoint every ``every_s`` seconds."""

    def __init__(self, group: ReaderGroup, history: History, every_s: float = 30.0) -> None:
        super().__init__("group-reader", history)
        self.group = group
        self.reader = group.reader("r1")
        self.every_s = every_s
        self.next_checkpoint = time.monotonic() + every_s
        self.checkpoints = 0

    def step(self) -> None:
        if time.monotonic() >= self.next_checkpoint:
            self.checkpoints += 1
            self.group.initiate_checkpoint(f"nemesis-{self.checkpoints}")
            self.next_checkpoint = time.monotonic() + self.every_s
        for _ in range(200):
            event = self.reader.read_next(timeout_ms=500)
            if event is None:
                return
            if event.is_checkpoint:
                continue
            writer, number = parse(event.body)
            self.history.reads.append(
                Read(writer, number, event.segment, event.offset, self.history.tick())
            )

    def close(self) -> None:
        self.reader.close()
