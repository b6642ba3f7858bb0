"""The ``deploy`` tests share one deployment-shaped environment (tests/deploy/deployment.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.deploy.deployment import Deployment
from tidemark.environment import overridden


@pytest.fixture(scope="package")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The services, and this process's delta-rs pointed at the object store (readers
    take the ``AWS_*`` variables, as a deployed reader does) and its clients trusting the
    run's CA. Package-scoped: the deployment tests and then the nemesis share it (one
    start-up), and its dozen JVMs stop as soon as tests/deploy ends, not with the whole
    suite."""
    with (
        Deployment.start(tmp_path_factory.mktemp("deployment")) as started,
        overridden({**started.s3.reader_environment(), **started.tls_environment()}),
    ):
        yield started


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/deploy is `deploy` (and `slow`)."""
    for item in items:
        if "/tests/deploy/" in str(item.path):
            item.add_marker(pytest.mark.deploy)
            item.add_marker(pytest.mark.slow)
