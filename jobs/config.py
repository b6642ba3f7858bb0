"""Settings of the watermark controller job (typed, frozen, checked).

    settings = ControllerSettings(
        kafka_bootstrap="127.0.0.1:9092", zk_connect="127.0.0.1:2181",
        delta_root="/data/delta", checkpoint_root="/data/checkpoints",
        cluster=ClusterSettings(bucket_count=2), interval_ms=1000)

``delta_root`` and ``checkpoint_root`` must be storage every controller
instance reaches (a shared file system or an object store): the query's
checkpoint (``<checkpoint_root>/query``) is where a standby driver resumes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields

from tidemark.controller.delta.location import TableLocation
from tidemark.controller.naming import ClusterSettings
from tidemark.jobs.exceptions import JobConfigurationError
from tidemark.jobs.slot_keys import SLOTS_PER_PARTITION, balanced_slot_keys


class CycleTrigger(enum.Enum):
    """What runs a stream's watermark cycle.

    ``TIMERS`` (production): a stream cycles in every micro-batch that brings it
    marks, and otherwise only when something falls due (a lagging writer's
    timeout, the first-watermark delay, a held cut's retry): the driver then
    produces a *due record* for the stream's slot (:mod:`tidemark.jobs.due`), which
    makes the micro-batch that runs it. ``TICKS`` (tests): only a tick
    record on the marks topic (:func:`tidemark.jobs.workflow.tick_value`) runs a cycle,
    at the ``now_ms`` the tick carries, so a test knows exactly which marks
    each cycle saw whatever the micro-batches were.
    """

    TIMERS = "timers"
    TICKS = "ticks"


def _check_at_least(name: str, value: int | None, minimum: int) -> None:
    """Refuse a setting below its minimum (``None``: not set, nothing to check)."""
    if value is not None and value < minimum:
        raise JobConfigurationError(f"{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class WorkflowSettings:
    """What the per-stream workflow needs (shipped to Spark's Python workers)."""

    interval_ms: int = 1000
    writer_timeout_ms: int = 60_000
    """The default of ``timestamp_aggregation_timeout_ms`` for streams that set none."""
    lso_hold_ms: int = 30_000
    """How long a cut past the data topic's last stable offset is held before
    the writers that push it there are rejected (``beyond_committed``)."""
    trigger: CycleTrigger = CycleTrigger.TIMERS
    kafka_bootstrap: str = ""
    zk_connect: str = ""
    zk_root: str = "/tidemark"
    laggard_threshold_ms: int = 10_000
    """What the ``laggards`` table leaves out as ordinary: a writer lagging *at* the
    watermark's time (as every writer is between its notes) is recorded once it has
    lagged this long, and a writer that is only the slowest once it is this far
    behind the fastest (writers in step take turns); one below the watermark at once."""

    def __post_init__(self) -> None:
        _check_at_least("interval_ms", self.interval_ms, 1)
        _check_at_least("writer_timeout_ms", self.writer_timeout_ms, 0)
        _check_at_least("lso_hold_ms", self.lso_hold_ms, 0)


DEFAULT_STOP_TIMEOUT_MS = 30_000
"""How long a signalled driver takes to stop at most: Spark's own streaming stop
timeout. With Kafka, ZooKeeper or the store gone, stopping the query and closing
the session could wait far longer; past this the driver exits without waiting."""


@dataclass(frozen=True)
class ControllerSettings:
    """One controller instance: where things are, and how often it cycles."""

    kafka_bootstrap: str
    zk_connect: str
    delta_root: str
    checkpoint_root: str
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    interval_ms: int = WorkflowSettings.interval_ms
    writer_timeout_ms: int = WorkflowSettings.writer_timeout_ms
    lso_hold_ms: int = WorkflowSettings.lso_hold_ms
    trigger: CycleTrigger = WorkflowSettings.trigger
    laggard_threshold_ms: int = WorkflowSettings.laggard_threshold_ms
    """:attr:`WorkflowSettings.laggard_threshold_ms` (0: a writer at the watermark is named
    in the first cycle it lags, within one interval)."""
    max_offsets_per_trigger: int | None = None
    zk_session_timeout_ms: int = 10_000
    """The driver's ZooKeeper session: a standby takes over this long after the
    active driver died."""
    state_partitions: int | None = None
    """Partitions of the query's stateful operator: how many tasks a micro-batch
    runs (Spark's parallelism), each holding the state of its share of the slots
    (``SLOTS_PER_PARTITION`` each). ``None``: Spark's default parallelism when
    the query's checkpoint is new (``local[N]``: N; a cluster: its executors'
    cores), the checkpoint's from then on (:func:`tidemark.jobs.controller_job.resolve`).
    Every task costs a micro-batch its Python runner whether or not its slots
    have data, so more partitions than cores only add fixed cost per batch."""
    balanced_slots: bool = True
    """Slot keys that Spark's hash partitioning spreads evenly over the state partitions
    (:func:`tidemark.jobs.slot_keys.balanced_slot_keys`); ``False``: keys ``0 .. slot_count - 1``,
    which checkpoints started before keep (:func:`tidemark.jobs.controller_job.resolve`: the
    state is keyed by them)."""
    warm_up: bool = False
    """Run the query's plan over a few retained marks (or the operator on synthetic
    rows) and open the Delta tables before contending, when another driver leads
    (:func:`tidemark.jobs.controller_job.warm_up`; the first driver leads at once). The
    drivers' command line turns it on (``--no-warm-up`` off), so that a standby's
    first batch after a take-over does not pay for first-time planning (figures:
    ``jobs/README.md``). Off here, for in-process jobs (tests, the demo) that never
    stand by."""

    def __post_init__(self) -> None:
        for name in ("kafka_bootstrap", "zk_connect", "delta_root", "checkpoint_root"):
            if not getattr(self, name):
                raise JobConfigurationError(f"{name} must be set")
        _check_at_least("zk_session_timeout_ms", self.zk_session_timeout_ms, 1000)
        _check_at_least("max_offsets_per_trigger", self.max_offsets_per_trigger, 1)
        _check_at_least("state_partitions", self.state_partitions, 1)
        self.workflow()  # checks the rest

    @property
    def lake(self) -> TableLocation:
        """Where the tables are: :attr:`delta_root` as the one location the job passes on
        (storage options: the ``AWS_*`` variables and the like, as delta-rs reads them)."""
        return TableLocation.of(self.delta_root)

    @property
    def bucket_count(self) -> int:
        """Partitions of the marks topic (a stream's marks go to its bucket's)."""
        return self.cluster.bucket_count

    def resolved_state_partitions(self, default_parallelism: int) -> int:
        """:attr:`state_partitions`, or its default for a session of this parallelism."""
        if self.state_partitions is not None:
            return self.state_partitions
        return max(1, default_parallelism)

    @property
    def query_partitions(self) -> int:
        """:attr:`state_partitions` of resolved settings
        (:func:`tidemark.jobs.controller_job.resolve`)."""
        if self.state_partitions is None:
            raise JobConfigurationError(
                "the state partitions are not resolved yet: resolve the settings first "
                "(tidemark.jobs.controller_job.resolve)"
            )
        return self.state_partitions

    @property
    def slot_count(self) -> int:
        """Keys of the query's state: ``SLOTS_PER_PARTITION`` per state partition (the
        settings must be resolved)."""
        return self.query_partitions * SLOTS_PER_PARTITION

    @property
    def slot_keys(self) -> tuple[int, ...]:
        """The key value of each slot (the settings must be resolved)."""
        if self.balanced_slots:
            return balanced_slot_keys(self.slot_count, self.query_partitions)
        return tuple(range(self.slot_count))

    def workflow(self) -> WorkflowSettings:
        """The workflow's share: each of its settings is one of these of the same name,
        but ``zk_root``, which is the cluster's."""
        names = (f.name for f in fields(WorkflowSettings) if f.name != "zk_root")
        return WorkflowSettings(
            zk_root=self.cluster.zk_root, **{name: getattr(self, name) for name in names}
        )

    @property
    def checkpoint_dir(self) -> str:
        """The query's checkpoint: Kafka offsets and every bucket's state."""
        return f"{self.checkpoint_root.rstrip('/')}/query"

    @property
    def app_id(self) -> str:
        """The Delta ``txnAppId`` prefix of the query (its query id is appended)."""
        return f"tidemark-controller/{self.cluster.marks_topic}"

    @property
    def election_path(self) -> str:
        return f"{self.cluster.zk_root.rstrip('/')}/controller-job/{self.cluster.marks_topic}"


__all__ = ["DEFAULT_STOP_TIMEOUT_MS", "ControllerSettings", "CycleTrigger", "WorkflowSettings"]
