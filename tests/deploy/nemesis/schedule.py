"""The nemesis's seeded fault schedule, and how each fault is done to a ``Deployment``.

``plan(seed, ...)`` is pure: the same seed gives the same faults in the same order with
the same pauses, so a failing run replays from its seed. Never more than the shape
tolerates at once: one broker of three (min.insync 2 holds), one ZooKeeper node of
three (the quorum holds), one Spark worker of two, the leading driver (a standby
leads), the object store; two faults at once only of different kinds.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.deploy.deployment import Deployment
from tests.waiting import wait_until

log = logging.getLogger(__name__)

KINDS = ("broker", "zookeeper", "spark-worker", "leading-driver", "object-store")
TAKE_OVER_S = 120
NODES = {"broker": 3, "zookeeper": 3, "spark-worker": 2, "leading-driver": 1, "object-store": 1}


@dataclass(frozen=True)
class Fault:
    kind: str
    node: int  # 1-based; 1 for the driver and the store
    down_s: float

    def __str__(self) -> str:
        return f"{self.kind} {self.node} down {self.down_s:.0f} s"


@dataclass(frozen=True)
class Step:
    """Faults done together, healed together, then ``calm_s`` of quiet."""

    faults: tuple[Fault, ...]
    calm_s: float


EACH_KIND_ONCE: tuple[Step, ...] = (
    Step((Fault("spark-worker", 1, 8),), 2),
    Step((Fault("object-store", 1, 10),), 2),
    Step((Fault("zookeeper", 1, 5),), 2),
    Step((Fault("broker", 2, 5),), 2),
    Step((Fault("leading-driver", 1, 5),), 2),
)
"""The schedule's first steps: each kind of fault once, alone (what the deployment tests
did one by one), so even a short run meets every kind; each one's recovery is reported."""


def plan(seed: int, steps: int) -> list[Step]:
    """:data:`EACH_KIND_ONCE`, then ``steps`` steps of one fault, or now and then two of
    different kinds."""
    rng = random.Random(seed)
    found: list[Step] = list(EACH_KIND_ONCE)
    for _ in range(steps):
        kinds = rng.sample(KINDS, 2 if rng.random() < 0.25 else 1)
        faults = tuple(Fault(k, rng.randint(1, NODES[k]), rng.uniform(3, 12)) for k in kinds)
        found.append(Step(faults, rng.uniform(2, 8)))
    return found


class Nemesis:
    """Does and heals faults on ``deployment``; ``leader`` names the leading driver."""

    def __init__(self, deployment: Deployment, leader: Callable[[], str | None]) -> None:
        self.d = deployment
        self.leader = leader

    def break_(self, fault: Fault) -> Callable[[], object]:
        """Do ``fault``; the returned function heals it."""
        d = self.d
        if fault.kind == "broker":
            d.kafka.stop_node(fault.node)
            return lambda: d.kafka.start_node(fault.node)
        if fault.kind == "zookeeper":
            server = d.zookeeper.servers[fault.node - 1]
            server.stop()
            return lambda: server.start(60)
        if fault.kind == "spark-worker":
            d.spark.kill_worker(fault.node)
            return lambda: d.spark.start_worker(fault.node)
        if fault.kind == "leading-driver":
            name = self.leader()
            if name is None:
                return lambda: None
            d.kill_driver(name)

            def heal() -> None:
                # the standby leads before the killed driver comes back (as a standby)
                others = [p for n, p in d.drivers.items() if n != name and p.alive()]
                wait_until(
                    lambda: self.leader() not in (None, name),
                    TAKE_OVER_S,
                    "the standby leads",
                    *others,
                )
                d.submit_controller(name, "--no-warm-up")

            return heal
        d.s3.stop()
        return lambda: d.s3.start()

    def run(self, step: Step) -> None:
        heals: list[tuple[Fault, Callable[[], object]]] = []
        try:
            for fault in step.faults:
                log.warning("nemesis: %s", fault)
                print(f"nemesis: {fault}", flush=True)
                heals.append((fault, self.break_(fault)))
            time.sleep(max(f.down_s for f in step.faults))
        finally:
            # the services first: a driver's heal waits for the standby to lead, and a
            # standby that is still starting may need the store, a broker or ZooKeeper
            for _, heal in sorted(heals, key=lambda pair: pair[0].kind == "leading-driver"):
                heal()  # a heal that fails ends the run: the next fault could be one too many
        time.sleep(step.calm_s)
