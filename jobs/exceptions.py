"""Errors of the Spark jobs."""

from __future__ import annotations

from tidemark.errors import ConfigurationError, TidemarkError


class JobError(TidemarkError):
    """Root of the jobs' errors."""


class JobConfigurationError(JobError, ConfigurationError):
    """A job setting is invalid; the message names it."""


class QueryFailedError(JobError):
    """A bucket's streaming query stopped with an error; its message carries Spark's."""


class WindowNotCompleteError(JobError):
    """A window's data is not complete yet: no watermark has reached its end.

    Run the job again later, once the controller has emitted a watermark at or
    after the window's end.
    """

    def __init__(self, stream: str, end_ms: int) -> None:
        self.stream = stream
        self.end_ms = end_ms
        super().__init__(
            f"stream {stream!r}: no watermark has reached time {end_ms} yet; "
            "the window is not complete"
        )


__all__ = ["JobConfigurationError", "JobError", "QueryFailedError", "WindowNotCompleteError"]
