"""A base for the objects a ``with`` block closes (readers, groups, writers, producers,
the timeline's store and clients).

``with x:`` gives ``x`` back and calls ``x.close()`` on the way out, whatever
raised. It lives in ``controller`` as the one package every part of ``pipelines``
may import (reading and writing share nothing else).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class Closing(ABC):
    """``__enter__`` returns the object; ``__exit__`` calls :meth:`close`."""

    @abstractmethod
    def close(self) -> None:
        """Release what the object holds; a second call does nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Closing"]
