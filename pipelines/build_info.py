"""``tidemark_build_info``: a gauge of value 1 whose labels say what a process runs.

    register_build_info(registry)    # each exporter calls it; once per registry

An operator joins it to other series to see the version each scraped process runs
(``... * on (instance) group_left (version) tidemark_build_info``) -- during a rolling
upgrade, for instance. The controller job (``tidemark.jobs.metrics``) and the time service
add it; an application exposing its writers' metrics may call it beside
``start_http_server``. Here, in ``pipelines``, because all of them may import it.
"""

from __future__ import annotations

import platform
import threading
import weakref
from collections.abc import Iterable

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

import tidemark

NAME = "tidemark_build_info"


class BuildInfo(Collector):
    """The one sample ``tidemark_build_info{version, python} 1``."""

    def __init__(self) -> None:
        self._labels = [tidemark.__version__, platform.python_version()]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            NAME,
            "tidemark's version and the Python it runs on (always 1).",
            labels=["version", "python"],
        )
        family.add_metric(self._labels, 1)
        yield family


_REGISTERED: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()
_LOCK = threading.Lock()


def register_build_info(registry: CollectorRegistry = REGISTRY) -> None:
    """Add ``tidemark_build_info`` to ``registry`` unless it is there already."""
    with _LOCK:
        if registry not in _REGISTERED:
            registry.register(BuildInfo())
            _REGISTERED.add(registry)


__all__ = ["NAME", "BuildInfo", "register_build_info"]
