"""The stream policy loop: retention and auto-scaling, acted on every interval.

    cut_at = functools.partial(stream_cut_at, delta_root="/data/delta")  # the index's answer
    loop = PolicyLoop(manager, PolicySettings(interval_ms=10_000), cut_at=cut_at)
    loop.run_once()                     # one pass over every stream: [PolicyAction, ...]
    handle = loop.start()               # a daemon thread (tidemark.controller.periodic.Periodic)
    handle.stop()

    # only one loop per cluster acts: contend for the same ZooKeeper election
    run_when_elected(kazoo_client, loop, identifier="c1", zk_root="/tidemark")

    # run by the watermark controller's leader (`tidemark controller run`)
    switch = PolicySwitch(settings, kafka_bootstrap, zk_connect, cluster, "a", cut_at=cut_at)
    ControllerJob(spark, controller_settings, "a", leader_tasks=[switch])

What Pravega's stream policy manager does, here without Spark: for every
active stream with a policy, one operation at a time (the stream's state
machine refuses a second one anyway):

1. **retention** -- by time, the cut comes from the index (``cut_at(stream,
   now - limit)``, the watermark's guarantee: nothing newer is removed); by
   size, the stream's bytes are counted
   (``tidemark.controller.kafka.segment_sizes``) and the cut is the watermark cut, found
   by binary search over time, that leaves it under the limit. Then
   ``StreamManager.truncate``.
2. **auto-scaling** -- per-segment rates over ``rate_window_ms`` (events:
   Kafka end offsets; bytes: the byte counts), decided by
   ``tidemark.controller.policies.plan_autoscale``; then ``StreamManager.scale``
   (the manual scale machinery keeps per-key order and the watermarks).

The decisions are pure functions in ``tidemark.controller.policies``; this module
only measures, asks, and acts. The index lookup, :data:`CutLookup`, is handed
in (``tidemark.pipelines.reading.seek.stream_cut_at`` reads the Delta index; the
control plane imports no reader). It imports no Spark, so ``tidemark
controller policies`` runs it alone. ``tidemark controller run`` gives its driver a
:class:`PolicySwitch` (a ``tidemark.jobs.controller_job.LeaderTask``): while the
driver leads, the switch contends in the same election as the standalone
verb and runs the loop once elected, so exactly one loop acts per cluster
(``jobs`` may not import ``tidemark``, hence the task is handed in). Both
contend through :class:`tidemark.controller.zookeeper.leadership.Leadership`.

**Idle cost.** A pass lists the streams (one ZooKeeper read per scope) and
reads Kafka, Delta or a stream's record only for streams with a policy.
Whether a stream has one is known from a watch on its record
(``MetadataStore.watch_stream``: an update of its policies is seen at the
next pass, no read per pass); every ``rescan_ms`` each record is read once
more (a stream deleted and created again between two passes ends its watch
unseen).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kazoo.client import KazooClient

from tidemark.controller.config import RetentionType, ScalingType
from tidemark.controller.exceptions import InvalidConfigurationError
from tidemark.controller.kafka.segment_sizes import SegmentSizes
from tidemark.controller.metadata import StreamMetadata
from tidemark.controller.naming import ClusterSettings
from tidemark.controller.navigation import head_cut
from tidemark.controller.periodic import Periodic
from tidemark.controller.policies import (
    Merge,
    Sample,
    SegmentBytes,
    beyond_head,
    bytes_after,
    plan_autoscale,
    scale_request,
    segment_rates,
    size_retention_time,
    time_bounds,
    time_retention_cut,
)
from tidemark.controller.states import StreamState
from tidemark.controller.streams import StreamManager
from tidemark.controller.zookeeper.leadership import Leadership
from tidemark.controller.zookeeper.session import zookeeper_session
from tidemark.controller.zookeeper.store import ZooKeeperStore
from tidemark.errors import ConfigurationError, TidemarkError

log = logging.getLogger(__name__)

ELECTION_PATH = "policy-loop/election"
"""Under the cluster's ZooKeeper root: the election every policy loop contends in."""

_SEARCH_HIGH = 2**62
"""Upper end of the time searched for a by-size cut (beyond any real time)."""


CutLookup = Callable[[str, int], Mapping[int, int]]
"""``cut_at(stream, t)``: where to start reading ``stream`` to miss no event with time >= ``t``
(empty: the head, or no watermark yet) -- ``stream_cut_at`` over the watermark index."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class PolicySettings:
    """How often the loop runs, and over what window it measures rates."""

    interval_ms: int = 10_000
    """``--policy-interval-ms``: the wait between two passes."""
    rate_window_ms: int = 60_000
    """Rates are measured over at least this long (the oldest sample within it)."""
    cooldown_ms: int = 120_000
    """No automatic scale within this long of the stream's latest epoch."""
    rescan_ms: int = 300_000
    """Streams are known from watches; their records are read again this often (a
    safety net for a stream deleted and re-created between two passes)."""

    def __post_init__(self) -> None:
        for name, least in (
            ("interval_ms", 1),
            ("rate_window_ms", 0),
            ("cooldown_ms", 0),
            ("rescan_ms", 1),
        ):
            if getattr(self, name) < least:
                raise ConfigurationError(
                    f"policy setting {name} must be >= {least}, got {getattr(self, name)}"
                )


@dataclass(frozen=True)
class PolicyAction:
    """What the loop did to a stream: ``truncate`` (``cut``), ``split`` or ``merge``."""

    stream: str
    kind: str
    at_ms: int
    cut: dict[int, int] | None = None
    sealed: tuple[int, ...] = ()
    reason: str = ""


class PolicyLoop:
    """Acts on every stream's retention and scaling policy, one pass per interval.

    ``cut_at`` answers retention's question (without one, a retention policy is
    logged as not enforceable and auto-scaling still runs).
    """

    def __init__(
        self,
        manager: StreamManager,
        settings: PolicySettings | None = None,
        *,
        cut_at: CutLookup | None = None,
        sizes: SegmentSizes | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.manager = manager
        self.settings = settings or PolicySettings()
        self.clock = clock
        self.cut_at = cut_at
        self._sizes = sizes
        self.closing = threading.Event()
        """Set by :meth:`close`: :func:`run_when_elected` stops contending."""
        self._samples: dict[str, deque[Sample]] = {}
        self._lock = threading.Lock()
        self._known: dict[str, StreamMetadata] = {}
        """The latest metadata of every watched stream (written by the store's watches)."""
        self._known_lock = threading.Lock()
        self._rescanned_ms: int | None = None
        self.reads = 0
        """Stream records read by passes (not by watches): the idle cost, for tests."""
        self.actions: list[PolicyAction] = []
        """Everything this loop did, oldest first (the figures and tests read it)."""
        self.periodic = Periodic("tidemark-policies", self.run_once, self.settings.interval_ms)

    # --- running ----------------------------------------------------------------------------

    def start(self) -> Periodic:
        """Run in a daemon thread; stop it with the returned handle's ``stop()``."""
        return self.periodic.start()

    def run(self, stop: threading.Event | None = None) -> None:
        """Run in this thread until ``stop`` is set."""
        self.periodic.run(stop)

    def run_once(self) -> list[PolicyAction]:
        """One pass over every stream with a policy; the actions taken."""
        with self._lock:
            done: list[PolicyAction] = []
            streams = self.manager.list()
            for gone in set(self._samples) - set(streams):  # deleted streams
                del self._samples[gone]
            with self._known_lock:
                for gone in set(self._known) - set(streams):
                    del self._known[gone]
            now = self.clock()
            rescan = (
                self._rescanned_ms is not None
                and now - self._rescanned_ms >= self.settings.rescan_ms
            )
            if rescan or self._rescanned_ms is None:
                self._rescanned_ms = now
            for stream in streams:
                try:
                    if self._has_policy(stream, rescan):
                        done.extend(self.apply(stream))
                except TidemarkError as exc:  # another operation runs, a stream went away, ...
                    log.warning("policies of %s: %s", stream, exc)
            self.actions.extend(done)
            return done

    def _has_policy(self, stream: str, rescan: bool) -> bool:
        """From the watched metadata (read only for a new stream, or on a rescan)."""
        with self._known_lock:
            meta = self._known.get(stream)
        if meta is None:
            self.reads += 1
            self.manager.store.watch_stream(stream, self._seen)  # calls _seen now
        elif rescan:
            self.reads += 1
            self._seen(self.manager.describe(stream))
        with self._known_lock:
            meta = self._known.get(stream)
        return meta is not None and has_policy(meta)

    def _seen(self, meta: StreamMetadata) -> None:
        """A watch's callback (the store's thread): the stream's latest metadata."""
        with self._known_lock:
            self._known[meta.name] = meta

    def apply(self, stream: str) -> list[PolicyAction]:
        """The stream's retention, then its scaling policy (each at most one operation)."""
        self.reads += 1
        meta = self.manager.describe(stream)
        done: list[PolicyAction] = []
        if meta.state is not StreamState.ACTIVE:
            return done
        retention = meta.config.retention_policy
        if retention.type is not RetentionType.NONE:
            action = self._retain(meta)
            if action is not None:
                done.append(action)
                meta = self.manager.describe(stream)
        if meta.config.scaling_policy.type is not ScalingType.FIXED:
            action = self._autoscale(meta)
            if action is not None:
                done.append(action)
        return done

    # --- retention --------------------------------------------------------------------------

    def _retain(self, meta: StreamMetadata) -> PolicyAction | None:
        policy = meta.config.retention_policy
        now = self.clock()
        if policy.type is RetentionType.BY_TIME:
            trigger_t, target_t = time_bounds(policy, now)
            cut = time_retention_cut(
                meta, self._cut_at(meta.name, trigger_t), self._cut_at(meta.name, target_t)
            )
            reason = f"data older than {policy.limit} ms (cut at time {target_t})"
        else:
            held = self.sizes.measure(meta)
            size_now = bytes_after(meta, head_cut(meta), held)
            t = size_retention_time(
                policy, size_now, lambda t: self._kept_at(meta, held, t), 0, _SEARCH_HIGH
            )
            cut = None if t is None else beyond_head(meta, self._cut_at(meta.name, t))
            reason = f"{size_now} bytes over the limit of {policy.limit}"
            if cut is not None:
                reason += f", {bytes_after(meta, cut, held)} kept"
        if cut is None:
            return None
        log.info("retention of %s: truncating at %s (%s)", meta.name, cut, reason)
        self.manager.truncate(meta.name, cut)
        return PolicyAction(meta.name, "truncate", self.clock(), cut=cut, reason=reason)

    def _kept_at(self, meta: StreamMetadata, held: dict[int, SegmentBytes], t: int) -> int:
        cut = beyond_head(meta, self._cut_at(meta.name, t)) or head_cut(meta)
        return bytes_after(meta, cut, held)

    def _cut_at(self, stream: str, t: int) -> dict[int, int]:
        """``cut_at(stream, t)`` (empty: the head, or no watermark yet)."""
        if t < 0:
            return {}
        if self.cut_at is None:
            raise InvalidConfigurationError(
                f"retention of {stream}: this policy loop was given no index lookup (cut_at)"
            )
        return dict(self.cut_at(stream, t))

    # --- scaling ----------------------------------------------------------------------------

    def _autoscale(self, meta: StreamMetadata) -> PolicyAction | None:
        now = self.clock()
        sample = Sample(now, self._counts(meta))
        samples = self._samples.setdefault(meta.name, deque())
        samples.append(sample)
        window = self.settings.rate_window_ms
        while len(samples) > 1 and samples[1].at_ms <= now - window:
            samples.popleft()
        if samples[0].at_ms > now - window:
            return None  # not measured over a whole window yet
        rates = segment_rates(samples[0], sample)
        action = plan_autoscale(meta, rates, now, self.settings.cooldown_ms)
        if action is None:
            return None
        sealed, ranges = scale_request(action)
        kind = "merge" if isinstance(action, Merge) else "split"
        unit = "events/s" if meta.config.scaling_policy.type is ScalingType.BY_EVENT_RATE else "B/s"
        reason = ", ".join(f"segment {s}: {rates[s]:.1f} {unit}" for s in sealed) + (
            f" (target {meta.config.scaling_policy.target_rate})"
        )
        log.info("auto-scaling %s: %s %s (%s)", meta.name, kind, sealed, reason)
        self.manager.scale(meta.name, sealed, ranges)
        return PolicyAction(meta.name, kind, self.clock(), sealed=tuple(sealed), reason=reason)

    def _counts(self, meta: StreamMetadata) -> dict[int, int]:
        active = meta.active_segments()
        if meta.config.scaling_policy.type is ScalingType.BY_BYTE_RATE:
            held = self.sizes.measure(meta)
            return {s.id: held[s.id].total for s in active}
        ends = self.manager.topics.end_offsets(meta.topic, [s.number for s in active])
        return {s.id: ends[s.number] for s in active}

    # --- resources --------------------------------------------------------------------------

    @property
    def sizes(self) -> SegmentSizes:
        if self._sizes is None:
            self._sizes = SegmentSizes(self.manager.topics.bootstrap)
        return self._sizes

    def close(self) -> None:
        self.closing.set()
        self.periodic.stop()
        if self._sizes is not None:
            self._sizes.close()


def has_policy(meta: StreamMetadata) -> bool:
    """Whether the loop has anything to do for the stream: retention or auto-scaling."""
    config = meta.config
    return (
        config.retention_policy.type is not RetentionType.NONE
        or config.scaling_policy.type is not ScalingType.FIXED
    )


class PolicySwitch:
    """Runs a :class:`PolicyLoop` while its controller driver leads (a ``LeaderTask``).

        switch = PolicySwitch(PolicySettings(), kafka, zk, cluster, "a", cut_at=cut_at)
        switch.lead(True)      # contend in the policy loop's election; run once elected
        switch.lead(False)     # stop acting, leave the election (idempotent)
        switch.close()

    Leading the controller is not enough to act: a standalone ``tidemark
    controller policies`` may hold the policy election, so the switch
    contends there too (same path, :data:`ELECTION_PATH`) and never two
    loops act at once. It has its own ZooKeeper session (closed when the
    driver stops leading, which also ends its watches); when that session is
    LOST, or SUSPENDED past the leadership's grace, the loop stops and
    contends again.
    """

    def __init__(
        self,
        settings: PolicySettings,
        kafka_bootstrap: str,
        zk_connect: str,
        cluster: ClusterSettings,
        identifier: str,
        *,
        cut_at: CutLookup | None = None,
        zk_session_timeout_ms: int = 10_000,
        pause_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.cut_at = cut_at
        self.kafka_bootstrap = kafka_bootstrap
        self.zk_connect = zk_connect
        self.cluster = cluster
        self.identifier = identifier
        self.zk_session_timeout_ms = zk_session_timeout_ms
        self.pause_s = pause_s
        self._mutex = threading.Lock()
        self._stop: threading.Event | None = None
        self._leadership: Leadership | None = None
        self._thread: threading.Thread | None = None
        self.loop: PolicyLoop | None = None
        """The loop of the current (or last) leadership: tests read its ``actions``."""

    @property
    def acting(self) -> bool:
        """Whether this switch's loop holds the policy election now."""
        leadership = self._leadership
        return leadership is not None and leadership.leading

    def lead(self, leading: bool) -> None:
        with self._mutex:
            if leading and self._thread is None:
                self._stop = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._stop,), name="tidemark-policies", daemon=True
                )
                self._thread.start()
                log.info("policy loop %s: contending", self.identifier)
                return
            if leading or self._thread is None:
                return
            assert self._stop is not None
            self._stop.set()
            if self._leadership is not None:
                self._leadership.cancel()
            thread, self._thread = self._thread, None
        thread.join(timeout=60)
        log.info("policy loop %s: stopped", self.identifier)

    def close(self) -> None:
        self.lead(False)

    def _run(self, stop: threading.Event) -> None:
        """Until ``stop``: a ZooKeeper session, the election, the loop while elected."""
        while not stop.is_set():
            try:
                self._session(stop)
            except Exception:
                log.exception("policy loop %s: failed; contending again", self.identifier)
            stop.wait(self.pause_s)

    def _session(self, stop: threading.Event) -> None:
        """One session: contend, run the loop while elected (until the session is
        LOST or SUSPENDED past the grace, or ``lead(False)``); closing it ends the
        loop's watches."""
        with zookeeper_session(self.zk_connect, timeout_ms=self.zk_session_timeout_ms) as client:
            loop = PolicyLoop(
                StreamManager(
                    ZooKeeperStore(client, self.cluster.zk_root), self.kafka_bootstrap, self.cluster
                ),
                self.settings,
                cut_at=self.cut_at,
            )
            self.loop = loop
            try:
                with self._mutex:
                    if stop.is_set():
                        return
                    leadership = Leadership(
                        client, election_path(self.cluster.zk_root), self.identifier
                    )
                    self._leadership = leadership
                leadership.contend(loop.run)
            finally:
                with self._mutex:
                    self._leadership = None
                loop.close()


def election_path(zk_root: str) -> str:
    """The policy loop's election, under the cluster's ZooKeeper root."""
    return f"{zk_root.rstrip('/')}/{ELECTION_PATH}"


def run_when_elected(
    client: KazooClient, loop: PolicyLoop, identifier: str, zk_root: str = "/tidemark"
) -> None:
    """Block until this process wins the policy loop's election, then run the loop in
    this thread; contend again after losing the session, until ``loop.close()``.
    Every loop of a cluster uses this path."""
    log.info("policy loop %s: waiting to be elected", identifier)
    Leadership(client, election_path(zk_root), identifier).run(loop.run, loop.closing)


__all__ = [
    "ELECTION_PATH",
    "CutLookup",
    "PolicyAction",
    "PolicyLoop",
    "PolicySettings",
    "PolicySwitch",
    "election_path",
    "has_policy",
    "run_when_elected",
]
