"""Django app configuration for django_redis_lock."""

from __future__ import annotations

from django.apps import AppConfig


class DjangoRedisLockConfig(AppConfig):
    """Register the system checks and the receiver that resets ``locks``."""

    name = "django_redis_lock"
    verbose_name = "Locks"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks, handler  # noqa: F401  (registration on import)
