"""jobs.controller_job helpers that need no services."""

from __future__ import annotations

import pytest

from jobs.controller_job import is_local


@pytest.mark.parametrize(
    ("root", "local"),
    [
        ("/data/checkpoints", True),
        ("relative/checkpoints", True),
        ("file:///data/checkpoints", True),
        ("hdfs://nn:8020/tidemark/checkpoints", False),
        ("s3a://lake/tidemark/_checkpoints", False),
        ("abfss://c@acct.dfs.core.windows.net/ck", False),
    ],
)
def test_only_local_checkpoint_roots_count_as_local(root: str, local: bool) -> None:
    assert is_local(root) is local
