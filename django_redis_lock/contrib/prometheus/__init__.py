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

import bisect
import itertools
import threading
from collections.abc import Iterator

from ..._core.extras import missing_extra

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
    from prometheus_client.utils import floatToGoString
except ImportError as exc:
    raise missing_extra(
        exc,
        feature="django_redis_lock.contrib.prometheus",
        package="prometheus_client",
        extra="prometheus",
    ) from exc

from ..._core.holds import held
from ..._core.observe import LossReason, Observer, observers
from ...backends.base import BaseLockBackend
from .families import default_family, family_of

__all__ = ["PREFIX", "LockMetrics", "default_family", "disable", "enable", "family_of"]

PREFIX = "django_redis_lock_"

#: Seconds: from a millisecond's wait or hold to a nightly job's hours.
DURATION_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 14400)
#: Seconds a renewal round trip takes.
ROUND_TRIP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class LockMetrics(Observer):
    """The collectors, fed by the locks' hooks; one instance per registry.

    What every acquire and release updates (acquisitions, wait and hold times, handoffs) is
    counted in plain numbers under one lock, and turned into Prometheus samples at each
    scrape: a ``prometheus_client`` counter or histogram update costs several times more,
    on the path every lock takes. The rarer events use ``prometheus_client``'s own metrics.
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], _Series] = {}
        registry.register(_SeriesCollector(self))
        self.lost_leases = Counter(
            f"{PREFIX}lost_leases",
            "Holds lost before their release, by reason.",
            ["alias", "family", "reason"],
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
            ["alias", "family"],
            registry=registry,
        )
        self.rate_limit_hits = Counter(
            f"{PREFIX}rate_limit_hits",
            "Hits a rate limit answered, by outcome: admitted, or refused (no room in time).",
            ["alias", "family", "outcome"],
            registry=registry,
        )
        registry.register(_HoldsCollector())

    def _of(self, using: str, name: str) -> _Series:
        key = (using, family_of(name))
        series = self._series.get(key)
        if series is None:
            with self._lock:
                series = self._series.setdefault(key, _Series())
        return series

    def acquire_ended(
        self, using: str, name: str, outcome: str, waited: float, handoff: bool
    ) -> None:
        series = self._of(using, name)
        with self._lock:
            series.outcomes[outcome] = series.outcomes.get(outcome, 0) + 1
            if outcome == "acquired":
                series.wait.observe(waited)
            if handoff:
                series.handoffs += 1

    def released(self, using: str, name: str, held_for: float) -> None:
        series = self._of(using, name)
        with self._lock:
            series.hold.observe(held_for)

    def waiting(self, using: str, name: str, change: int) -> None:
        self.waiters.labels(using, family_of(name)).inc(change)

    def lost(self, using: str, name: str, held_for: float, reason: LossReason) -> None:
        self.lost_leases.labels(using, family_of(name), reason.value).inc()

    def renewed(self, backend: BaseLockBackend, leases: int, seconds: float, ok: bool) -> None:
        alias = alias_of(backend)
        self.renewals.labels(alias, "ok" if ok else "error").inc()
        self.renewed_leases.labels(alias).inc(leases)
        self.renewal_seconds.labels(alias).observe(seconds)

    def rate_limited(self, using: str, name: str, admitted: bool) -> None:
        outcome = "admitted" if admitted else "refused"
        self.rate_limit_hits.labels(using, family_of(name), outcome).inc()

    def snapshot(self) -> list[tuple[tuple[str, str], _Series]]:
        """Return a copy of every (alias, family)'s numbers, taken at once."""
        with self._lock:
            return [(key, series.copy()) for key, series in sorted(self._series.items())]


class _Buckets:
    """A histogram's counts by bucket (not cumulative; the last is +Inf) and its sum."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(DURATION_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.sum += seconds

    def copy(self) -> _Buckets:
        copied = _Buckets()
        copied.counts, copied.sum = list(self.counts), self.sum
        return copied

    def samples(self) -> list[tuple[str, float]]:
        bounds = [*map(floatToGoString, DURATION_BUCKETS), "+Inf"]
        return list(zip(bounds, itertools.accumulate(self.counts), strict=True))


class _Series:
    """What the acquires and releases of one (alias, family) did."""

    __slots__ = ("handoffs", "hold", "outcomes", "wait")

    def __init__(self) -> None:
        self.outcomes: dict[str, int] = {}
        self.handoffs = 0
        self.wait = _Buckets()
        self.hold = _Buckets()

    def copy(self) -> _Series:
        copied = _Series()
        copied.outcomes, copied.handoffs = dict(self.outcomes), self.handoffs
        copied.wait, copied.hold = self.wait.copy(), self.hold.copy()
        return copied


class _SeriesCollector(Collector):
    """Acquisitions, wait and hold times and handoffs, as counted by :class:`LockMetrics`."""

    def __init__(self, metrics: LockMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        labels = ["alias", "family"]
        acquisitions = CounterMetricFamily(
            f"{PREFIX}acquisitions",
            "Acquires that ended, by outcome: acquired, timeout, refused (non-blocking), error.",
            labels=[*labels, "outcome"],
        )
        wait = HistogramMetricFamily(
            f"{PREFIX}wait_seconds",
            "Seconds an acquire took until it acquired, round trips included.",
            labels=labels,
        )
        hold = HistogramMetricFamily(
            f"{PREFIX}hold_seconds",
            "Seconds from an owner's acquire to the release of its last hold.",
            labels=labels,
        )
        handoffs = CounterMetricFamily(
            f"{PREFIX}handoffs",
            "Locks that came to an owner of this process while it was queued as a waiter.",
            labels=labels,
        )
        for key, series in self.metrics.snapshot():
            for outcome, count in sorted(series.outcomes.items()):
                acquisitions.add_metric([*key, outcome], count)
            wait.add_metric(list(key), series.wait.samples(), series.wait.sum)
            hold.add_metric(list(key), series.hold.samples(), series.hold.sum)
            handoffs.add_metric(list(key), series.handoffs)
        yield from (acquisitions, wait, hold, handoffs)


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
