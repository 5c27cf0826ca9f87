"""The app that turns the Prometheus metrics on: add it to ``INSTALLED_APPS``."""

from __future__ import annotations

from django.apps import AppConfig


class PrometheusConfig(AppConfig):
    """Enable the metrics when Django starts, checking the family rule on the way."""

    name = "django_redis_lock.contrib.prometheus"
    label = "django_redis_lock_prometheus"
    verbose_name = "Lock metrics"

    def ready(self) -> None:
        from . import enable
        from .families import family_rule

        family_rule()  # a bad LOCKS_METRICS_FAMILY fails at start-up, not on a lock's path
        enable()
