"""The ``deploy`` tests share one deployment-shaped environment (tests/deploy/deployment.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deploy.deployment import Deployment


@pytest.fixture(scope="session")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with Deployment.start(tmp_path_factory.mktemp("deployment")) as started:
        yield started


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/deploy is `deploy` (and `slow`)."""
    for item in items:
        if "/tests/deploy/" in str(item.path):
            item.add_marker(pytest.mark.deploy)
            item.add_marker(pytest.mark.slow)
