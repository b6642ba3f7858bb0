"""``Closing``: a ``with`` block gives the object back and closes it, also when the body raises."""

from __future__ import annotations

import pytest

from tidemark.controller.closing import Closing


class _Resource(Closing):
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def test_with_returns_the_object_and_closes_it_once() -> None:
    resource = _Resource()
    with resource as entered:
        assert entered is resource
        assert resource.closed == 0
    assert resource.closed == 1


def test_with_closes_when_the_body_raises_and_lets_the_error_through() -> None:
    resource = _Resource()
    with pytest.raises(KeyError), resource:
        raise KeyError("boom")
    assert resource.closed == 1


def test_a_subclass_without_close_cannot_be_made() -> None:
    class Open(Closing):
        pass

    with pytest.raises(TypeError):
        Open()  # type: ignore[abstract]
