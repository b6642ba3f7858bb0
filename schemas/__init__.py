"""Avro schemas of every record tidemark puts on a Kafka topic or in a Delta table.

    >>> from tidemark.schemas.records import WriterMarkRecord
    >>> rec = WriterMarkRecord("shop/orders", "w1", time=1000, position={7: 3})
    >>> WriterMarkRecord.decode(rec.encode()).position
    {7: 3}

Kept in ``schemas/versions/<name>.v<N>.avsc`` (every version ever released):

- ``writer_mark`` — a writer's noted time and position on the marks topic
  (key = stream, partition = the stream's bucket); ``alive=false`` is the
  writer's shutdown; ``transaction_id`` is set for a transaction's mark.
- ``watermark`` — one emitted watermark, a row of the Delta table ``marks``.
- ``scheduled_message`` — a timeline's message, delivered at ``timestamp``.

Events themselves need no envelope: an event is stored as the application's
bytes, its routing key as the Kafka key, its stored timestamp as the Kafka
record timestamp; the segment is the partition.

Framing and evolution: :mod:`tidemark.schemas.codec`. Typed records:
:mod:`tidemark.schemas.records`.
The Delta tables' layout and rows: :mod:`tidemark.schemas.tables` (pyarrow schemas derived
from it: :mod:`tidemark.schemas.arrow`).
This package imports nothing of the project except ``tidemark.errors``.
"""
