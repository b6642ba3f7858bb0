"""Kafka headers on the records tidemark's writers send: checked before anything is sent.

    w.write(b"order 1", "customer-7", headers=[("trace-id", b"4bf92f35"), ("v", b"2")])
    w.write(b"order 2", "customer-7", headers={"content-type": b"application/json"})

Headers are ``(name, value)`` pairs, the name ``str``, the value ``bytes``,
kept in the order given and with repeated names, as Kafka keeps them (a
mapping is taken as its items). Readers get them back byte for byte
(``EventRead.headers``). A bad one -- a name that is not text, a value
that is not bytes, an entry that is not a pair -- is refused with
:class:`InvalidHeaderError` naming it, and nothing of the write is sent.

Names starting ``tidemark-`` are tidemark's (``schemas/README.md``): the
stream writers set no header, but the timeline relay and dead-letter topics
do; applications should not use the prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tidemark.pipelines.writing.exceptions import InvalidHeaderError

Header = tuple[str, bytes]
Headers = Sequence[Header] | Mapping[str, bytes]
"""What a write takes: ``(name, value)`` pairs, or a mapping of names to values."""

KafkaHeaders = list[tuple[str, str | bytes | None]]
"""What ``confluent_kafka.Producer.produce`` takes (checked ones hold bytes values only)."""

RESERVED_PREFIX = "tidemark-"
"""Header names tidemark sets itself (timeline relay, dead letters) start with this."""


def checked_headers(headers: Headers | None, *, as_producer: bool = False) -> KafkaHeaders | None:
    """``headers`` as the list of pairs Kafka's producer takes (``None`` when empty).

    ``as_producer``: take what ``confluent_kafka.Producer.produce`` takes (text and
    ``None`` values too, kept as given) -- the drop-in producer's rule; still a name
    that is not text is refused (``Producer`` would send ``str(name)``).

    >>> checked_headers({"trace-id": b"ab"})
    [('trace-id', b'ab')]
    >>> checked_headers([("trace-id", "ab")])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tidemark.pipelines.writing.exceptions.InvalidHeaderError: header 0 ('trace-id'): value must...
    """
    if headers is None:
        return None
    if type(headers) is list:  # the common case, checked cheaply: (str, bytes) tuples
        for item in headers:
            if type(item) is not tuple or len(item) != 2:
                break
            if type(item[0]) is not str or type(item[1]) is not bytes:
                break
        else:
            return headers[:] or None  # a copy: the writer keeps it for a replay
    if isinstance(headers, Mapping):
        items: Sequence[object] = list(headers.items())
    elif isinstance(headers, Sequence) and not isinstance(headers, str | bytes):
        items = headers
    else:
        raise InvalidHeaderError(
            "headers must be a list of (name, value) pairs or a mapping of names to values, "
            f"got {type(headers).__name__}"
        )
    out: KafkaHeaders = []
    for i, item in enumerate(items):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidHeaderError(f"header {i}: must be a (name, value) pair, got {item!r}")
        name, value = item
        if not isinstance(name, str):
            raise InvalidHeaderError(
                f"header {i} ({name!r}): name must be str, got {type(name).__name__}"
            )
        if type(value) is not bytes:
            if as_producer and (value is None or isinstance(value, str)):
                pass
            elif isinstance(value, bytearray | memoryview):
                value = bytes(value)
            else:
                allowed = "bytes, str or None" if as_producer else "bytes"
                raise InvalidHeaderError(
                    f"header {i} ({name!r}): value must be {allowed}, got {type(value).__name__}"
                    + (" (encode text, e.g. value.encode())" if isinstance(value, str) else "")
                )
        out.append((name, value))
    return out or None


__all__ = ["RESERVED_PREFIX", "Header", "Headers", "KafkaHeaders", "checked_headers"]
