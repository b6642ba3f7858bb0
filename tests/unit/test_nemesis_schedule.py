"""The nemesis's schedule: each kind of fault first, then a seeded tail that replays."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.deploy.nemesis.schedule import EACH_KIND_ONCE, KINDS, NODES, plan

pytestmark = pytest.mark.unit


def test_every_kind_comes_first_once_alone() -> None:
    first = plan(1, 3)[: len(EACH_KIND_ONCE)]
    kinds = [step.faults[0].kind for step in first]
    assert sorted(kinds) == sorted(KINDS)
    assert all(len(step.faults) == 1 for step in first)


@given(st.integers(0, 2**31 - 1))
def test_a_seed_replays_and_stays_within_what_the_shape_tolerates(seed: int) -> None:
    steps = plan(seed, 50)
    assert steps == plan(seed, 50)
    assert len(steps) == len(EACH_KIND_ONCE) + 50
    for step in steps:
        kinds = [f.kind for f in step.faults]
        assert len(kinds) == len(set(kinds)) <= 2
        assert all(1 <= f.node <= NODES[f.kind] and 3 <= f.down_s <= 12 for f in step.faults)
