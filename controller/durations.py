"""Duration settings: the one check that a config's ``*_ms`` fields are whole milliseconds.

    >>> check_durations_ms(WriterConfig(), ("linger_ms",), minimum=0, error=WriterConfigError)

Writers' and readers' configs (``tidemark.pipelines.writing.config``,
``tidemark.pipelines.reading.config``) refuse a duration that is not an ``int`` (a
``bool`` or a float of seconds is a classic slip) or is below the least the
setting allows, with their own error class naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidemark.errors import ConfigurationError


def check_durations_ms(
    config: object, names: Iterable[str], *, minimum: int, error: type[ConfigurationError]
) -> None:
    """Raise ``error`` naming the first of ``config``'s fields ``names`` that is not an
    ``int`` of milliseconds >= ``minimum``."""
    for name in names:
        value = getattr(config, name)
        if type(value) is not int or value < minimum:
            raise error(f"{name} must be an int >= {minimum} (ms), got {value!r}")


__all__ = ["check_durations_ms"]
