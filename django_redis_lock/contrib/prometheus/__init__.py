"""Prometheus metrics of this process's locks (the ``prometheus`` extra).

Add ``"django_redis_lock.contrib.prometheus"`` to ``INSTALLED_APPS`` (or call :func:`enable`)
and the collectors below are registered with ``prometheus_client``'s default registry; serve
them with :func:`django_redis_lock.contrib.prometheus.views.metrics` or any exporter of
``prometheus_client``. Every metric is labelled by the alias and the *family* of the lock
name (:mod:`~django_redis_lock.contrib.prometheus.families`), never by the name itself.

Without this app, nothing of ``prometheus_client`` is imported and the locks' hooks cost a
test of an empty list.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..._observe import Observer, observers
from ...backends.base import BaseLockBackend
from ...holds import held
from .families import default_family, family_of

__all__ = ["PREFIX", "LockMetrics", "default_family", "disable", "enable", "family_of"]

PREFIX = "django_redis_lock_"

#: Seconds: from a millisecond's wait or hold to a nightly job's hours.
DURATION_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 14400)
#: Seconds a renewal round trip takes.
ROUND_TRIP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class LockMetrics(Observer):
    """The collectors, fed by the locks' hooks; one instance per registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        lock_labels = ["alias", "family"]
        self.acquisitions = Counter(
            f"{PREFIX}acquisitions",
            "Acquires that ended, by outcome: acquired, timeout, refused (non-blocking), error.",
            [*lock_labels, "outcome"],
            registry=registry,
        )
        self.wait_seconds = Histogram(
            f"{PREFIX}wait_seconds",
            "Seconds an acquire took until it acquired, round trips included.",
            lock_labels,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.hold_seconds = Histogram(
            f"{PREFIX}hold_seconds",
            "Seconds from an owner's acquire to the release of its last hold.",
            lock_labels,
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.handoffs = Counter(
            f"{PREFIX}handoffs",
            "Locks that came to an owner of this process while it was queued as a waiter.",
            lock_labels,
            registry=registry,
        )
        self.lost_leases = Counter(
            f"{PREFIX}lost_leases",
            "Holds lost before their release, by reason.",
            [*lock_labels, "reason"],
            registry=registry,
        )
        self.renewals = Counter(
            f"{PREFIX}renewals",
            "Renewal round trips, by outcome: ok, or error (no answer).",
            ["alias", "outcome"],
            registry=registry,
        )
        self.renewed_leases = Counter(
            f"{PREFIX}renewed_leases",
            "Leases sent for renewal (one round trip renews every due lease of a server).",
            ["alias"],
            registry=registry,
        )
        self.renewal_seconds = Histogram(
            f"{PREFIX}renewal_seconds",
            "Seconds a renewal round trip took.",
            ["alias"],
            buckets=ROUND_TRIP_BUCKETS,
            registry=registry,
        )
        self.waiters = Gauge(
            f"{PREFIX}waiters",
            "Owners of this process queued for a lock now.",
            lock_labels,
            registry=registry,
        )
        registry.register(_HoldsCollector())
        # The labelled children, looked up once per label values: labels() takes a lock.
        self._children: dict[tuple[Any, ...], Any] = {}
        self._children_lock = threading.Lock()

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            with self._children_lock:
                child = self._children[key] = metric.labels(*labels)
        return child

    def acquire_ended(
        self, using: str, name: str, outcome: str, waited: float, handoff: bool
    ) -> None:
        family = family_of(name)
        self._child(self.acquisitions, using, family, outcome).inc()
        if outcome == "acquired":
            self._child(self.wait_seconds, using, family).observe(waited)
        if handoff:
            self._child(self.handoffs, using, family).inc()

    def waiting(self, using: str, name: str, change: int) -> None:
        self._child(self.waiters, using, family_of(name)).inc(change)

    def released(self, using: str, name: str, held_for: float) -> None:
        self._child(self.hold_seconds, using, family_of(name)).observe(held_for)

    def lost(self, using: str, name: str, held_for: float, reason: str) -> None:
        self._child(self.lost_leases, using, family_of(name), reason).inc()

    def renewed(self, backend: BaseLockBackend, leases: int, seconds: float, ok: bool) -> None:
        alias = alias_of(backend)
        self._child(self.renewals, alias, "ok" if ok else "error").inc()
        self._child(self.renewed_leases, alias).inc(leases)
        self._child(self.renewal_seconds, alias).observe(seconds)


class _HoldsCollector(Collector):
    """``django_redis_lock_holds``: the locks this process holds now, read at each scrape."""

    def collect(self) -> Iterator[Metric]:
        counts: dict[tuple[str, str], int] = {}
        for hold in list(held.values()):  # a copy: other threads take and drop holds
            if hold.lost_reason is None:
                key = (hold.lock.using, family_of(hold.lock.name))
                counts[key] = counts.get(key, 0) + 1
        gauge = GaugeMetricFamily(
            f"{PREFIX}holds",
            "Locks held by owners of this process now (a reentrant hold counts once).",
            labels=["alias", "family"],
        )
        for (alias, family), count in sorted(counts.items()):
            gauge.add_metric([alias, family], count)
        yield gauge


def alias_of(backend: BaseLockBackend) -> str:
    """Return the alias of ``locks`` that ``backend`` serves (``""`` if none does)."""
    from ...handler import locks

    for alias, built in list(locks._backends.items()):
        if built is backend:
            return alias
    return ""


_metrics: LockMetrics | None = None
_enabling = threading.Lock()


def enable(registry: CollectorRegistry = REGISTRY) -> LockMetrics:
    """Register the collectors (with ``registry``, the first time) and start feeding them."""
    global _metrics  # noqa: PLW0603  (one set of collectors per process)
    with _enabling:
        if _metrics is None:
            _metrics = LockMetrics(registry)
        if _metrics not in observers:
            observers.append(_metrics)
        return _metrics


def disable() -> None:
    """Stop feeding the collectors; they stay registered, with the counts they have."""
    with _enabling:
        if _metrics in observers:
            observers.remove(_metrics)
