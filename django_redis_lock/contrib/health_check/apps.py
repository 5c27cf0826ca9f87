"""The app of the django-health-check plugin, for projects that list it in ``INSTALLED_APPS``."""

from __future__ import annotations

from django.apps import AppConfig


class HealthCheckConfig(AppConfig):
    """Give the plugin a label of its own, and watch for lost leases from start-up."""

    name = "django_redis_lock.contrib.health_check"
    # Not "health_check": that is django-health-check's own label, listed beside this app.
    label = "django_redis_lock_health_check"
    verbose_name = "Lock health checks"

    def ready(self) -> None:
        from . import LockRenewal  # noqa: F401  (connects the receiver of lost leases)
