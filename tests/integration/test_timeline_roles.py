"""Stream times in the timeline are the stream clock's, enforced by PostgreSQL's grants
(``grant_timeline_roles``): a client role puts and reads messages but moving a stream's
time is refused by the database; the clock role (the relay's and consumers') records it,
and its consumer then hands out the message that waited for it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tidemark.pipelines.timeline.config import ConsumerConfig, TimelineConfig
from tidemark.pipelines.timeline.consumer import TimelineConsumer
from tidemark.pipelines.timeline.exceptions import StreamTimeNotPermittedError
from tidemark.pipelines.timeline.grants import grant_timeline_roles
from tidemark.pipelines.timeline.producer import TimelineProducer
from tidemark.pipelines.timeline.store import TimelineStore

T = 1_000_000  # an event time long past by the wall clock: due once the stream reaches it


class FixedStreamClock:
    """A stream clock that knows one stream's watermark time."""

    def __init__(self, stream: str, time_ms: int) -> None:
        self.stream, self.time_ms = stream, time_ms

    def stream_time_ms(self, stream: str) -> int | None:
        return self.time_ms if stream == self.stream else None


@pytest.fixture
def logins(postgres: str, unique: str) -> Iterator[dict[str, str]]:
    """A client and a clock login role, granted by the schema's owner; their DSNs."""
    names = {"client": f"tl_client_{unique}", "clock": f"tl_clock_{unique}"}
    with psycopg.connect(postgres, autocommit=True) as conn:
        with TimelineStore(postgres) as store:
            store.migrate()
        for name in names.values():
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(name), sql.Literal(f"{name}-pw")
                )
            )
        grant_timeline_roles(conn, clients=[names["client"]], clocks=[names["clock"]])
        try:
            yield {
                kind: psycopg.conninfo.make_conninfo(postgres, user=name, password=f"{name}-pw")
                for kind, name in names.items()
            }
        finally:
            for name in names.values():
                conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_a_client_role_cannot_move_a_stream_time_and_the_clock_role_can(
    postgres: str, logins: dict[str, str], unique: str
) -> None:
    timeline, stream = f"roles-{unique}", f"s{unique}/orders"
    with TimelineStore(logins["client"]) as client:
        client.migrate()  # the schema is there: a client migrates nothing, creates nothing
        client.create_timeline(TimelineConfig(timeline, buckets=2))
    with TimelineProducer(logins["client"], timeline, "app") as producer:
        producer.put(b"backfill report", due_at_stream_time=(stream, T), id="report")
        with pytest.raises(StreamTimeNotPermittedError, match="may not record stream times"):
            producer.store.advance_stream_time(stream, producer.store.now_ms())
        assert producer.store.stream_times([stream]) == {}
        assert producer.store.count(timeline).waiting == 1
    with psycopg.connect(logins["client"], autocommit=True) as conn:  # nor in plain SQL
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO timeline_stream_times VALUES (%s, %s, 0)", (stream, 2**40))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE timeline_stream_times SET time_ms = time_ms + 300000")

    config = ConsumerConfig("relay-1", lease_ms=60_000, use_notify=False, max_idle_ms=200)
    with TimelineConsumer(
        logins["clock"], timeline, config, stream_clock=FixedStreamClock(stream, T)
    ) as consumer:
        leased = []
        for _ in range(20):  # a poll records the stream's time, then leases what it released
            leased += consumer.poll(timeout_ms=300)
            if leased:
                break
        assert [lease.message.id for lease in leased] == ["report"]
        consumer.ack(leased)
    with TimelineStore(logins["clock"]) as clock:
        assert clock.stream_times([stream]) == {stream: T}
        assert clock.advance_stream_time(stream, T + 1) == T + 1
